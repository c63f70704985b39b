package fsync

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/rs/zerolog"

	ioengine "github.com/malachi-log/malachi/internal/engine"
)

// Kind names an fsync engine.
type Kind = ioengine.Kind

const (
	// KindAuto (the zero value, a configuration only) uses io_uring where
	// the kernel allows it and plain system calls otherwise.
	KindAuto = ioengine.Auto
	// KindURing submits one IORING_OP_FSYNC per distinct path of a batch,
	// all in flight at once.
	KindURing = ioengine.URing
	// KindSyscall calls fsync(2) (or fdatasync(2)) once per path, in order.
	KindSyscall = ioengine.Syscall
)

// ParseKind parses an engine name: "auto", "uring" or "syscall".
func ParseKind(s string) (Kind, error) {
	k, err := ioengine.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("fsync: %w", err)
	}
	return k, nil
}

var (
	// ErrClosed is returned to callers whose request was not synced because
	// the Syncer was closed.
	ErrClosed = errors.New("fsync: syncer closed")
)

// Request is one path to sync.
type Request struct {
	Path string
	// Dir opens the path with O_DIRECTORY: a request for a directory entry
	// to become durable (after a create, rename or truncate in it).
	Dir bool
	// DataOnly syncs with fdatasync semantics (IORING_FSYNC_DATASYNC): file
	// data and the metadata needed to read it, not timestamps. A full sync
	// of the same path in the same batch satisfies it.
	DataOnly bool
}

// Engine syncs open descriptors. Implementations are not safe for
// concurrent use; a Syncer calls its engine from one goroutine.
type Engine interface {
	// Sync syncs fds[i] (data only where dataOnly[i]) and stores the result
	// in errs[i]: nil, an errno, or ErrClosed when Close interrupted it.
	// It returns only once the kernel is done with every descriptor.
	Sync(fds []int, dataOnly []bool, errs []error)
	Kind() Kind
	Close() error
}

// Config configures New.
type Config struct {
	// Engine: KindAuto (default), KindURing (fail if refused), KindSyscall.
	Engine Kind
	// RingEntries bounds the fsyncs in flight at once (io_uring engine).
	RingEntries uint32
	// MaxWorkers caps the ring's io-wq workers, which run the fsyncs: the
	// kernel's default is min(RingEntries, 4 × CPUs), too few for a disk
	// that serves many flushes at once.
	MaxWorkers uint32
	// MaxBatch bounds the distinct paths synced in one batch; more wait for
	// the next.
	MaxBatch int
	// FilesystemSyncMin: when a batch holds at least this many distinct
	// directories on one ext4 or XFS filesystem, one syncfs(2) of that
	// filesystem makes all their entries durable instead of an fsync each:
	// the journal commit is what makes an entry durable, and one commit
	// carries them all, where each late fsync of a batch would also send
	// the device its own cache flush. 0 turns it off.
	FilesystemSyncMin int
	// FilesystemSyncMaxDirty: the filesystem sync is used only while the
	// machine's page cache waiting for writeback (/proc/meminfo Dirty +
	// Writeback) is at most this many bytes, because syncfs also writes
	// back every dirty page of the filesystem (a broker that does not
	// fsync its appends may have gigabytes of them); above it the batch
	// fsyncs each directory.
	FilesystemSyncMaxDirty int64
	// Logger receives the engine choice. Zero: silent.
	Logger zerolog.Logger
}

// DefaultConfig is what the plugin uses unless configured otherwise.
func DefaultConfig() Config {
	return Config{Engine: KindAuto, RingEntries: 256, MaxWorkers: 128, MaxBatch: 4096, FilesystemSyncMin: 16, FilesystemSyncMaxDirty: 16 << 20}
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Engine > KindSyscall:
		return fmt.Errorf("fsync: Config.Engine = %v: want auto, uring or syscall", c.Engine)
	case c.RingEntries == 0 || c.RingEntries > 32768:
		return fmt.Errorf("fsync: Config.RingEntries = %d: want 1..32768", c.RingEntries)
	case c.MaxWorkers > 4096:
		return fmt.Errorf("fsync: Config.MaxWorkers = %d: want 0..4096", c.MaxWorkers)
	case c.MaxBatch <= 0:
		return fmt.Errorf("fsync: Config.MaxBatch = %d: want > 0", c.MaxBatch)
	case c.FilesystemSyncMin < 0:
		return fmt.Errorf("fsync: Config.FilesystemSyncMin = %d: want 0 (off) or more", c.FilesystemSyncMin)
	case c.FilesystemSyncMaxDirty < 0:
		return fmt.Errorf("fsync: Config.FilesystemSyncMaxDirty = %d: want 0 or more", c.FilesystemSyncMaxDirty)
	}
	return nil
}

// Choice is the engine a Syncer uses and why.
type Choice struct {
	Kind   Kind
	Reason string
}

func (c Choice) String() string { return c.Kind.String() + " (" + c.Reason + ")" }

// Stats counts a Syncer's work since New.
type Stats struct {
	Batches  uint64 // batches run
	Requests uint64 // requests answered, duplicates included
	Syncs    uint64 // fsyncs issued: one per distinct path per batch not covered by a filesystem sync
	// FilesystemSyncs counts syncfs calls, FilesystemSynced the distinct
	// directories they covered (see Config.FilesystemSyncMin).
	FilesystemSyncs  uint64
	FilesystemSynced uint64
}

// call is one caller's requests; the committer answers each.
type call struct {
	errs      []error
	remaining int
	done      chan struct{}
}

type item struct {
	req  Request
	call *call
	idx  int
}

type key struct {
	path string
	dir  bool
}

// Syncer syncs many paths in batches, each distinct path once per batch,
// and coalesces concurrent callers into the next batch (group commit).
// It is safe for concurrent use.
type Syncer struct {
	cfg    Config
	log    zerolog.Logger
	engine Engine
	choice Choice

	mu      sync.Mutex
	cond    *sync.Cond
	pending []item
	closed  bool
	stats   Stats
	exited  chan struct{}

	// fsSyncOff says why filesystem syncs are not used ("" when they are);
	// dirty reads the page cache awaiting writeback (a seam for tests).
	fsSyncOff string
	dirty     func() (int64, error)

	// The committer's reused batch state.
	batch    []item
	distinct []Request
	index    map[key]int
	fds      []int
	dataOnly []bool
	errs     []error
}

// New starts a Syncer and its committer goroutine; Close stops it. With
// KindURing it fails if io_uring is refused (the error matches
// uring.ErrUnavailable); KindAuto then falls back to plain system calls and
// says why in Choice and in a log event.
func New(cfg Config) (*Syncer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var (
		e      Engine
		reason string
	)
	switch cfg.Engine {
	case KindSyscall:
		e, reason = NewSyscall(), "configured"
	case KindURing:
		u, err := NewURing(cfg.RingEntries, cfg.MaxWorkers)
		if err != nil {
			return nil, fmt.Errorf("fsync: engine uring: %w", err)
		}
		e, reason = u, "configured"
	case KindAuto:
		u, err := NewURing(cfg.RingEntries, cfg.MaxWorkers)
		if err != nil {
			e, reason = NewSyscall(), "io_uring refused: "+err.Error()
		} else {
			e, reason = u, "io_uring available"
		}
	}
	cfg.Logger.Info().Str("engine", e.Kind().String()).Str("config", cfg.Engine.String()).Str("reason", reason).Msg("fsync: engine chosen")
	return newSyncer(cfg, e, reason), nil
}

func newSyncer(cfg Config, e Engine, reason string) *Syncer {
	s := &Syncer{
		cfg:    cfg,
		log:    cfg.Logger,
		engine: e,
		choice: Choice{Kind: e.Kind(), Reason: reason},
		exited: make(chan struct{}),
		index:  make(map[key]int),
		dirty:  dirtyBytes,
	}
	switch {
	case cfg.FilesystemSyncMin == 0:
		s.fsSyncOff = "Config.FilesystemSyncMin is 0"
	default:
		s.fsSyncOff = fsSyncSupported()
	}
	if s.fsSyncOff != "" && cfg.FilesystemSyncMin > 0 {
		cfg.Logger.Info().Str("reason", s.fsSyncOff).Msg("fsync: directory batches are not synced with syncfs")
	}
	s.cond = sync.NewCond(&s.mu)
	go s.commit()
	return s
}

// Choice is the engine in use and why; Choice().Kind.String() is the
// metric label.
func (s *Syncer) Choice() Choice { return s.choice }

// Stats returns the counters.
func (s *Syncer) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// SyncDir makes the entries of directory path durable: it returns once an
// fsync of the directory that started after the call has finished. It
// satisfies store.DirSyncer.
//
// The error is nil, a wrapped errno (open or fsync failed; errors.Is works
// with syscall.ENOENT, syscall.EIO, ...), ErrClosed, or the context's error
// when ctx ended first (the sync may still happen).
func (s *Syncer) SyncDir(ctx context.Context, path string) error {
	var err [1]error
	if e := s.Sync(ctx, []Request{{Path: path, Dir: true}}, err[:]); e != nil {
		return e
	}
	return err[0]
}

// SyncDirs makes the entries of every directory in dirs durable in one
// batch (a batch of at least Config.FilesystemSyncMin directories of one
// journaled file system is answered by one syncfs), storing the error of
// dirs[i] in errs[i]. Errors as for Sync. It satisfies store.DirsSyncer.
func (s *Syncer) SyncDirs(ctx context.Context, dirs []string, errs []error) error {
	reqs := make([]Request, len(dirs))
	for i, d := range dirs {
		reqs[i] = Request{Path: d, Dir: true}
	}
	return s.Sync(ctx, reqs, errs)
}

// SyncFile makes the file at path durable (data and metadata, or with
// dataOnly fdatasync semantics). Errors as for SyncDir.
func (s *Syncer) SyncFile(ctx context.Context, path string, dataOnly bool) error {
	var err [1]error
	if e := s.Sync(ctx, []Request{{Path: path, DataOnly: dataOnly}}, err[:]); e != nil {
		return e
	}
	return err[0]
}

// Sync queues reqs for the next batch and waits until every one has been
// synced, storing each request's error in errs[i] (len(errs) >= len(reqs)).
// It returns an error only when it answered none: bad input, ErrClosed, or
// the context's error (then errs is untouched; the syncs may still happen).
func (s *Syncer) Sync(ctx context.Context, reqs []Request, errs []error) error {
	if len(errs) < len(reqs) {
		return fmt.Errorf("fsync: error slice holds %d entries for %d requests", len(errs), len(reqs))
	}
	for i, r := range reqs {
		if r.Path == "" {
			return fmt.Errorf("fsync: request %d has an empty path", i)
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	c := &call{errs: make([]error, len(reqs)), remaining: len(reqs), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	for i, r := range reqs {
		s.pending = append(s.pending, item{req: r, call: c, idx: i})
	}
	s.cond.Signal()
	s.mu.Unlock()
	select {
	case <-c.done:
		copy(errs, c.errs)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fsync: waiting for %d syncs: %w", len(reqs), ctx.Err())
	}
}

// commit is the committer: it takes everything queued, syncs each distinct
// path once, answers every caller, and repeats.
func (s *Syncer) commit() {
	defer close(s.exited)
	// io-wq workers belong to the thread that submits: keep the committer
	// on one thread for its life so its workers (up to MaxWorkers) stay
	// warm from batch to batch instead of being spawned again.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		s.mu.Lock()
		for len(s.pending) == 0 && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			rest := s.pending
			s.pending = nil
			s.mu.Unlock()
			for _, it := range rest {
				answer(it, ErrClosed)
			}
			return
		}
		s.batch, s.pending = s.take(s.batch[:0])
		s.mu.Unlock()
		syncs, fsSyncs, fsSynced := s.run()
		s.mu.Lock()
		s.stats.Batches++
		s.stats.Requests += uint64(len(s.batch))
		s.stats.Syncs += uint64(syncs)
		s.stats.FilesystemSyncs += uint64(fsSyncs)
		s.stats.FilesystemSynced += uint64(fsSynced)
		s.mu.Unlock()
		s.answerBatch()
	}
}

// take moves queued items into batch until it names MaxBatch distinct
// paths. Called with mu held.
func (s *Syncer) take(batch []item) ([]item, []item) {
	clear(s.index)
	n := 0
	for n < len(s.pending) {
		k := key{s.pending[n].req.Path, s.pending[n].req.Dir}
		if _, ok := s.index[k]; !ok {
			if len(s.index) == s.cfg.MaxBatch {
				break
			}
			s.index[k] = len(s.index)
		}
		n++
	}
	batch = append(batch, s.pending[:n]...)
	rest := append(s.pending[:0:0], s.pending[n:]...)
	return batch, rest
}

// run syncs the current batch, leaving each distinct path's result in
// s.errs; it returns the number of fsyncs issued, of filesystem syncs, and
// of directories those covered.
func (s *Syncer) run() (syncs, fsSyncs, fsSynced int) {
	clear(s.index)
	s.distinct = s.distinct[:0]
	for _, it := range s.batch {
		k := key{it.req.Path, it.req.Dir}
		if j, ok := s.index[k]; ok {
			s.distinct[j].DataOnly = s.distinct[j].DataOnly && it.req.DataOnly
			continue
		}
		s.index[k] = len(s.distinct)
		s.distinct = append(s.distinct, it.req)
	}
	n := len(s.distinct)
	s.fds = grow(s.fds, n)
	s.dataOnly = grow(s.dataOnly, n)
	s.errs = grow(s.errs, n)
	for i := range n {
		s.fds[i] = 0 // 0: to open; -1: answered (s.errs[i] holds the result)
	}
	fsSyncs, fsSynced = s.syncFilesystems()
	// Open every path first, then sync the ones that opened.
	open := 0
	for i, r := range s.distinct {
		if s.fds[i] < 0 {
			continue
		}
		fd, err := openForSync(r.Path, r.Dir)
		if err != nil {
			s.errs[i] = fmt.Errorf("fsync: open %s: %w", r.Path, err)
			s.fds[i] = -1
			continue
		}
		s.fds[i], s.errs[i] = fd, nil
		open++
	}
	// Compact the opened descriptors for the engine.
	fds, dataOnly, errs := make([]int, 0, open), make([]bool, 0, open), make([]error, open)
	for i := range n {
		if s.fds[i] >= 0 {
			fds = append(fds, s.fds[i])
			dataOnly = append(dataOnly, s.distinct[i].DataOnly)
		}
	}
	if open > 0 {
		s.engine.Sync(fds, dataOnly, errs)
	}
	j := 0
	for i := range n {
		if s.fds[i] < 0 {
			continue
		}
		if e := errs[j]; e != nil {
			if errors.Is(e, ErrClosed) {
				s.errs[i] = ErrClosed
			} else {
				s.errs[i] = fmt.Errorf("fsync: fsync %s: %w", s.distinct[i].Path, e)
			}
		}
		closeFD(s.fds[i])
		s.fds[i] = -1
		j++
	}
	return open, fsSyncs, fsSynced
}

// syncFilesystems answers the batch's directories that share an ext4 or
// XFS filesystem with at least FilesystemSyncMin others with one syncfs of
// that filesystem (see Config.FilesystemSyncMin), marking them answered
// (s.fds[i] = -1, s.errs[i] the result). A directory stat cannot see is
// left to its own fsync, which reports what is wrong with it.
func (s *Syncer) syncFilesystems() (syncs, covered int) {
	if s.fsSyncOff != "" {
		return 0, 0
	}
	dirs := 0
	for _, r := range s.distinct {
		if r.Dir {
			dirs++
		}
	}
	if dirs < s.cfg.FilesystemSyncMin {
		return 0, 0
	}
	if d, err := s.dirty(); err != nil || d > s.cfg.FilesystemSyncMaxDirty {
		return 0, 0
	}
	byDev := map[uint64][]int{}
	for i, r := range s.distinct {
		if !r.Dir {
			continue
		}
		if dev, ok := dirDevice(r.Path); ok {
			byDev[dev] = append(byDev[dev], i)
		}
	}
	for _, group := range byDev {
		first := s.distinct[group[0]].Path
		if len(group) < s.cfg.FilesystemSyncMin || !journaled(first) {
			continue
		}
		err := syncFilesystem(first)
		for _, i := range group {
			s.fds[i], s.errs[i] = -1, nil
			if err != nil {
				s.errs[i] = fmt.Errorf("fsync: %s: filesystem sync (with %d other directories): %w", s.distinct[i].Path, len(group)-1, err)
			}
		}
		syncs++
		covered += len(group)
	}
	return syncs, covered
}

// answerBatch hands every caller of the batch its path's result.
func (s *Syncer) answerBatch() {
	for _, it := range s.batch {
		answer(it, s.errs[s.index[key{it.req.Path, it.req.Dir}]])
	}
}

func answer(it item, err error) {
	it.call.errs[it.idx] = err
	it.call.remaining--
	if it.call.remaining == 0 {
		close(it.call.done)
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Close stops the Syncer: a batch in the engine is interrupted (queued
// fsyncs are cancelled and answer ErrClosed; running ones finish), queued
// requests answer ErrClosed, and Close returns once the committer has
// exited and the engine is released. Close is idempotent.
func (s *Syncer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.exited
		return nil
	}
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	err := s.engine.Close()
	<-s.exited
	return err
}
