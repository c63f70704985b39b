package probe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/rs/zerolog"

	ioengine "github.com/malachi-log/malachi/internal/engine"
)

// Kind names a probe engine.
type Kind = ioengine.Kind

const (
	// KindAuto (the zero value) is a configuration, never a chosen engine:
	// use io_uring where the kernel allows it, the syscall engine otherwise,
	// and keep measuring both to use the faster one.
	KindAuto = ioengine.Auto
	// KindURing batches STATX operations through an io_uring ring.
	KindURing = ioengine.URing
	// KindSyscall calls statx(2) once per path.
	KindSyscall = ioengine.Syscall
)

// ParseKind parses an engine name: "auto", "uring" or "syscall".
func ParseKind(s string) (Kind, error) {
	k, err := ioengine.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("probe: %w", err)
	}
	return k, nil
}

var (
	// ErrNotExist marks a path that does not exist (ENOENT, ENOTDIR): a lost
	// copy. errors.Is(err, fs.ErrNotExist) holds too.
	ErrNotExist = errors.New("probe: file missing")
	// ErrFailed marks a probe that failed for another reason (EACCES, EIO,
	// a bad path, io_uring failure): the file's state is unknown.
	ErrFailed = errors.New("probe: probe failed")
	// ErrDeadline marks a path not answered before the context ended; the
	// error unwraps to the context's error.
	ErrDeadline = errors.New("probe: not answered before the deadline")
	// ErrClosed is returned by Probe on a closed Prober, and marks the
	// entries of a batch that Close interrupted.
	ErrClosed = errors.New("probe: prober closed")
)

// PathError is the error of one entry. Kind is one of ErrNotExist,
// ErrFailed, ErrDeadline, ErrClosed; Err is the errno or context error.
// Entries a batch did not answer (ErrDeadline, ErrClosed, an io_uring
// failure) share one PathError with an empty Path: the entry's index names
// the path, and a cut batch costs no allocation per entry.
type PathError struct {
	Path string
	Kind error
	Err  error
}

func (e *PathError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%v: %v", e.Kind, e.Err)
	}
	return fmt.Sprintf("%v: %s: %v", e.Kind, e.Path, e.Err)
}

// Is matches the entry's Kind, and fs.ErrNotExist for a missing file.
func (e *PathError) Is(target error) bool {
	return target == e.Kind || (e.Kind == ErrNotExist && target == fs.ErrNotExist)
}

// Unwrap returns the errno or context error.
func (e *PathError) Unwrap() error { return e.Err }

// Result is what one path measures: the size in bytes, the device and the
// inode (together the file's identity), or Err.
type Result struct {
	Size int64
	Dev  uint64
	Ino  uint64
	Err  error
}

// Engine probes the targets of a Batch. Implementations are not safe for
// concurrent use; Prober serializes them.
type Engine interface {
	// ProbeRange fills out[j] for target from+j of b, for every j <
	// len(out) (from+len(out) <= b.Len()). It answers every entry, with
	// per-entry errors, and returns an error only when it answered none
	// (ErrClosed) or was interrupted by Close (ErrClosed). After an
	// interrupted run it may have detached b's arena (see Batch).
	ProbeRange(ctx context.Context, b *Batch, from int, out []Result) error
	Kind() Kind
	Close() error
}

// Config configures New.
type Config struct {
	// Engine picks the engine: KindAuto (default), KindURing (fail if
	// io_uring is refused) or KindSyscall.
	Engine Kind
	// RingEntries is the io_uring queue depth: how many statx run at once.
	RingEntries uint32
	// MaxWorkers caps io-wq workers of the ring (0: kernel default, which is
	// min(RingEntries, 4 × CPUs)).
	MaxWorkers uint32
	// SmallBatch: under Auto, batches with fewer paths use the syscall
	// engine, whose per-call cost is lower than a ring round trip.
	SmallBatch int
	// ExploreEvery: under Auto, every ExploreEvery-th batch of at least
	// 2×ExploreSample paths answers ExploreSample of them with the engine
	// not in use, so the choice follows the measured speed.
	ExploreEvery  int
	ExploreSample int
	// Logger receives the engine choice and changes of it. Zero: silent.
	Logger zerolog.Logger
	// Now is the clock used to time batches. Nil: time.Now.
	Now func() time.Time
}

// DefaultConfig is what the plugin uses unless configured otherwise.
func DefaultConfig() Config {
	return Config{
		Engine:        KindAuto,
		RingEntries:   1024,
		MaxWorkers:    64,
		SmallBatch:    8,
		ExploreEvery:  16,
		ExploreSample: 2048,
	}
}

// Validate names the first field that is out of range.
func (c Config) Validate() error {
	switch {
	case c.Engine > KindSyscall:
		return fmt.Errorf("probe: Config.Engine = %v: want auto, uring or syscall", c.Engine)
	case c.RingEntries == 0 || c.RingEntries > 32768:
		return fmt.Errorf("probe: Config.RingEntries = %d: want 1..32768", c.RingEntries)
	case c.MaxWorkers > 4096:
		return fmt.Errorf("probe: Config.MaxWorkers = %d: want 0..4096", c.MaxWorkers)
	case c.SmallBatch < 0:
		return fmt.Errorf("probe: Config.SmallBatch = %d: want >= 0", c.SmallBatch)
	case c.ExploreEvery < 0 || c.ExploreSample < 0:
		return fmt.Errorf("probe: Config.ExploreEvery = %d, ExploreSample = %d: want >= 0", c.ExploreEvery, c.ExploreSample)
	}
	return nil
}

// Choice is the engine a Prober uses now and why.
type Choice struct {
	Kind   Kind
	Reason string
}

func (c Choice) String() string { return c.Kind.String() + " (" + c.Reason + ")" }

// Prober probes many paths per call. It is safe for concurrent use; calls
// are serialized.
type Prober struct {
	cfg Config
	log zerolog.Logger
	now func() time.Time

	mu      sync.Mutex
	closed  bool
	uring   Engine // nil when io_uring is refused or not configured
	sys     Engine
	cur     Kind
	reason  string
	nsPer   [3]float64 // measured ns per path, by Kind; 0 = not measured
	batches int
	// compared: a batch has measured both engines, so a choice rests on
	// two figures taken under the same cache state.
	compared bool
	// ringWarm: the ring has had its first timed run, which only warms
	// it up (io-wq spawns its workers then) and measures nothing.
	ringWarm bool
	// paths is Probe's batch, refilled on each call.
	paths Batch
}

// New starts a Prober. With KindURing it fails if io_uring is refused
// (the error matches uring.ErrUnavailable); with KindAuto it falls back to
// the syscall engine and says why in Choice and in a log event.
func New(cfg Config) (*Prober, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newProber(cfg, NewSyscall(), NewURing)
}

// newProber is New with the engines as parameters, for tests.
func newProber(cfg Config, sys Engine, newURing func(entries, maxWorkers uint32) (Engine, error)) (*Prober, error) {
	p := &Prober{cfg: cfg, log: cfg.Logger, now: cfg.Now, sys: sys}
	if p.now == nil {
		p.now = time.Now
	}
	switch cfg.Engine {
	case KindSyscall:
		p.cur, p.reason = KindSyscall, "configured"
	case KindURing:
		u, err := newURing(cfg.RingEntries, cfg.MaxWorkers)
		if err != nil {
			return nil, fmt.Errorf("probe: engine uring: %w", err)
		}
		p.uring = u
		p.cur, p.reason = KindURing, "configured"
	case KindAuto:
		u, err := newURing(cfg.RingEntries, cfg.MaxWorkers)
		if err != nil {
			p.cur, p.reason = KindSyscall, "io_uring refused: "+err.Error()
		} else {
			p.uring = u
			p.cur, p.reason = KindURing, "io_uring available; measuring both engines"
		}
	}
	p.log.Info().Str("engine", p.cur.String()).Str("config", cfg.Engine.String()).Str("reason", p.reason).Msg("probe: engine chosen")
	return p, nil
}

// Choice is the engine in use now and why. Choice().Kind.String() is the
// value to expose as a metric label.
func (p *Prober) Choice() Choice {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Choice{Kind: p.cur, Reason: p.reason}
}

// Probe fills out[i] with the size, device and inode of paths[i], or a
// *PathError matching ErrNotExist (the file is missing), ErrFailed (the
// probe failed) or ErrDeadline (ctx ended first); the rest of the batch is
// still answered. It never opens a file. len(out) must be at least
// len(paths); only out[:len(paths)] is written. Steady state allocates
// nothing per healthy entry: reuse out between calls. A path naming a
// symbolic link is followed (stat(2)); ProbeBatch does not follow.
//
// Probe returns an error only when it answered nothing (bad input, Prober
// closed: ErrClosed) or when Close interrupted it (ErrClosed; the entries
// not answered carry ErrClosed).
func (p *Prober) Probe(ctx context.Context, paths []string, out []Result) error {
	if len(out) < len(paths) {
		return fmt.Errorf("probe: result slice holds %d entries for %d paths", len(out), len(paths))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	b := &p.paths
	b.Reset()
	b.paths, b.follow = paths, true
	defer b.Reset() // keep no reference to the caller's paths
	return p.run(ctx, b, out[:len(paths)])
}

// ProbeBatch is Probe over the targets of b: out[i] answers target i,
// statx(dirfd, name, AT_SYMLINK_NOFOLLOW|AT_STATX_SYNC_AS_STAT), with the
// same errors, engines and Auto choice as Probe. A *PathError names the
// target by its name relative to its directory. len(out) must be at least
// b.Len(). Once b and out are reused, a call allocates nothing per entry.
//
// b must not change while ProbeBatch runs, and its directory descriptors
// must stay open. When the io_uring engine's run is cut (deadline, Close)
// with statx still in flight, b gets a fresh arena (one allocation) and the
// old one stays with the ring until the kernel has answered.
func (p *Prober) ProbeBatch(ctx context.Context, b *Batch, out []Result) error {
	if len(out) < b.Len() {
		return fmt.Errorf("probe: result slice holds %d entries for a batch of %d", len(out), b.Len())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	return p.run(ctx, b, out[:b.Len()])
}

// run answers every target of b into out (len(out) == b.Len()) with the
// engine in use, and under Auto with a sample on the other engine.
func (p *Prober) run(ctx context.Context, b *Batch, out []Result) error {
	n := len(out)
	if p.cfg.Engine != KindAuto || p.uring == nil {
		return p.engine(p.cur).ProbeRange(ctx, b, 0, out)
	}
	if n < p.cfg.SmallBatch {
		return p.sys.ProbeRange(ctx, b, 0, out)
	}
	p.batches++
	other := KindSyscall
	if p.cur == KindSyscall {
		other = KindURing
	}
	k := 0 // targets answered by the other engine, from off on
	if s := p.cfg.ExploreSample; s > 0 && n >= 2*s && (!p.compared || (p.cfg.ExploreEvery > 0 && p.batches%p.cfg.ExploreEvery == 0)) {
		k = s
	}
	if k == 0 {
		_, err := p.timed(ctx, p.cur, b, out, span{0, n})
		return err
	}
	// The sample window moves through the batch, so that neither engine
	// always meets the same (warmer or colder) targets.
	off := (p.batches * k) % (n - k + 1)
	otherNs, err := p.timed(ctx, other, b, out, span{off, off + k})
	if err != nil {
		return err
	}
	curNs, err := p.timed(ctx, p.cur, b, out, span{0, off}, span{off + k, n})
	if err != nil || otherNs <= 0 || curNs <= 0 {
		return err
	}
	// Decide only on figures of one batch: a cost measured on a warm cache
	// is never weighed against one measured on a cold cache.
	p.compared = true
	if otherNs < 0.9*curNs {
		old := p.cur
		p.cur = other
		p.reason = fmt.Sprintf("measured %.0f ns/path against %.0f ns/path for %s in one batch", otherNs, curNs, old)
		p.log.Info().Str("engine", p.cur.String()).Str("previous", old.String()).
			Float64("ns_per_path", otherNs).Float64("previous_ns_per_path", curNs).
			Msg("probe: engine changed")
	}
	return nil
}

// span is the range [lo, hi) of a batch.
type span struct{ lo, hi int }

// timed runs one engine over one or two spans of b and returns its cost
// per target, folded into the estimate Measured reports too; 0 when the
// run measured nothing: the context ended during it (a partial run), or it
// was the ring's first run (io-wq spawns its workers then).
func (p *Prober) timed(ctx context.Context, k Kind, b *Batch, out []Result, spans ...span) (float64, error) {
	start := p.now()
	total := 0
	for _, s := range spans {
		if s.hi <= s.lo {
			continue
		}
		if err := p.engine(k).ProbeRange(ctx, b, s.lo, out[s.lo:s.hi]); err != nil {
			return 0, err
		}
		total += s.hi - s.lo
	}
	if ctx.Err() != nil || total == 0 {
		return 0, nil
	}
	if k == KindURing && !p.ringWarm {
		p.ringWarm = true
		return 0, nil
	}
	ns := float64(p.now().Sub(start).Nanoseconds()) / float64(total)
	if p.nsPer[k] == 0 {
		p.nsPer[k] = ns
	} else {
		p.nsPer[k] = 0.7*p.nsPer[k] + 0.3*ns
	}
	return ns, nil
}

func (p *Prober) engine(k Kind) Engine {
	if k == KindURing {
		return p.uring
	}
	return p.sys
}

// Measured is the estimated cost per path of each engine (0: not measured
// yet), as Auto sees it.
func (p *Prober) Measured() (uringNs, syscallNs float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nsPer[KindURing], p.nsPer[KindSyscall]
}

// Close releases the ring. A Probe running concurrently returns ErrClosed
// with its unanswered entries marked ErrClosed. Close is idempotent.
func (p *Prober) Close() error {
	// Closing the engines interrupts a running batch, so not under mu.
	err := p.sys.Close()
	if p.uring != nil {
		err = errors.Join(err, p.uring.Close())
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return err
}

func fail(path string, kind, err error) error {
	return &PathError{Path: path, Kind: kind, Err: err}
}

// unanswered marks out with one shared error.
func unanswered(out []Result, kind, err error) {
	e := &PathError{Kind: kind, Err: err}
	for i := range out {
		out[i] = Result{Err: e}
	}
}
