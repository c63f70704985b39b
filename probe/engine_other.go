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

// sysEngine calls stat(2) through os.Stat (lstat for a Batch) once per
// target (off Linux). Only targets relative to CWD are supported here.
type sysEngine struct{}

// NewSyscall returns the engine that stats one target per system call.
func NewSyscall() Engine { return sysEngine{} }

func (sysEngine) Kind() Kind   { return KindSyscall }
func (sysEngine) Close() error { return nil }

func (sysEngine) ProbeRange(ctx context.Context, b *Batch, from int, out []Result) error {
	if from < 0 || from+len(out) > b.Len() {
		return errors.New("probe: range past the end of the batch")
	}
	stat := os.Lstat
	if b.follow {
		stat = os.Stat
	}
	for j := range out {
		if err := ctx.Err(); err != nil {
			unanswered(out[j:], ErrDeadline, err)
			return nil
		}
		i := from + j
		dirfd, name := b.Entry(i)
		if _, ok := b.cname(i, new([]byte)); !ok {
			out[j] = Result{Err: fail(name, ErrFailed, syscall.EINVAL)}
			continue
		}
		if dirfd != CWD {
			out[j] = Result{Err: fail(name, ErrFailed, errors.ErrUnsupported)}
			continue
		}
		fi, err := stat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out[j] = Result{Err: fail(name, ErrNotExist, err)}
		case err != nil:
			out[j] = Result{Err: fail(name, ErrFailed, err)}
		default:
			r := Result{Size: fi.Size()}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				r.Dev, r.Ino = uint64(st.Dev), uint64(st.Ino)
			}
			out[j] = r
		}
	}
	return nil
}

// NewURing fails off Linux with an error matching uring.ErrUnavailable.
func NewURing(entries, maxWorkers uint32) (Engine, error) {
	_, err := uring.New(entries, uring.Options{MaxWorkers: maxWorkers})
	return nil, err
}
