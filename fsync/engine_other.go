//go:build !linux

package fsync

import (
	"os"
	"sync/atomic"
	"syscall"

	"github.com/malachi-log/malachi/internal/uring"
)

func openForSync(path string, dir bool) (int, error) {
	fd, err := syscall.Open(path, os.O_RDONLY, 0)
	if err != nil {
		return -1, err
	}
	if dir {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err == nil && st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			syscall.Close(fd)
			return -1, syscall.ENOTDIR
		}
	}
	return fd, nil
}

func closeFD(fd int) { _ = syscall.Close(fd) }

type sysEngine struct{ closed atomic.Bool }

// NewSyscall returns the engine that syncs one descriptor per system call.
func NewSyscall() Engine { return &sysEngine{} }

func (e *sysEngine) Kind() Kind   { return KindSyscall }
func (e *sysEngine) Close() error { e.closed.Store(true); return nil }

func (e *sysEngine) Sync(fds []int, dataOnly []bool, errs []error) {
	for i, fd := range fds {
		if e.closed.Load() {
			errs[i] = ErrClosed
			continue
		}
		errs[i] = syscall.Fsync(fd)
	}
}

// NewURing fails off Linux with an error matching uring.ErrUnavailable.
func NewURing(entries, maxWorkers uint32) (Engine, error) {
	_, err := uring.New(entries, uring.Options{MaxWorkers: maxWorkers})
	return nil, err
}
