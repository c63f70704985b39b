package crashfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/malachi-log/malachi/store"
)

// ErrClosed is returned by the methods of a closed File.
var ErrClosed = errors.New("crashfs: file already closed")

// FS is an in-memory store.FS that can lose power (Crash). See the package
// doc for what survives a crash.
type FS struct {
	mu      sync.Mutex
	root    *node              // protected by mu
	nextIno uint64             // protected by mu
	clock   int64              // protected by mu: the logical time of ctimes
	syncErr func(string) error // protected by mu: SetSyncError's hook
	pebble  *vfs.MemFS
	// ArmCrash's: the step to crash at (-1: none), the steps taken, the
	// rng and the FS the crash left.
	armAt, steps int64      // protected by mu
	armRNG       *rand.Rand // protected by mu
	crashed      *FS        // protected by mu
	free         int64      // protected by mu: SetFree's; -1 unknown
}

// node is a file or a directory.
type node struct {
	ino   uint64
	dir   bool
	ctime int64
	// A file: data is what reads see (the page cache), durable what a
	// crash keeps. lost[i] says byte i was dirty when a sync failed and
	// has not been written since: it is never written back (persistable).
	data, durable []byte
	lost          []bool
	// A directory: its entries now and as last synced.
	kids, durableKids map[string]*node
}

// New returns an FS holding the directory root and its parents, durably,
// and nothing else; Pebble's file system (PebbleFS) holds the same
// directories.
func New(root string) *FS {
	f := &FS{root: &node{dir: true, kids: map[string]*node{}, durableKids: map[string]*node{}}, nextIno: 1,
		pebble: vfs.NewCrashableMem(), armAt: -1, free: -1}
	f.root.ino = f.ino()
	if err := f.MkdirAll(root, 0o755); err != nil {
		panic(err) // an in-memory MkdirAll of a clean path fails only on a bug
	}
	f.mu.Lock()
	f.eachDir(f.root, func(n *node) { n.durableKids = cloneKids(n.kids) })
	f.mu.Unlock()
	if err := f.pebble.MkdirAll(root, 0o755); err != nil {
		panic(err)
	}
	for d := filepath.Clean(root); ; d = filepath.Dir(d) {
		if dh, err := f.pebble.OpenDir(d); err == nil {
			_ = dh.Sync()
			_ = dh.Close()
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return f
}

// ForStore is New(dir) for a store.DB in dir: it also creates dir on the
// operating system, where the store takes its LOCK (flock, outside the
// seam); nothing else of the store's goes there.
func ForStore(dir string) (*FS, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("crashfs: the store directory's LOCK: %w", err)
	}
	return New(dir), nil
}

// PebbleFS is Pebble's crashable in-memory file system that Crash crashes
// with this one: the store opens its confirmation DB on it
// (store.PebbleFSer).
func (f *FS) PebbleFS() vfs.FS { return f.pebble }

// SetFree sets what FreeBytes answers (store.FreeSpacer): n bytes free,
// or unknown when n < 0 (the default). A store refuses confirmation writes
// below its Options.ConfirmMinFree: SetFree(0) is a full disk to it.
func (f *FS) SetFree(n int64) {
	f.mu.Lock()
	f.free = n
	f.mu.Unlock()
}

// FreeBytes answers what SetFree set, for any path.
func (f *FS) FreeBytes(string) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.free, f.free >= 0
}

// SetSyncError installs hook, called with the path of every file Sync or
// Datasync: when it returns an error, the sync fails with it as Linux's
// fsync(2) does after a write-back error: the file's dirty pages are
// marked clean, so they still read as written but are never written back,
// by a later sync or before a crash, unless written again. nil removes it.
func (f *FS) SetSyncError(hook func(path string) error) {
	f.mu.Lock()
	f.syncErr = hook
	f.mu.Unlock()
}

// Crash returns the FS a power loss at this instant leaves: the entries of
// each directory as of its last SyncDir, and the bytes of each file as of
// its last Sync (rng nil) or, with rng, per file either those, or what it
// holds now, or a torn mix of the two (a write-back cut in the middle).
// Pebble's file system is cloned the same way. f itself is unchanged and
// usable (a DB on it can still be closed); the two share nothing.
func (f *FS) Crash(rng *rand.Rand) *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashLocked(rng)
}

// ArmCrash makes the power fail just before the n-th (0-based) change from
// now on (a write, truncate, allocate, sync, create, remove, mkdir,
// directory sync or rename): Crashed then returns what that crash left,
// as Crash(rng) would have, while f goes on as if nothing happened (the
// process under test runs on, unaware). Calls to Pebble's file system
// are not counted.
func (f *FS) ArmCrash(n int64, rng *rand.Rand) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armAt, f.steps, f.armRNG, f.crashed = n, 0, rng, nil
}

// Crashed is the FS the crash ArmCrash armed left, or nil before it.
func (f *FS) Crashed() *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed
}

// Steps is the number of changes counted since ArmCrash.
func (f *FS) Steps() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.steps
}

// step counts one change, crashing first when it is the armed one.
// Caller holds mu.
func (f *FS) step() {
	if f.armAt >= 0 && f.steps == f.armAt && f.crashed == nil {
		f.crashed = f.crashLocked(f.armRNG)
	}
	f.steps++
}

// crashLocked is Crash. Caller holds mu.
func (f *FS) crashLocked(rng *rand.Rand) *FS {
	out := &FS{nextIno: f.nextIno, clock: f.clock + 1, armAt: -1, free: f.free}
	seen := map[*node]*node{} // a file durably under two names stays one file
	var walk func(n *node) *node
	walk = func(n *node) *node {
		if m, ok := seen[n]; ok {
			return m
		}
		m := &node{ino: n.ino, dir: n.dir, ctime: out.clock}
		seen[n] = m
		if n.dir {
			m.kids = map[string]*node{}
			for name, k := range n.durableKids {
				m.kids[name] = walk(k)
			}
			m.durableKids = cloneKids(m.kids)
			return m
		}
		m.data = crashData(n, rng)
		m.durable = cloneBytes(m.data)
		return m
	}
	out.root = walk(f.root)
	cfg := vfs.CrashCloneCfg{}
	if rng != nil {
		cfg.UnsyncedDataPercent = rng.IntN(101)
		cfg.RNG = rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	}
	out.pebble = f.pebble.CrashClone(cfg)
	return out
}

// crashData is what a crash leaves of file n's bytes.
func crashData(n *node, rng *rand.Rand) []byte {
	if rng == nil {
		return cloneBytes(n.durable)
	}
	live := persistable(n)
	switch rng.IntN(3) {
	case 0:
		return cloneBytes(n.durable)
	case 1:
		return live
	}
	// Torn: the first cut bytes of what is there now reached the disk,
	// the rest is as last synced; the size is either.
	cut := rng.IntN(len(live) + 1)
	size := len(n.durable)
	if rng.IntN(2) == 0 {
		size = len(live)
	}
	out := make([]byte, size)
	copy(out, n.durable)
	copy(out[:min(cut, size)], live)
	return out
}

// persistable is what a sync of file n writes now: its data, but the
// bytes a failed sync marked clean (unchanged since) as they are on disk.
func persistable(n *node) []byte {
	out := cloneBytes(n.data)
	for i := range out {
		if i < len(n.lost) && n.lost[i] {
			if i < len(n.durable) {
				out[i] = n.durable[i]
			} else {
				out[i] = 0
			}
		}
	}
	return out
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

func cloneKids(m map[string]*node) map[string]*node {
	out := make(map[string]*node, len(m))
	for k, n := range m {
		out[k] = n
	}
	return out
}

func (f *FS) ino() uint64 { f.nextIno++; return f.nextIno - 1 }

func (f *FS) tick() int64 { f.clock++; return f.clock }

func (f *FS) eachDir(n *node, fn func(*node)) {
	if !n.dir {
		return
	}
	fn(n)
	for _, k := range n.kids {
		f.eachDir(k, fn)
	}
}

func split(name string) []string {
	p := filepath.Clean("/" + name)
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

// lookup finds the node of name and its parent directory. Caller holds mu.
func (f *FS) lookup(name string) (parent, n *node, base string, err error) {
	parts := split(name)
	if len(parts) == 0 {
		return nil, f.root, "/", nil
	}
	dir := f.root
	for _, p := range parts[:len(parts)-1] {
		next := dir.kids[p]
		if next == nil {
			return nil, nil, "", syscall.ENOENT
		}
		if !next.dir {
			return nil, nil, "", syscall.ENOTDIR
		}
		dir = next
	}
	base = parts[len(parts)-1]
	return dir, dir.kids[base], base, nil
}

func pathErr(op, name string, err error) error { return &os.PathError{Op: op, Path: name, Err: err} }

// OpenFile opens name as os.OpenFile does, for O_RDONLY, O_WRONLY, O_RDWR,
// O_CREATE, O_EXCL and O_TRUNC.
func (f *FS) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	parent, n, base, err := f.lookup(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	switch {
	case n == nil && flag&os.O_CREATE == 0:
		return nil, pathErr("open", name, syscall.ENOENT)
	case n != nil && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", name, syscall.EEXIST)
	case n != nil && n.dir && flag&(os.O_WRONLY|os.O_RDWR) != 0:
		return nil, pathErr("open", name, syscall.EISDIR)
	case n == nil:
		f.step()
		n = &node{ino: f.ino(), ctime: f.tick()}
		parent.kids[base] = n
		parent.ctime = f.tick()
	}
	writable := flag&(os.O_WRONLY|os.O_RDWR) != 0
	if flag&os.O_TRUNC != 0 && writable && len(n.data) > 0 {
		f.step()
		n.data, n.ctime = n.data[:0], f.tick()
	}
	return &File{fs: f, n: n, name: name, writable: writable}, nil
}

// Remove removes a file or an empty directory.
func (f *FS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	parent, n, base, err := f.lookup(name)
	switch {
	case err != nil:
		return pathErr("remove", name, err)
	case n == nil:
		return pathErr("remove", name, syscall.ENOENT)
	case parent == nil:
		return pathErr("remove", name, syscall.EBUSY)
	case n.dir && len(n.kids) > 0:
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	f.step()
	delete(parent.kids, base)
	parent.ctime = f.tick()
	return nil
}

// Stat returns the information of name; Sys() is a *syscall.Stat_t with
// the device (always 1), the inode, the size and the ctime.
func (f *FS) Stat(name string) (os.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, n, base, err := f.lookup(name)
	if err == nil && n == nil {
		err = syscall.ENOENT
	}
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return n.info(base), nil
}

// ReadDir lists a directory, sorted by name.
func (f *FS) ReadDir(name string) ([]os.DirEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, n, _, err := f.lookup(name)
	switch {
	case err != nil:
		return nil, pathErr("readdir", name, err)
	case n == nil:
		return nil, pathErr("readdir", name, syscall.ENOENT)
	case !n.dir:
		return nil, pathErr("readdir", name, syscall.ENOTDIR)
	}
	out := make([]os.DirEntry, 0, len(n.kids))
	for base, k := range n.kids {
		out = append(out, fs.FileInfoToDirEntry(k.info(base)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// MkdirAll creates a directory and its parents; their entries are not
// durable until their parents are synced.
func (f *FS) MkdirAll(name string, perm os.FileMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	dir := f.root
	for _, p := range split(name) {
		next := dir.kids[p]
		if next == nil {
			f.step()
			next = &node{ino: f.ino(), dir: true, ctime: f.tick(), kids: map[string]*node{}, durableKids: map[string]*node{}}
			dir.kids[p] = next
			dir.ctime = f.tick()
		}
		if !next.dir {
			return pathErr("mkdir", name, syscall.ENOTDIR)
		}
		dir = next
	}
	return nil
}

// SyncDir makes the directory's entries, as they are now, durable.
func (f *FS) SyncDir(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, n, _, err := f.lookup(name)
	switch {
	case err != nil:
		return pathErr("fsync", name, err)
	case n == nil:
		return pathErr("fsync", name, syscall.ENOENT)
	case !n.dir:
		return pathErr("fsync", name, syscall.ENOTDIR)
	}
	f.step()
	n.durableKids = cloneKids(n.kids)
	return nil
}

// Rename moves oldpath to newpath, replacing a file there; it is durable
// when both directories are synced (each for its own entry).
func (f *FS) Rename(oldpath, newpath string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	op, n, ob, err := f.lookup(oldpath)
	if err == nil && (n == nil || op == nil) {
		err = syscall.ENOENT
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	np, old, nb, err := f.lookup(newpath)
	if err == nil && np == nil {
		err = syscall.EBUSY
	}
	if err == nil && old != nil && (old.dir || n.dir) {
		err = syscall.EEXIST
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	f.step()
	delete(op.kids, ob)
	np.kids[nb] = n
	op.ctime, np.ctime, n.ctime = f.tick(), f.tick(), f.tick()
	return nil
}

func (n *node) info(base string) os.FileInfo {
	return fileInfo{name: base, n: n, size: int64(len(n.data))}
}

type fileInfo struct {
	name string
	n    *node
	size int64
}

func (fi fileInfo) Name() string { return fi.name }
func (fi fileInfo) Size() int64  { return fi.size }
func (fi fileInfo) Mode() os.FileMode {
	if fi.n.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}
func (fi fileInfo) ModTime() time.Time { return time.Unix(0, fi.n.ctime) }
func (fi fileInfo) IsDir() bool        { return fi.n.dir }
func (fi fileInfo) Sys() any {
	return &syscall.Stat_t{Dev: 1, Ino: fi.n.ino, Size: fi.size, Ctim: syscall.NsecToTimespec(fi.n.ctime)}
}

// File is an open file of an FS. Its Fd is not a descriptor: code that
// needs one (splice, sendfile) cannot run on an FS.
type File struct {
	fs       *FS
	n        *node
	name     string
	writable bool
	closed   bool // protected by fs.mu
}

var _ store.File = (*File)(nil)
var _ store.Allocator = (*File)(nil)

func (h *File) check(op string, write bool) error {
	switch {
	case h.closed:
		return pathErr(op, h.name, ErrClosed)
	case write && !h.writable:
		return pathErr(op, h.name, syscall.EBADF)
	}
	return nil
}

// ReadAt reads what the page cache holds.
func (h *File) ReadAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("read", h.name, syscall.EINVAL)
	}
	if off >= int64(len(h.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, h.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt writes into the page cache, growing the file with zeros.
func (h *File) WriteAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("write", h.name, syscall.EINVAL)
	}
	h.fs.step()
	h.n.grow(off + int64(len(p)))
	copy(h.n.data[off:], p)
	for i := off; i < off+int64(len(p)) && i < int64(len(h.n.lost)); i++ {
		h.n.lost[i] = false
	}
	h.n.ctime = h.fs.tick()
	return len(p), nil
}

// markLost marks the bytes that differ from the durable ones lost: a
// write-back error dropped them. Bytes already lost stay lost.
func (n *node) markLost() {
	lost := make([]bool, len(n.data))
	for i := range n.data {
		lost[i] = i >= len(n.durable) || n.data[i] != n.durable[i] || (i < len(n.lost) && n.lost[i])
	}
	n.lost = lost
}

func (n *node) grow(size int64) {
	if size > int64(len(n.data)) {
		n.data = append(n.data, make([]byte, size-int64(len(n.data)))...)
	}
}

// Truncate sets the size in the page cache.
func (h *File) Truncate(size int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", h.name, syscall.EINVAL)
	}
	h.fs.step()
	if size < int64(len(h.n.data)) {
		h.n.data = h.n.data[:size:size]
		h.n.lost = h.n.lost[:min(int64(len(h.n.lost)), size)]
	}
	h.n.grow(size)
	h.n.ctime = h.fs.tick()
	return nil
}

// Allocate grows the file to at least off+n bytes (fallocate mode 0).
func (h *File) Allocate(off, n int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check("fallocate", true); err != nil {
		return err
	}
	h.fs.step()
	h.n.grow(off + n)
	h.n.ctime = h.fs.tick()
	return nil
}

// Sync makes the file's bytes and size durable (but not its name: that
// is its directory's SyncDir), or fails as SetSyncError says.
func (h *File) Sync() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check("fsync", false); err != nil {
		return err
	}
	h.fs.step()
	if h.fs.syncErr != nil {
		if err := h.fs.syncErr(h.name); err != nil {
			h.n.markLost()
			return pathErr("fsync", h.name, err)
		}
	}
	h.n.durable = persistable(h.n)
	if h.n.durable == nil {
		h.n.durable = []byte{}
	}
	return nil
}

// Datasync is Sync: both persist the bytes and the size.
func (h *File) Datasync() error { return h.Sync() }

// Stat returns the file's information.
func (h *File) Stat() (os.FileInfo, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check("stat", false); err != nil {
		return nil, err
	}
	return h.n.info(filepath.Base(h.name)), nil
}

// Fd is no descriptor: ^uintptr(0).
func (h *File) Fd() uintptr { return ^uintptr(0) }

// Name is the name the file was opened by.
func (h *File) Name() string { return h.name }

// Close closes the file; a second Close fails.
func (h *File) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return pathErr("close", h.name, ErrClosed)
	}
	h.closed = true
	return nil
}

// String names the FS for test logs.
func (f *FS) String() string { return fmt.Sprintf("crashfs(%d inodes)", f.nextIno-1) }
