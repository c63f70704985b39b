package store

import (
	"context"
	"io"
	"os"
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
