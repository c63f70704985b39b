package store

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// openDirFDs opens a descriptor of every shard directory (O_PATH: it can
// only name the directory, for the *at calls of a prober), kept until
// Close. They are opened with open(2), not through Options.FS: the store
// never reads or writes through them.
func (db *DB) openDirFDs() error {
	for i, d := range db.shards {
		for {
			fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fmt.Errorf("open shard directory %s: %w", d, err)
			}
			db.dirfds[i].Store(int32(fd))
			break
		}
	}
	return nil
}

// closeDirFDs closes the shard directory descriptors and marks them -1.
func (db *DB) closeDirFDs() {
	for i := range db.dirfds {
		if fd := db.dirfds[i].Swap(-1); fd >= 0 {
			_ = unix.Close(int(fd))
		}
	}
}
