package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
)

// Options configures a DB. The zero value is usable: the OS file system, no
// logging, directory syncs through the FS, no preallocation.
type Options struct {
	// FS is the file-system seam; nil means OSFS().
	FS FS
	// Logger receives the store's and Pebble's messages; the zero Logger
	// discards them. It is the host's logger, without a "component" field:
	// the store adds component=store, Pebble's lines component=pebble.
	Logger zerolog.Logger
	// DirSyncer syncs a copy's shard directory; nil means FS.SyncDir.
	DirSyncer DirSyncer
	// Preallocate, when > 0, grows an active copy's file in steps of this
	// many bytes ahead of its frames (the tail reads as zeros).
	Preallocate int64
	// ConfirmMinFree is the free space, in bytes, below which the store
	// neither opens nor writes the confirmation DB (Pebble treats a failed
	// write as fatal); 0 means DefaultConfirmMinFree, negative means no
	// check.
	ConfirmMinFree int64
}

// DefaultConfirmMinFree is the default Options.ConfirmMinFree.
const DefaultConfirmMinFree = 4 << 20

// Seal is what Seal fixed: the copy's offset range, frame bytes and checksum.
type Seal struct {
	StartOffset uint64
	Length      uint64
	ByteSize    int64
	Checksum    meta.Checksum
}

// DB is one broker's copies on disk, in <dir>/copies/<shard>, and their
// confirmation state in <dir>/confirm (Pebble). See the package doc for the
// invariants and the concurrency contract.
type DB struct {
	dir    string
	copies string
	shards [Shards]string // shards[i] is the path of shard directory i
	fs     FS
	log    zerolog.Logger
	host   zerolog.Logger // Options.Logger, the parent of Pebble's logger
	syncer DirSyncer
	pre    int64
	// conf is opened on first use (confirmDB). Protected by confMu.
	confMu sync.RWMutex
	conf   *pebble.DB
	// confirmed mirrors conf: the confirmed file identity of each copy,
	// loaded when conf opens and changed only after a durable write to
	// it, so Confirmed never reads Pebble. Protected by confMu.
	confirmed map[meta.SegmentID]FileIdentity
	// confVersion changes whenever confirmed does (ConfirmationsVersion).
	confVersion atomic.Uint64
	// copiesVersion changes whenever m gains or loses a copy
	// (CopiesVersion).
	copiesVersion atomic.Uint64
	minFree       int64
	// confFailed is set when Pebble reported a fatal error.
	confFailed atomic.Pointer[failure]

	closed atomic.Bool
	bufs   sync.Pool
	lock   io.Closer // flock on dir/LOCK

	mu sync.RWMutex // protects m
	m  map[meta.SegmentID]*copyState

	// latched mirrors the latch of every latched copy in m, for
	// ProbeFacts: small (latches are rare), so a probe's lookups in it stay
	// in cache where m's would miss; nLatched is its size, so that a probe
	// of a store with no latched copy skips it. Written under the copy's
	// mu, then latchedMu.
	latchedMu sync.RWMutex
	latched   map[meta.SegmentID]*latchError
	nLatched  atomic.Int64
}

// copyState is the in-memory state of one copy. All fields are protected by
// mu.
type copyState struct {
	mu   sync.Mutex
	id   meta.SegmentID
	path string

	gone   bool // removed from DB.m: every request refuses
	loaded bool // the fields below reflect the file
	held   bool // by a Target
	latch  error

	// An active copy is open for appends in this process.
	// INVARIANT: active => f != nil && !sealed.
	active bool
	f      File
	sealed bool // a valid footer ends the frames: fenced

	start      uint64
	startKnown bool
	frames     uint64
	end        int64  // bytes of valid frames
	crc        uint32 // CRC32C of frames [0, end); valid when active
	alloc      int64  // file size (preallocated) when active
	footer     Footer // when sealed
	scratch    []byte

	// settled remembers the file as this process last settled it (see
	// settledMark); cleared whenever the process opens the file to write.
	settled settledMark
	// synced: this process has made the file's bytes and its directory
	// entry durable since Open and not written to the file since
	// (invariant 10). A copy read from the page cache after a restart is
	// not: a process that died before its fsync, or an fsync that failed,
	// may have left bytes there that no disk holds.
	synced bool
}

// Open opens the store in dir, creating dir/copies, its shard directories
// and dir/confirm if needed. A store of an older format is migrated first
// (see the package doc); a newer one is refused with ErrFormat. Existing
// copies are registered by name and read lazily, on first use: no copy is
// latched after Open.
func Open(dir string, opts Options) (*DB, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: Open: empty directory", ErrInvalid)
	}
	if opts.ConfirmMinFree == 0 {
		opts.ConfirmMinFree = DefaultConfirmMinFree
	}
	if opts.ConfirmMinFree < 0 {
		opts.ConfirmMinFree = 0
	}
	if opts.Preallocate < 0 {
		return nil, fmt.Errorf("%w: Options.Preallocate %d is negative", ErrInvalid, opts.Preallocate)
	}
	fsys := opts.FS
	if fsys == nil {
		fsys = OSFS()
	}
	db := &DB{
		dir:     dir,
		copies:  filepath.Join(dir, "copies"),
		fs:      fsys,
		log:     opts.Logger.With().Str("component", "store").Logger(),
		host:    opts.Logger,
		syncer:  opts.DirSyncer,
		pre:     opts.Preallocate,
		minFree: opts.ConfirmMinFree,
		m:       make(map[meta.SegmentID]*copyState),
	}
	for i := range db.shards {
		db.shards[i] = filepath.Join(db.copies, shardNames[i])
	}
	db.bufs.New = func() any { b := make([]byte, scanBufSize); return &b }
	if err := mkdirDurable(fsys, dir); err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	db.lock = lock
	if err := db.prepareLayout(); err != nil {
		lock.Close()
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	if err := db.loadShards(); err != nil {
		lock.Close()
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	return db, nil
}

// Close closes every open file and the confirmation DB. Later requests
// return ErrClosed.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	db.mu.Lock()
	cs := make([]*copyState, 0, len(db.m))
	for _, c := range db.m {
		cs = append(cs, c)
	}
	db.mu.Unlock()
	var errs []error
	for _, c := range cs {
		c.mu.Lock()
		if c.f != nil {
			if err := c.f.Close(); err != nil {
				errs = append(errs, err)
			}
			c.f, c.active = nil, false
		}
		c.mu.Unlock()
	}
	db.confMu.Lock()
	if db.conf != nil {
		if err := db.conf.Close(); err != nil {
			errs = append(errs, err)
		}
		db.conf, db.confirmed = nil, nil
		db.confVersion.Add(1)
	}
	db.confMu.Unlock()
	if err := db.lock.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Path returns the file path of the copy of id (whether or not it exists):
// <dir>/copies/<shard>/<id>.seg (see Shard).
func (db *DB) Path(id meta.SegmentID) string {
	return filepath.Join(db.shards[Shard(id)], string(id)+segSuffix)
}

// List returns the ids of the copies the store holds, sorted.
func (db *DB) List() []meta.SegmentID {
	db.mu.RLock()
	ids := make([]meta.SegmentID, 0, len(db.m))
	for id := range db.m {
		ids = append(ids, id)
	}
	db.mu.RUnlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// LatchErr returns nil unless the copy is latched; then an error wrapping
// ErrLatched and the I/O error that latched it.
func (db *DB) LatchErr(id meta.SegmentID) error {
	c := db.copyOf(id)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latch
}

// copyOf is the copy of id the store knows, unlocked (nil: none).
func (db *DB) copyOf(id meta.SegmentID) *copyState {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return db.m[id]
}

func (db *DB) getBuf() *[]byte  { return db.bufs.Get().(*[]byte) }
func (db *DB) putBuf(b *[]byte) { db.bufs.Put(b) }

// acquire finds and locks the copy of id, refusing a closed DB, a bad id, an
// unknown, latched or held copy. The caller unlocks c.mu.
func (db *DB) acquire(op string, id meta.SegmentID) (*copyState, error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, op, err)
	}
	if db.closed.Load() {
		return nil, fmt.Errorf("%w: %s %s", ErrClosed, op, id)
	}
	c := db.copyOf(id)
	if c == nil {
		return nil, fmt.Errorf("%w: %s %s", ErrUnknownCopy, op, id)
	}
	c.mu.Lock()
	if err := db.usable(op, c); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	return c, nil
}

// usable checks a locked copy.
func (db *DB) usable(op string, c *copyState) error {
	switch {
	case db.closed.Load():
		return fmt.Errorf("%w: %s %s", ErrClosed, op, c.id)
	case c.gone:
		return fmt.Errorf("%w: %s %s", ErrUnknownCopy, op, c.id)
	case c.latch != nil:
		return fmt.Errorf("%s %s: %w", op, c.id, c.latch)
	case c.held:
		return fmt.Errorf("%w: %s %s: held by a catch-up target", ErrBusy, op, c.id)
	}
	return nil
}

// fail latches c with the I/O error err of op and returns the latch error.
// The caller holds c.mu.
func (db *DB) fail(c *copyState, op string, err error) error {
	if c.latch == nil {
		le := &latchError{id: string(c.id), op: op, cause: err}
		c.latch = le
		db.latchedMu.Lock()
		if db.latched == nil {
			db.latched = map[meta.SegmentID]*latchError{}
		}
		db.latched[c.id] = le
		db.nLatched.Store(int64(len(db.latched)))
		db.latchedMu.Unlock()
		db.log.Error().Str("segment", string(c.id)).Str("op", op).Err(err).Msg("store: copy latched")
		if c.f != nil {
			_ = c.f.Close()
			c.f, c.active = nil, false
		}
	}
	return c.latch
}

// forget removes a copy whose file is gone from the map. Caller holds c.mu.
func (db *DB) forget(c *copyState) {
	c.gone = true
	if c.latch != nil {
		db.latchedMu.Lock()
		if le, ok := db.latched[c.id]; ok && le == c.latch {
			delete(db.latched, c.id)
		}
		db.nLatched.Store(int64(len(db.latched)))
		db.latchedMu.Unlock()
	}
	if c.f != nil {
		_ = c.f.Close()
		c.f, c.active = nil, false
	}
	db.mu.Lock()
	if db.m[c.id] == c {
		delete(db.m, c.id)
		db.copiesVersion.Add(1)
	}
	db.mu.Unlock()
}

// openFile opens the copy's file. A missing file forgets the copy and
// returns ErrUnknownCopy; any other error latches it.
func (db *DB) openFile(c *copyState, op string, flag int) (File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		c.settled = settledMark{}
	}
	f, err := db.fs.OpenFile(c.path, flag, 0o644)
	if err == nil {
		return f, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		db.forget(c)
		return nil, fmt.Errorf("%w: %s %s: file gone: %w", ErrUnknownCopy, op, c.id, err)
	}
	return nil, db.fail(c, op, err)
}

// scanFile scans f. An I/O error latches c.
func (db *DB) scanFile(c *copyState, op string, f File, o scanOpts) (scanResult, error) {
	fi, err := f.Stat()
	if err != nil {
		return scanResult{}, db.fail(c, op, err)
	}
	b := db.getBuf()
	defer db.putBuf(b)
	res, err := scan(f, fi.Size(), o, *b)
	if err != nil {
		return res, db.fail(c, op, err)
	}
	return res, nil
}

// adopt records a scan's result as the copy's state.
func (c *copyState) adopt(r scanResult) {
	c.loaded = true
	c.sealed = r.Footer
	c.footer = r.footer
	c.start, c.startKnown = r.start, r.startKnown
	c.frames = r.Frames
	c.end = r.Bytes
	c.crc = r.crc
}

// view runs fn on an open handle of the copy: the active one, or a
// read-only one opened for the call. The caller holds c.mu.
func (db *DB) view(c *copyState, op string, fn func(File) error) error {
	if c.f != nil {
		return fn(c.f)
	}
	f, err := db.openFile(c, op, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	return fn(f)
}

// syncShard makes the entries of the shard directory of id durable,
// through Options.DirSyncer when set.
func (db *DB) syncShard(id meta.SegmentID) error {
	d := db.shards[Shard(id)]
	if db.syncer != nil {
		return db.syncer.SyncDir(context.Background(), d)
	}
	return db.fs.SyncDir(d)
}

// syncDir makes the copy's shard directory durable; an error latches c.
func (db *DB) syncDir(c *copyState, op string) error {
	if err := db.syncShard(c.id); err != nil {
		return db.fail(c, op+": directory sync", err)
	}
	return nil
}

// Create makes a new, empty, active copy of id whose first frame will carry
// startOffset, preallocated by Options.Preallocate, with its directory entry
// synced. It returns ErrExists if the store or the directory already holds
// a copy of id.
func (db *DB) Create(id meta.SegmentID, startOffset uint64) error {
	if err := id.Validate(); err != nil {
		return fmt.Errorf("%w: create: %w", ErrInvalid, err)
	}
	if db.closed.Load() {
		return fmt.Errorf("%w: create %s", ErrClosed, id)
	}
	db.mu.Lock()
	if db.m[id] != nil {
		db.mu.Unlock()
		return fmt.Errorf("%w: create %s", ErrExists, id)
	}
	c := &copyState{id: id, path: db.Path(id)}
	c.mu.Lock()
	defer c.mu.Unlock()
	db.m[id] = c
	db.copiesVersion.Add(1)
	db.mu.Unlock()

	f, err := db.fs.OpenFile(c.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		db.mu.Lock()
		delete(db.m, id)
		db.copiesVersion.Add(1)
		db.mu.Unlock()
		c.gone = true
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: create %s: %w", ErrExists, id, err)
		}
		return fmt.Errorf("store: create %s: %w", id, err)
	}
	c.f, c.active, c.loaded = f, true, true
	c.start, c.startKnown = startOffset, true
	if db.pre > 0 {
		if err := allocateFile(f, 0, db.pre); err != nil {
			return db.fail(c, "create: preallocate", err)
		}
		c.alloc = db.pre
	}
	return db.syncDir(c, "create")
}

// load reads the copy's state from its file if not yet known.
func (db *DB) load(c *copyState, op string) error {
	if c.loaded {
		return nil
	}
	return db.view(c, op, func(f File) error {
		r, err := db.scanFile(c, op, f, scanOpts{limit: -1})
		if err != nil {
			return err
		}
		c.adopt(r)
		return nil
	})
}

// resume makes an unsealed copy that is not active (reopened after a
// restart) active again: its torn or preallocated tail is cut at the
// durable end so that new frames follow the last valid one.
func (db *DB) resume(c *copyState, op string) error {
	if c.active {
		return nil
	}
	if c.loaded && c.sealed {
		return fmt.Errorf("%w: %s %s: sealed copy refuses appends", ErrSealed, op, c.id)
	}
	f, err := db.openFile(c, op, os.O_RDWR)
	if err != nil {
		return err
	}
	r, err := db.scanFile(c, op, f, scanOpts{limit: -1, start: c.start, startKnown: c.startKnown, whole: true})
	if err != nil {
		f.Close()
		return err
	}
	c.adopt(r)
	if r.Footer {
		f.Close()
		return fmt.Errorf("%w: %s %s: sealed copy refuses appends", ErrSealed, op, c.id)
	}
	c.synced = false
	if r.FileSize != r.Bytes {
		if err := f.Truncate(r.Bytes); err != nil {
			f.Close()
			return db.fail(c, op+": truncate to durable end", err)
		}
	}
	c.f, c.active, c.alloc = f, true, r.Bytes
	return nil
}

// RestoreStart tells the copy of id the offset its first frame carries,
// which a copy reopened without frames cannot know from its file (Append
// and Seal refuse such a copy). It changes nothing on a copy that knows
// its start already, and returns ErrInvalid naming both when that start is
// another. The caller takes start from the segment's metadata.
func (db *DB) RestoreStart(id meta.SegmentID, start uint64) error {
	c, err := db.acquire("restore start", id)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	if err := db.load(c, "restore start"); err != nil {
		return err
	}
	switch {
	case !c.startKnown:
		c.start, c.startKnown = start, true
	case c.start != start:
		return fmt.Errorf("%w: restore start %s: the copy starts at offset %d, not %d", ErrInvalid, id, c.start, start)
	}
	return nil
}

// Append writes one frame holding payload at the end of the active copy of
// id and returns its offset. The frame is acknowledged only by a later Sync.
// Errors: ErrUnknownCopy, ErrSealed (fenced), ErrLatched (an I/O error now
// or earlier latched the copy), ErrBusy, ErrClosed, ErrInvalid (payload
// larger than MaxPayload).
func (db *DB) Append(id meta.SegmentID, payload []byte) (uint64, error) {
	return db.append(id, payload, nil)
}

// AppendAt is Append of the frame at store offset want: a copy whose next
// frame is at another offset refuses it with ErrNotNext and writes
// nothing, so that a writer that lost its place (a leader whose view of
// the copy is stale) cannot put a frame at an offset the copies do not
// agree on.
func (db *DB) AppendAt(id meta.SegmentID, want uint64, payload []byte) error {
	_, err := db.append(id, payload, &want)
	return err
}

// append is Append, and AppendAt when want is not nil.
func (db *DB) append(id meta.SegmentID, payload []byte, want *uint64) (uint64, error) {
	if len(payload) > MaxPayload {
		return 0, fmt.Errorf("%w: append %s: payload of %d bytes exceeds %d", ErrInvalid, id, len(payload), MaxPayload)
	}
	c, err := db.acquire("append", id)
	if err != nil {
		return 0, err
	}
	defer c.mu.Unlock()
	if err := db.resume(c, "append"); err != nil {
		return 0, err
	}
	if !c.startKnown {
		return 0, fmt.Errorf("%w: append %s: empty copy of unknown start offset (reopened); settle or recreate it", ErrInvalid, id)
	}
	off := c.start + c.frames
	if want != nil && *want != off {
		return 0, fmt.Errorf("%w: append %s at offset %d: the copy's next frame is at offset %d", ErrNotNext, id, *want, off)
	}
	c.scratch = AppendFrame(c.scratch[:0], off, payload)
	n := int64(len(c.scratch))
	if db.pre > 0 && c.end+n > c.alloc {
		step := db.pre
		for c.end+n > c.alloc+step {
			step += db.pre
		}
		if err := allocateFile(c.f, c.alloc, step); err != nil {
			return 0, fmt.Errorf("append %s at byte %d: %w", id, c.end, db.fail(c, "append: preallocate", err))
		}
		c.alloc += step
	}
	if _, err := c.f.WriteAt(c.scratch, c.end); err != nil {
		return 0, fmt.Errorf("append %s at byte %d: %w", id, c.end, db.fail(c, "append", err))
	}
	c.crc = crc32Update(c.crc, c.scratch)
	c.end += n
	if c.end > c.alloc {
		c.alloc = c.end
	}
	c.frames++
	if cap(c.scratch) > 1<<20 {
		c.scratch = nil
	}
	return off, nil
}

// Sync makes every frame appended to the copy before it durable
// (fdatasync): those frames are acknowledged. On a copy that is not active
// it does nothing. An error latches the copy.
func (db *DB) Sync(id meta.SegmentID) error {
	c, err := db.acquire("sync", id)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	if !c.active {
		return nil
	}
	if err := c.f.Datasync(); err != nil {
		return db.fail(c, "sync", err)
	}
	return nil
}

// Seal ends the copy of id: it writes the seal footer after the last frame,
// cuts the preallocated tail, syncs the file and the directory and fences
// the copy (later appends return ErrSealed). On a copy already sealed it
// returns the recorded seal and changes nothing.
func (db *DB) Seal(id meta.SegmentID) (Seal, error) {
	c, err := db.acquire("seal", id)
	if err != nil {
		return Seal{}, err
	}
	defer c.mu.Unlock()
	if err := db.load(c, "seal"); err != nil {
		return Seal{}, err
	}
	if c.sealed {
		if err := db.syncSealed(c, "seal"); err != nil {
			return Seal{}, err
		}
		f := c.footer
		return Seal{StartOffset: f.StartOffset, Length: f.Length, ByteSize: f.ByteSize, Checksum: meta.CRC32C(f.FramesCRC)}, nil
	}
	if err := db.resume(c, "seal"); err != nil {
		return Seal{}, err
	}
	if !c.startKnown {
		return Seal{}, fmt.Errorf("%w: seal %s: empty copy of unknown start offset (reopened); use Settle with the segment", ErrInvalid, id)
	}
	ft := Footer{StartOffset: c.start, Length: c.frames, ByteSize: c.end, FramesCRC: c.crc}
	if err := db.writeFooter(c, "seal", c.f, ft); err != nil {
		return Seal{}, err
	}
	if err := c.f.Close(); err != nil {
		c.f, c.active = nil, false
		return Seal{}, db.fail(c, "seal: close", err)
	}
	c.f, c.active = nil, false
	c.sealed, c.footer = true, ft
	if err := db.syncDir(c, "seal"); err != nil {
		return Seal{}, err
	}
	c.synced = true
	db.mark(c, ft)
	return Seal{StartOffset: ft.StartOffset, Length: ft.Length, ByteSize: ft.ByteSize, Checksum: meta.CRC32C(ft.FramesCRC)}, nil
}

// writeFooter writes ft at ft.ByteSize, cuts the file just after it and
// fsyncs the file.
func (db *DB) writeFooter(c *copyState, op string, f File, ft Footer) error {
	b := AppendFooter(nil, ft)
	if _, err := f.WriteAt(b, ft.ByteSize); err != nil {
		return db.fail(c, op+": write footer", err)
	}
	if err := f.Truncate(ft.ByteSize + FooterSize); err != nil {
		return db.fail(c, op+": truncate", err)
	}
	if err := f.Sync(); err != nil {
		return db.fail(c, op+": sync", err)
	}
	return nil
}

// DurableEnd scans the copy's file for its durable end: the exact byte and
// offset where its last whole, valid frame ends, and why it stops there.
func (db *DB) DurableEnd(id meta.SegmentID) (End, error) {
	c, err := db.acquire("durable end", id)
	if err != nil {
		return End{}, err
	}
	defer c.mu.Unlock()
	var res scanResult
	err = db.view(c, "durable end", func(f File) error {
		o := scanOpts{limit: -1, start: c.start, startKnown: c.startKnown}
		r, err := db.scanFile(c, "durable end", f, o)
		res = r
		return err
	})
	if err != nil {
		return End{}, err
	}
	if !c.active {
		c.adopt(res)
	}
	return res.End, nil
}

// Truncate cuts the copy of id at byte bytes, which must be a frame boundary
// no later than its durable end (or the end of a valid footer there), then
// fsyncs it. Cutting into the frames removes the seal footer: the copy is
// then unsealed. ErrInvalid if bytes is not such a boundary; nothing changes.
func (db *DB) Truncate(id meta.SegmentID, bytes int64) error {
	if bytes < 0 {
		return fmt.Errorf("%w: truncate %s to negative byte %d", ErrInvalid, id, bytes)
	}
	c, err := db.acquire("truncate", id)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	f := c.f
	if f == nil {
		if f, err = db.openFile(c, "truncate", os.O_RDWR); err != nil {
			return err
		}
		defer f.Close()
	}
	full, err := db.scanFile(c, "truncate", f, scanOpts{limit: -1, start: c.start, startKnown: c.startKnown, whole: true})
	if err != nil {
		return err
	}
	var r scanResult
	switch {
	case full.Footer && bytes == full.Bytes+FooterSize:
		r = full
	case bytes == full.Bytes:
		r = full
		r.Footer = false
	case bytes < full.Bytes:
		r, err = db.scanFile(c, "truncate", f, scanOpts{limit: bytes, start: full.start, startKnown: full.startKnown, whole: true})
		if err != nil {
			return err
		}
		if r.Bytes != bytes {
			return fmt.Errorf("%w: truncate %s: byte %d is not a frame boundary (a frame starts at %d)", ErrInvalid, id, bytes, r.Bytes)
		}
		r.Footer = false
	default:
		return fmt.Errorf("%w: truncate %s: byte %d is past the durable end %d (file size %d)", ErrInvalid, id, bytes, full.Bytes, full.FileSize)
	}
	if full.FileSize != bytes {
		c.synced = false
		if err := f.Truncate(bytes); err != nil {
			return db.fail(c, "truncate", err)
		}
		if err := f.Sync(); err != nil {
			return db.fail(c, "truncate: sync", err)
		}
	}
	c.adopt(r)
	if c.active {
		c.alloc = bytes
	}
	return nil
}

// Delete removes the copy of id and its confirmations: the confirmation
// first (durably), then the file, then the directory entry is synced. It
// works on a latched copy (that is how a failed copy is dropped) but not on
// a held one. When the confirmation cannot be removed (ErrConfirmState: a
// disk with less than Options.ConfirmMinFree free) the file stays and the
// copy is still known: a retry deletes it.
func (db *DB) Delete(id meta.SegmentID) error {
	if err := id.Validate(); err != nil {
		return fmt.Errorf("%w: delete: %w", ErrInvalid, err)
	}
	if db.closed.Load() {
		return fmt.Errorf("%w: delete %s", ErrClosed, id)
	}
	c := db.copyOf(id)
	if c == nil {
		return fmt.Errorf("%w: delete %s", ErrUnknownCopy, id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return fmt.Errorf("%w: delete %s", ErrUnknownCopy, id)
	}
	if c.held {
		return fmt.Errorf("%w: delete %s: held by a catch-up target", ErrBusy, id)
	}
	// The confirmation goes first, durably: a failure or a power loss
	// after it leaves a file without a confirmation (the pass confirms it
	// again or deletes it again), never a confirmation of a file that is
	// gone. When it fails (a full disk refuses Pebble writes) the copy is
	// left as it was, so a retry deletes it.
	if err := db.unconfirm(id); err != nil {
		return fmt.Errorf("store: delete %s: confirmations: %w", id, err)
	}
	if err := db.fs.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return db.fail(c, "delete", err)
	}
	db.forget(c)
	if err := db.syncShard(id); err != nil {
		return fmt.Errorf("store: delete %s: directory sync: %w", id, err)
	}
	return nil
}

// ReadAt reads len(p) bytes of the copy of id from byte off, counted as
// DurableEnd and Append count them (frames from 0). It reads what the
// file holds: the caller reads only bytes it knows are written and
// synced. A short read returns io.EOF as os.File.ReadAt does; any other
// I/O error latches the copy.
func (db *DB) ReadAt(id meta.SegmentID, p []byte, off int64) (int, error) {
	c, err := db.acquire("read", id)
	if err != nil {
		return 0, err
	}
	defer c.mu.Unlock()
	var n int
	err = db.view(c, "read", func(f File) error {
		var rerr error
		n, rerr = f.ReadAt(p, off)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return db.fail(c, "read", rerr)
		}
		return rerr
	})
	return n, err
}
