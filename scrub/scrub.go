package scrub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	// List returns the segment ids of every local copy, sorted.
	List() []meta.SegmentID
	// Identity stats the copy's file without opening it.
	Identity(id meta.SegmentID) (store.FileIdentity, error)
	// Verify checks every frame, the offsets, the footer and the checksum
	// against seg; corruption wraps store.ErrCorrupt.
	Verify(id meta.SegmentID, seg meta.Segment) error
}

// Segments looks up the metadata of a segment; cluster.Node has it.
type Segments interface {
	Segment(id meta.SegmentID) (meta.Segment, bool)
}

// Config sets the scrubber up.
type Config struct {
	// Dir is the Pebble directory for progress and findings.
	Dir string
	// BytesPerSecond bounds the read rate. It must be positive.
	BytesPerSecond int64
	// RoundPause is the wait after a full round over every copy.
	RoundPause time.Duration
	// Logger receives findings and round summaries.
	Logger zerolog.Logger
}

// DefaultBytesPerSecond is 32 MiB/s: a few percent of one disk.
const DefaultBytesPerSecond = 32 << 20

// Validate names the first bad field and value.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("scrub: config dir is empty")
	}
	if c.BytesPerSecond <= 0 {
		return fmt.Errorf("scrub: config bytes_per_second %d: want > 0", c.BytesPerSecond)
	}
	if c.RoundPause < 0 {
		return fmt.Errorf("scrub: config round_pause %s: want >= 0", c.RoundPause)
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
	Corrupt        int    `json:"corrupt"`
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
	s := &Scrubber{cfg: cfg, copies: copies, segs: segs, db: db,
		lim:      rate.NewLimiter(rate.Limit(cfg.BytesPerSecond), chunk),
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
	for {
		if err := s.Round(ctx); err != nil {
			return err
		}
		if s.cfg.RoundPause > 0 {
			t := time.NewTimer(s.cfg.RoundPause)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
}

// Round verifies every sealed copy once, starting after the saved cursor
// and wrapping around to it, then clears the cursor.
func (s *Scrubber) Round(ctx context.Context) error {
	cursor, err := s.cursor()
	if err != nil {
		return err
	}
	ids := s.copies.List()
	start, _ := slices.BinarySearch(ids, cursor)
	if start < len(ids) && ids[start] == cursor {
		start++
	}
	order := append(ids[start:len(ids):len(ids)], ids[:start]...)
	for _, id := range order {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.verify(ctx, id); err != nil {
			return err
		}
		if err := s.db.Set(keyCursor, []byte(id), pebble.NoSync); err != nil {
			return fmt.Errorf("scrub: save cursor %s: %w", id, err)
		}
	}
	s.mu.Lock()
	s.stats.Rounds++
	st := s.stats
	s.mu.Unlock()
	s.log.Debug().Uint64("round", st.Rounds).Int("copies", len(ids)).Int("corrupt", st.Corrupt).Msg("scrub round done")
	return s.db.Delete(keyCursor, pebble.Sync)
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

// verify checks one copy, paying for its bytes first. Only a sealed segment
// is verified; a copy that changes file while it is read is left for the
// next round.
func (s *Scrubber) verify(ctx context.Context, id meta.SegmentID) error {
	seg, ok := s.segs.Segment(id)
	if !ok || !seg.Sealed {
		return nil
	}
	before, err := s.copies.Identity(id)
	if err != nil {
		return nil // gone or latched: the probe reports it
	}
	for left := before.Size; left > 0; left -= chunk {
		if err := s.lim.WaitN(ctx, int(min(left, chunk))); err != nil {
			return err
		}
	}
	verr := s.copies.Verify(id, seg)
	after, err := s.copies.Identity(id)
	if err != nil || after != before {
		return nil
	}
	s.mu.Lock()
	s.stats.CopiesVerified++
	s.stats.BytesVerified += uint64(before.Size)
	s.mu.Unlock()
	switch {
	case verr == nil:
		return s.clear(id)
	case errors.Is(verr, store.ErrCorrupt):
		f := Finding{Segment: id, Identity: before, Reason: verr.Error(), At: time.Now().UTC()}
		var ce *store.CorruptError
		if errors.As(verr, &ce) {
			f.Offset = ce.Offset
		}
		return s.record(f)
	case errors.Is(verr, store.ErrShort) && before.Size >= seg.ByteSize:
		// The file is long enough but its frames end early: a damaged
		// header inside, not a truncation (which the probe sees by size).
		f := Finding{Segment: id, Identity: before, Reason: verr.Error(), At: time.Now().UTC()}
		var se *store.ShortError
		if errors.As(verr, &se) {
			f.Offset = se.End.Bytes
		}
		return s.record(f)
	default:
		// Short, latched or unsealed copies are the probe's and the
		// integrity pass's business, not corruption that keeps the size.
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
