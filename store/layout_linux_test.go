package store_test

import (
	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/store"
)

// statAt stats name relative to the directory descriptor dirfd.
func statAt(dirfd int, name string) (store.FileIdentity, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return store.FileIdentity{}, err
	}
	return store.FileIdentity{Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size}, nil
}
