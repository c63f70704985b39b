package scrub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/malachi-log/malachi/internal/pebblelog"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// Copies is what the scrubber needs of the broker's store; *store.DB has it.
type Copies interface {
	// Identity stats the copy's file without opening it.
	Identity(id meta.SegmentID) (store.FileIdentity, error)
	// Verify checks every frame, the offsets, the footer and the checksum
	// against seg; corruption wraps store.ErrCorrupt.
	Verify(id meta.SegmentID, seg meta.Segment) error
	// LatchErr is non-nil for a copy latched failed in storage.
	LatchErr(id meta.SegmentID) error
}

// Segments gives the metadata the scrubber walks; cluster.Node has it.
type Segments interface {
	// View returns the metadata (shared, read-only).
	View() *meta.View
}

// Config sets the scrubber up.
type Config struct {
	// Dir is the Pebble directory for progress and findings.
	Dir string
	// Self is this broker: only the sealed copies the metadata assigns to
	// it are scrubbed.
	Self meta.BrokerID
	// BytesPerSecond bounds the read rate; 0 means unlimited.
	BytesPerSecond int64
	// RoundPause is the wait after a full round over every copy.
	RoundPause time.Duration
	// FirstDelay is the wait before the first round, so that a broker that
	// just started is not read end to end while it catches up.
	FirstDelay time.Duration
	// Logger receives findings and round summaries.
	Logger zerolog.Logger
	// OnVerify, when set, is called after each copy verified, with its
	// size and Verify's error; OnRound after each full round. Both are
	// called from Run's goroutine, with no lock held (for metrics).
	OnVerify func(id meta.SegmentID, bytes int64, err error)
	OnRound  func(Stats)
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// DefaultBytesPerSecond is 32 MiB/s: a few percent of one disk.
const DefaultBytesPerSecond = 32 << 20

// Validate names the first bad field and value.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("scrub: config dir is empty")
	}
	if c.Self == 0 {
		return errors.New("scrub: config self is broker 0")
	}
	if c.BytesPerSecond < 0 {
		return fmt.Errorf("scrub: config bytes_per_second %d: want >= 0 (0 for unlimited)", c.BytesPerSecond)
	}
	if c.RoundPause < 0 || c.FirstDelay < 0 {
		return fmt.Errorf("scrub: config round_pause %s, first_delay %s: want >= 0", c.RoundPause, c.FirstDelay)
	}
	return nil
}

// Finding is one copy found corrupt.
type Finding struct {
	Segment  meta.SegmentID     `json:"segment"`
	Identity store.FileIdentity `json:"identity"`
	// Offset is the byte where verification failed.
	Offset int64     `json:"offset"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Stats are counters since Open.
type Stats struct {
	Rounds         uint64 `json:"rounds"`
	CopiesVerified uint64 `json:"copies_verified"`
	BytesVerified  uint64 `json:"bytes_verified"`
	// Corrupt is the number of current findings.
	Corrupt int `json:"corrupt"`
	// LastRoundAt and RoundSeconds describe the last full round.
	LastRoundAt  time.Time `json:"last_round_at,omitzero"`
	RoundSeconds float64   `json:"round_seconds,omitempty"`
}

// Scrubber verifies one broker's sealed copies in the background.
type Scrubber struct {
	cfg    Config
	copies Copies
	segs   Segments
	db     *pebble.DB
	lim    *rate.Limiter
	log    zerolog.Logger

	mu       sync.Mutex
	findings map[meta.SegmentID]Finding // Protected by mu.
	stats    Stats                      // Protected by mu.
}

var (
	keyCursor      = []byte("cursor")
	prefixFindings = "corrupt/"
)

// chunk is the most bytes the limiter is asked for at once (its burst).
const chunk = 1 << 20

// Open opens (or creates) the scrubber's state in cfg.Dir.
func Open(cfg Config, copies Copies, segs Segments) (*Scrubber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	db, err := pebble.Open(cfg.Dir, &pebble.Options{Logger: pebblelog.New(cfg.Logger, "scrub")})
	if err != nil {
		return nil, fmt.Errorf("scrub: open %s: %w", cfg.Dir, err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	lim := rate.NewLimiter(rate.Inf, chunk)
	if cfg.BytesPerSecond > 0 {
		lim = rate.NewLimiter(rate.Limit(cfg.BytesPerSecond), chunk)
	}
	s := &Scrubber{cfg: cfg, copies: copies, segs: segs, db: db,
		lim:      lim,
		log:      cfg.Logger.With().Str("component", "scrub").Logger(),
		findings: map[meta.SegmentID]Finding{}}
	if err := s.loadFindings(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *Scrubber) loadFindings() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefixFindings), UpperBound: []byte(prefixFindings + "\xff")})
	if err != nil {
		return fmt.Errorf("scrub: load findings: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		var f Finding
		if err := json.Unmarshal(it.Value(), &f); err != nil {
			return fmt.Errorf("scrub: finding %q: %w", it.Key(), err)
		}
		s.findings[f.Segment] = f
	}
	s.stats.Corrupt = len(s.findings)
	return it.Error()
}

// Close releases the Pebble state. Run must have returned.
func (s *Scrubber) Close() error { return s.db.Close() }

// Corrupt reports whether the copy of id whose file has identity fi was
// found corrupt (invariant 3: a finding on another file does not count).
func (s *Scrubber) Corrupt(id meta.SegmentID, fi store.FileIdentity) (Finding, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.findings[id]
	if !ok || f.Identity != fi {
		return Finding{}, false
	}
	return f, true
}

// Findings returns every current finding, sorted by segment.
func (s *Scrubber) Findings() []Finding {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Finding, 0, len(s.findings))
	for _, f := range s.findings {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Finding) int { return cmp.Compare(a.Segment, b.Segment) })
	return out
}

// Stats returns the counters.
func (s *Scrubber) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Run scrubs until ctx ends, round after round, resuming after the copy
// recorded last. It returns ctx's error, or a Pebble error.
func (s *Scrubber) Run(ctx context.Context) error {
	if err := sleep(ctx, s.cfg.FirstDelay); err != nil {
		return err
	}
	for {
		if err := s.Round(ctx); err != nil {
			return err
		}
		if err := sleep(ctx, s.cfg.RoundPause); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Round verifies every sealed copy the metadata assigns to this broker
// once, in segment order starting after the saved cursor and wrapping
// around to it, then clears the cursor.
func (s *Scrubber) Round(ctx context.Context) error {
	start := s.cfg.Now()
	cursor, err := s.cursor()
	if err != nil {
		return err
	}
	view := s.segs.View()
	held := make([]*meta.Segment, 0, view.Held(s.cfg.Self))
	for seg := range view.HeldBy(s.cfg.Self) {
		if seg.Sealed {
			held = append(held, seg)
		}
	}
	slices.SortFunc(held, func(a, b *meta.Segment) int { return cmp.Compare(a.ID, b.ID) })
	first := sort.Search(len(held), func(i int) bool { return held[i].ID > cursor })
	for k := range held {
		seg := held[(first+k)%len(held)]
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.verify(ctx, seg); err != nil {
			return err
		}
		if err := s.db.Set(keyCursor, []byte(seg.ID), pebble.NoSync); err != nil {
			return fmt.Errorf("scrub: save cursor %s: %w", seg.ID, err)
		}
	}
	if err := s.db.Delete(keyCursor, pebble.Sync); err != nil {
		return fmt.Errorf("scrub: clear cursor: %w", err)
	}
	s.mu.Lock()
	s.stats.Rounds++
	s.stats.LastRoundAt = s.cfg.Now()
	s.stats.RoundSeconds = s.stats.LastRoundAt.Sub(start).Seconds()
	st := s.stats
	s.mu.Unlock()
	s.log.Debug().Uint64("round", st.Rounds).Int("corrupt", st.Corrupt).Float64("seconds", st.RoundSeconds).Msg("scrub round done")
	if s.cfg.OnRound != nil {
		s.cfg.OnRound(st)
	}
	return nil
}

func (s *Scrubber) cursor() (meta.SegmentID, error) {
	v, closer, err := s.db.Get(keyCursor)
	if errors.Is(err, pebble.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("scrub: read cursor: %w", err)
	}
	defer closer.Close()
	return meta.SegmentID(v), nil
}

// verify checks one copy, paying for its bytes first. A copy whose size
// is not its sealed size plus footer is the probe's business (missing,
// short, overrun); a copy that changes file while it is read is left for
// the next round.
func (s *Scrubber) verify(ctx context.Context, seg *meta.Segment) error {
	id := seg.ID
	if s.copies.LatchErr(id) != nil {
		return nil
	}
	before, err := s.copies.Identity(id)
	if err != nil || before.Size != seg.ByteSize+store.FooterSize {
		return nil
	}
	for left := before.Size; left > 0; left -= chunk {
		if err := s.lim.WaitN(ctx, int(min(left, chunk))); err != nil {
			return err
		}
	}
	verr := s.copies.Verify(id, *seg)
	after, err := s.copies.Identity(id)
	if err != nil || after != before {
		return nil
	}
	s.mu.Lock()
	s.stats.CopiesVerified++
	s.stats.BytesVerified += uint64(before.Size)
	s.mu.Unlock()
	if s.cfg.OnVerify != nil {
		defer s.cfg.OnVerify(id, before.Size, verr)
	}
	f := Finding{Segment: id, Identity: before, Reason: fmt.Sprint(verr), At: s.cfg.Now().UTC()}
	var ce *store.CorruptError
	var se *store.ShortError
	switch {
	case verr == nil:
		return s.clear(id)
	case errors.As(verr, &ce):
		f.Offset = ce.Offset
		return s.record(f)
	case errors.As(verr, &se):
		// The file has its full size but its frames end early: a damaged
		// header inside, not a truncation (which the probe sees by size).
		f.Offset = se.End.Bytes
		return s.record(f)
	case errors.Is(verr, store.ErrNotSealed):
		// Full size, but no valid footer where the frames end.
		f.Offset = seg.ByteSize
		return s.record(f)
	default:
		// Latched by an I/O error during the read (the probe reports
		// it), busy (being received), gone: not a finding.
		return nil
	}
}

func (s *Scrubber) record(f Finding) error {
	v, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("scrub: encode finding %s: %w", f.Segment, err)
	}
	if err := s.db.Set([]byte(prefixFindings+string(f.Segment)), v, pebble.Sync); err != nil {
		return fmt.Errorf("scrub: record finding %s: %w", f.Segment, err)
	}
	s.mu.Lock()
	_, had := s.findings[f.Segment]
	s.findings[f.Segment] = f
	s.stats.Corrupt = len(s.findings)
	s.mu.Unlock()
	if !had {
		s.log.Warn().Str("segment", string(f.Segment)).Int64("offset", f.Offset).Str("reason", f.Reason).Msg("scrub found a corrupt copy")
	}
	return nil
}

// Forget drops any finding on id. The replication server calls it when it
// deletes the copy: a file created later under the same name is new, even
// if the file system hands it the same inode number.
func (s *Scrubber) Forget(id meta.SegmentID) error { return s.clear(id) }

func (s *Scrubber) clear(id meta.SegmentID) error {
	s.mu.Lock()
	_, had := s.findings[id]
	s.mu.Unlock()
	if !had {
		return nil
	}
	if err := s.db.Delete([]byte(prefixFindings+string(id)), pebble.Sync); err != nil {
		return fmt.Errorf("scrub: clear finding %s: %w", id, err)
	}
	s.mu.Lock()
	delete(s.findings, id)
	s.stats.Corrupt = len(s.findings)
	s.mu.Unlock()
	s.log.Info().Str("segment", string(id)).Msg("scrub: copy verified intact again")
	return nil
}
