package store

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openStatDirs opens copies and every shard directory with open(2)
// (O_PATH: the descriptors can only name the directories), not through
// Options.FS: the store never reads or writes through them. A missing
// shard is answered by the descriptor of copies.
func openStatDirs(copies string, shards []string, d *StatDirs) error {
	base, err := openPath(copies)
	if err != nil {
		return err
	}
	for i, p := range shards {
		fd, err := openPath(p)
		switch {
		case err == nil:
			d.fds[i] = int32(fd)
		case errors.Is(err, unix.ENOENT):
			d.fds[i] = int32(base)
		default:
			for _, fd := range d.fds[:i] {
				if int(fd) != base {
					_ = unix.Close(int(fd))
				}
			}
			_ = unix.Close(base)
			return err
		}
	}
	d.base, d.open = int32(base), true
	return nil
}

// atFDCWD is AT_FDCWD as a system call argument.
var atFDCWD = func() uintptr { fd := unix.AT_FDCWD; return uintptr(fd) }()

// openPath opens dir O_PATH. It allocates only on error: the path is
// copied into a stack buffer, NUL-terminated, for openat(2) (a probe opens
// 257 directories; unix.Open would allocate for each).
func openPath(dir string) (int, error) {
	var buf [512]byte
	if len(dir) >= len(buf) || strings.IndexByte(dir, 0) >= 0 {
		return -1, fmt.Errorf("open directory %s: %w", dir, unix.ENAMETOOLONG)
	}
	copy(buf[:], dir)
	for {
		fd, _, en := unix.Syscall6(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(&buf[0])),
			uintptr(unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC), 0, 0, 0)
		if en == unix.EINTR {
			continue
		}
		if en != 0 {
			return -1, fmt.Errorf("open directory %s: %w", dir, en)
		}
		return int(fd), nil
	}
}

// closeStatDirs closes what openStatDirs opened, copies/ once.
func closeStatDirs(d *StatDirs) {
	for _, fd := range d.fds {
		if fd != d.base {
			_ = unix.Close(int(fd))
		}
	}
	_ = unix.Close(int(d.base))
}
