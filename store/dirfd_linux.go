package store

import (
	"errors"
	"fmt"

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

// openPath opens dir O_PATH.
func openPath(dir string) (int, error) {
	for {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("open directory %s: %w", dir, err)
		}
		return fd, nil
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
