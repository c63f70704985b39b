package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FS is the file-system seam: the store reaches the disk only through it, so
// a test can fail the Nth write, sync or truncate (see store/errorfs).
// OSFS is the real one.
type FS interface {
	// OpenFile opens name as os.OpenFile does.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a file.
	Remove(name string) error
	// Stat returns the file's information; Sys() is a *syscall.Stat_t on
	// Unix systems, from which Identity takes the device and inode.
	Stat(name string) (os.FileInfo, error)
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]os.DirEntry, error)
	// MkdirAll creates a directory and its parents.
	MkdirAll(name string, perm os.FileMode) error
	// SyncDir makes the directory's entries durable (fsync of the directory).
	SyncDir(name string) error
	// Rename renames oldpath to newpath as os.Rename does (atomically
	// replacing newpath); the store renames only within one file system.
	Rename(oldpath, newpath string) error
}

// File is an open file of an FS.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync is fsync(2).
	Sync() error
	// Datasync is fdatasync(2) where the system has it, else Sync.
	Datasync() error
	// Truncate sets the file's size.
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	// Fd is the raw descriptor (for sendfile/splice); valid until Close.
	Fd() uintptr
	Name() string
}

// Allocator is an optional capability of a File: Allocate makes
// [off, off+n) allocated and grows the file's size to at least off+n
// (fallocate(2) mode 0 on Linux). A File without it is grown with Truncate.
type Allocator interface {
	Allocate(off, n int64) error
}

// PebbleFSer is an optional capability of an FS: the store opens its
// confirmation DB (Pebble) on PebbleFS() instead of the operating system's
// file system, so that a test's crash reaches the confirmations too (see
// store/crashfs). A nil answer means the operating system's.
type PebbleFSer interface {
	PebbleFS() vfs.FS
}

// FreeSpacer is an optional capability of an FS: FreeBytes is the space
// available under path, false when unknown. Without it the store asks the
// operating system (statfs) for the free space of its directory.
type FreeSpacer interface {
	FreeBytes(path string) (int64, bool)
}

// DirSyncer makes a directory's entries durable. The fsync package
// implements it with batching; by default the store syncs through its FS.
type DirSyncer interface {
	SyncDir(ctx context.Context, path string) error
}

// OSFS returns the FS of the operating system.
func OSFS() FS { return osFS{} }

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) Stat(name string) (os.FileInfo, error)        { return os.Stat(name) }
func (osFS) ReadDir(name string) ([]os.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) MkdirAll(name string, perm os.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) Rename(oldpath, newpath string) error         { return os.Rename(oldpath, newpath) }

func (osFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

type osFile struct{ *os.File }

func (f osFile) Datasync() error { return datasync(f.File) }

func (f osFile) Allocate(off, n int64) error { return allocate(f.File, off, n) }

// allocateFile grows f to cover [off, off+n), with the file's Allocator when
// it has one.
func allocateFile(f File, off, n int64) error {
	if a, ok := f.(Allocator); ok {
		return a.Allocate(off, n)
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() >= off+n {
		return nil
	}
	return f.Truncate(off + n)
}

// freeBytes is the space available under the store's directory, through
// the FS when it is a FreeSpacer.
func (db *DB) freeBytes() (int64, bool) {
	if f, ok := db.fs.(FreeSpacer); ok {
		return f.FreeBytes(db.dir)
	}
	return freeBytes(db.dir)
}

// mkdirDurable creates dir and its missing parents, then makes each new
// directory's entry durable by syncing its parent, top down: a store
// directory created by Open survives a power loss.
func mkdirDurable(fsys FS, dir string) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.SyncDir(filepath.Dir(missing[i])); err != nil {
			return fmt.Errorf("sync %s after creating %s: %w", filepath.Dir(missing[i]), missing[i], err)
		}
	}
	return nil
}

// sameFile reports whether a and b describe one file: the same device and
// inode when the FS gives them, else as os.SameFile says.
func sameFile(a, b os.FileInfo) bool {
	da, ia, oka := fileIDs(a)
	db, ib, okb := fileIDs(b)
	if oka && okb {
		return da == db && ia == ib
	}
	return os.SameFile(a, b)
}
