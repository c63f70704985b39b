// Package errorfs wraps a store.FS and injects errors into chosen
// operations, in the spirit of Pebble's vfs/errorfs: a test fails the Nth
// write, sync or truncate of a given file and checks what the store does.
//
// Usage:
//
//	inj := errorfs.OnIndex(2, syscall.ENOSPC, errorfs.Ops(errorfs.Write), errorfs.PathMatch("*.seg"))
//	fsys := errorfs.Wrap(store.OSFS(), inj)
//	db, _ := store.Open(dir, store.Options{FS: fsys})
//	// the third write to a copy returns ENOSPC (as an *os.PathError)
//
// Invariants:
//
//  1. An operation that gets an injected error has no effect on the
//     underlying file system, except Close, which still closes the file
//     (so that no descriptor leaks) before returning the error.
//  2. Operations not selected by the injector pass through unchanged.
//  3. Counting injectors count only the operations they match, atomically:
//     the Nth match is deterministic even with concurrent callers (in the
//     order they reach the injector).
//
// An FS and its Files are safe for concurrent use when the wrapped FS is;
// the injector can be replaced at any time with SetInjector.
package errorfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/malachi-log/malachi/store"
)

// Kind is the kind of an operation.
type Kind int

// The operations an injector can select.
const (
	Open Kind = iota + 1
	Read
	Write
	Sync // Sync and Datasync of a file
	Truncate
	Allocate
	Stat // FS.Stat and File.Stat
	Remove
	ReadDir
	MkdirAll
	SyncDir
	Close
	Rename // Op.Path is the old path, Op.NewPath the new one
)

var kindNames = map[Kind]string{
	Open: "open", Read: "read", Write: "write", Sync: "sync", Truncate: "truncate",
	Allocate: "allocate", Stat: "stat", Remove: "remove", ReadDir: "readdir",
	MkdirAll: "mkdirall", SyncDir: "syncdir", Close: "close", Rename: "rename",
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Op is one operation about to run.
type Op struct {
	Kind Kind
	// Path is the file's or directory's path.
	Path string
	// Offset is the file offset of a Read or Write, the size of a
	// Truncate, the offset of an Allocate; 0 otherwise.
	Offset int64
	// NewPath is the new path of a Rename; "" otherwise.
	NewPath string
}

// ErrInjected is the error injected when an injector is given none.
var ErrInjected = errors.New("errorfs: injected error")

// Injector decides whether an operation fails, and with what.
type Injector interface {
	// MaybeError returns the error to inject into op, or nil.
	MaybeError(op Op) error
}

// InjectorFunc adapts a function to Injector.
type InjectorFunc func(Op) error

// MaybeError calls f.
func (f InjectorFunc) MaybeError(op Op) error { return f(op) }

// Matcher selects operations.
type Matcher func(Op) bool

// Ops matches operations of the given kinds.
func Ops(kinds ...Kind) Matcher {
	return func(op Op) bool {
		for _, k := range kinds {
			if op.Kind == k {
				return true
			}
		}
		return false
	}
}

// PathMatch matches operations whose path, or its base name, matches the
// filepath.Match pattern.
func PathMatch(pattern string) Matcher {
	return func(op Op) bool {
		if ok, _ := filepath.Match(pattern, op.Path); ok {
			return true
		}
		ok, _ := filepath.Match(pattern, filepath.Base(op.Path))
		return ok
	}
}

func matchAll(ms []Matcher, op Op) bool {
	for _, m := range ms {
		if !m(op) {
			return false
		}
	}
	return true
}

func orInjected(err error) error {
	if err == nil {
		return ErrInjected
	}
	return err
}

// Counter is an injector that counts the operations it matches.
type Counter struct {
	n      int64
	sticky bool
	err    error
	ms     []Matcher
	seen   atomic.Int64
	hits   atomic.Int64
}

// OnIndex fails only the n-th (0-based) operation matching every matcher,
// with err (ErrInjected if nil).
func OnIndex(n int, err error, ms ...Matcher) *Counter {
	return &Counter{n: int64(n), err: orInjected(err), ms: ms}
}

// FromIndex fails the n-th (0-based) matching operation and every matching
// one after it: a disk that stays full.
func FromIndex(n int, err error, ms ...Matcher) *Counter {
	return &Counter{n: int64(n), sticky: true, err: orInjected(err), ms: ms}
}

// Always fails every matching operation.
func Always(err error, ms ...Matcher) *Counter { return FromIndex(0, err, ms...) }

// MaybeError implements Injector.
func (c *Counter) MaybeError(op Op) error {
	if !matchAll(c.ms, op) {
		return nil
	}
	i := c.seen.Add(1) - 1
	if i == c.n || (c.sticky && i > c.n) {
		c.hits.Add(1)
		return c.err
	}
	return nil
}

// Seen is how many operations matched so far.
func (c *Counter) Seen() int64 { return c.seen.Load() }

// Injected is how many errors were injected so far.
func (c *Counter) Injected() int64 { return c.hits.Load() }

// FS wraps a store.FS.
type FS struct {
	fs  store.FS
	inj atomic.Pointer[injectorBox]
}

type injectorBox struct{ Injector }

// Wrap returns fs with inj's errors injected; inj may be nil (none).
func Wrap(fs store.FS, inj Injector) *FS {
	f := &FS{fs: fs}
	f.SetInjector(inj)
	return f
}

// PebbleFS is the wrapped FS's Pebble file system (store.PebbleFSer),
// not wrapped: injected errors reach the store's files only. nil when the
// wrapped FS has none.
func (f *FS) PebbleFS() vfs.FS {
	if p, ok := f.fs.(store.PebbleFSer); ok {
		return p.PebbleFS()
	}
	return nil
}

// SetInjector replaces the injector; nil injects nothing.
func (f *FS) SetInjector(inj Injector) { f.inj.Store(&injectorBox{inj}) }

func (f *FS) maybe(k Kind, path string, off int64) error {
	b := f.inj.Load()
	if b == nil || b.Injector == nil {
		return nil
	}
	err := b.MaybeError(Op{Kind: k, Path: path, Offset: off})
	if err == nil {
		return nil
	}
	return &os.PathError{Op: k.String(), Path: path, Err: err}
}

var _ store.FS = (*FS)(nil)

// OpenFile implements store.FS.
func (f *FS) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	if err := f.maybe(Open, name, 0); err != nil {
		return nil, err
	}
	file, err := f.fs.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &File{File: file, fs: f, path: name}, nil
}

// Remove implements store.FS.
func (f *FS) Remove(name string) error {
	if err := f.maybe(Remove, name, 0); err != nil {
		return err
	}
	return f.fs.Remove(name)
}

// Stat implements store.FS.
func (f *FS) Stat(name string) (os.FileInfo, error) {
	if err := f.maybe(Stat, name, 0); err != nil {
		return nil, err
	}
	return f.fs.Stat(name)
}

// ReadDir implements store.FS.
func (f *FS) ReadDir(name string) ([]os.DirEntry, error) {
	if err := f.maybe(ReadDir, name, 0); err != nil {
		return nil, err
	}
	return f.fs.ReadDir(name)
}

// MkdirAll implements store.FS.
func (f *FS) MkdirAll(name string, perm os.FileMode) error {
	if err := f.maybe(MkdirAll, name, 0); err != nil {
		return err
	}
	return f.fs.MkdirAll(name, perm)
}

// Rename implements store.FS. An injected error leaves both paths as they
// were.
func (f *FS) Rename(oldpath, newpath string) error {
	if b := f.inj.Load(); b != nil && b.Injector != nil {
		if err := b.MaybeError(Op{Kind: Rename, Path: oldpath, NewPath: newpath}); err != nil {
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
		}
	}
	return f.fs.Rename(oldpath, newpath)
}

// SyncDir implements store.FS.
func (f *FS) SyncDir(name string) error {
	if err := f.maybe(SyncDir, name, 0); err != nil {
		return err
	}
	return f.fs.SyncDir(name)
}

// File wraps a store.File.
type File struct {
	store.File
	fs   *FS
	path string
}

// ReadAt implements io.ReaderAt.
func (f *File) ReadAt(b []byte, off int64) (int, error) {
	if err := f.fs.maybe(Read, f.path, off); err != nil {
		return 0, err
	}
	return f.File.ReadAt(b, off)
}

// WriteAt implements io.WriterAt.
func (f *File) WriteAt(b []byte, off int64) (int, error) {
	if err := f.fs.maybe(Write, f.path, off); err != nil {
		return 0, err
	}
	return f.File.WriteAt(b, off)
}

// Sync implements store.File.
func (f *File) Sync() error {
	if err := f.fs.maybe(Sync, f.path, 0); err != nil {
		return err
	}
	return f.File.Sync()
}

// Datasync implements store.File.
func (f *File) Datasync() error {
	if err := f.fs.maybe(Sync, f.path, 0); err != nil {
		return err
	}
	return f.File.Datasync()
}

// Truncate implements store.File.
func (f *File) Truncate(size int64) error {
	if err := f.fs.maybe(Truncate, f.path, size); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// Stat implements store.File.
func (f *File) Stat() (os.FileInfo, error) {
	if err := f.fs.maybe(Stat, f.path, 0); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

// Close implements io.Closer.
func (f *File) Close() error {
	if err := f.fs.maybe(Close, f.path, 0); err != nil {
		_ = f.File.Close()
		return err
	}
	return f.File.Close()
}

// Allocate implements store.Allocator, through the wrapped file's Allocate
// when it has one, else by growing the file with Truncate.
func (f *File) Allocate(off, n int64) error {
	if err := f.fs.maybe(Allocate, f.path, off); err != nil {
		return err
	}
	if a, ok := f.File.(store.Allocator); ok {
		return a.Allocate(off, n)
	}
	fi, err := f.File.Stat()
	if err != nil {
		return err
	}
	if fi.Size() >= off+n {
		return nil
	}
	return f.File.Truncate(off + n)
}

var _ store.Allocator = (*File)(nil)
