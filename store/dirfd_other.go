//go:build !linux

package store

// openDirFDs opens nothing where O_PATH is not available: StatTarget
// answers -1 (a stat relative to it fails with EBADF).
func (db *DB) openDirFDs() error { return nil }

func (db *DB) closeDirFDs() {}
