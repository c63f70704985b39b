//go:build !linux

package probe

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"

	"github.com/malachi-log/malachi/internal/uring"
)

// sysEngine calls stat(2) through os.Stat once per path (off Linux).
type sysEngine struct{}

// NewSyscall returns the engine that stats one path per system call.
func NewSyscall() Engine { return sysEngine{} }

func (sysEngine) Kind() Kind   { return KindSyscall }
func (sysEngine) Close() error { return nil }

func (sysEngine) Probe(ctx context.Context, paths []string, out []Result) error {
	if len(out) < len(paths) {
		return errors.New("probe: result slice shorter than paths")
	}
	for i, path := range paths {
		if err := ctx.Err(); err != nil {
			unanswered(out[i:len(paths)], ErrDeadline, err)
			return nil
		}
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out[i] = Result{Err: fail(path, ErrNotExist, err)}
		case err != nil:
			out[i] = Result{Err: fail(path, ErrFailed, err)}
		default:
			r := Result{Size: fi.Size()}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				r.Dev, r.Ino = uint64(st.Dev), uint64(st.Ino)
			}
			out[i] = r
		}
	}
	return nil
}

// NewURing fails off Linux with an error matching uring.ErrUnavailable.
func NewURing(entries, maxWorkers uint32) (Engine, error) {
	_, err := uring.New(entries, uring.Options{MaxWorkers: maxWorkers})
	return nil, err
}
