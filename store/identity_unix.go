//go:build unix

package store

import (
	"os"
	"syscall"
)

func fileIDs(fi os.FileInfo) (dev, ino uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true
}

// fileChanged returns the file's status change time (ctime) in
// nanoseconds: every write, truncate, rename or attribute change moves it.
func fileChanged(fi os.FileInfo) (ns int64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Ctim.Nano(), true
}
