package store

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// allocate uses fallocate mode 0, which grows the visible size; a file
// system without fallocate falls back to ftruncate.
func allocate(f *os.File, off, n int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, off, n)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS):
			fi, serr := f.Stat()
			if serr != nil {
				return serr
			}
			if fi.Size() >= off+n {
				return nil
			}
			return f.Truncate(off + n)
		default:
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
	}
}

// freeBytes is the space available to the caller on path's file system.
func freeBytes(path string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}

// osStamp stats path with stat(2) into the stack: no allocation.
func osStamp(path string) (fileStamp, bool) {
	var st unix.Stat_t
	for {
		err := unix.Stat(path, &st)
		if err == nil {
			return fileStamp{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, ctime: st.Ctim.Nano()}, true
		}
		if !errors.Is(err, unix.EINTR) {
			return fileStamp{}, false
		}
	}
}
