//go:build !linux

package store

import "os"

func datasync(f *os.File) error { return f.Sync() }

func allocate(f *os.File, off, n int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() >= off+n {
		return nil
	}
	return f.Truncate(off + n)
}

func freeBytes(string) (int64, bool) { return 0, false }

// osStamp stats path through os.Stat.
func osStamp(path string) (fileStamp, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, false
	}
	return stampOf(fi)
}
