//go:build !linux

package fsync

import (
	"os"
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

// syncFD fsyncs fd; elsewhere than Linux there is no data-only variant
// in package syscall, so dataOnly syncs everything.
func syncFD(fd int, _ bool) error { return syscall.Fsync(fd) }

// NewURing fails off Linux with an error matching uring.ErrUnavailable.
func NewURing(entries, maxWorkers uint32) (Engine, error) {
	_, err := uring.New(entries, uring.Options{MaxWorkers: maxWorkers})
	return nil, err
}
