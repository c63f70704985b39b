package plugin

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// scrubber verifies this broker's sealed copies in the background: every
// frame's CRC, the offsets, the footer and the frames' checksum against the
// metadata (store.Verify), at a bounded read rate. It is what finds the
// in-place corruption the size probe cannot see by construction: a copy
// that fails is remembered, by file identity, and reported by the probe as
// heal.Corrupt until the file changes (replaced by a backfill, deleted).
// The marks live in memory: after a restart the next cycle finds the copy
// again.
type scrubber struct {
	self     meta.BrokerID
	db       *store.DB
	cp       ControlPlane
	interval time.Duration
	lim      *rate.Limiter
	log      zerolog.Logger
	metrics  *metrics
	now      func() time.Time

	mu      sync.Mutex
	corrupt map[meta.SegmentID]scrubMark
	status  ScrubStatus
}

type scrubMark struct {
	ident  store.FileIdentity
	reason string
}

// ScrubStatus is the scrubber's part of /status.
type ScrubStatus struct {
	Enabled bool `json:"enabled"`
	// Cycles counts the full passes over this broker's sealed copies.
	Cycles    uint64 `json:"cycles"`
	Verified  uint64 `json:"verified"`
	BytesRead int64  `json:"bytes_read"`
	// Corrupt lists the copies found corrupt and not yet replaced.
	Corrupt     []meta.SegmentID `json:"corrupt,omitempty"`
	LastCycleAt time.Time        `json:"last_cycle_at,omitzero"`
	// CycleSeconds is the duration of the last full cycle.
	CycleSeconds float64 `json:"cycle_seconds,omitempty"`
}

func newScrubber(cfg Config, self meta.BrokerID, db *store.DB, cp ControlPlane, m *metrics, log zerolog.Logger, now func() time.Time) *scrubber {
	lim := rate.NewLimiter(rate.Inf, 0)
	if cfg.ScrubBytesPerSecond > 0 {
		lim = rate.NewLimiter(rate.Limit(cfg.ScrubBytesPerSecond), int(min(cfg.ScrubBytesPerSecond, 16<<20)))
	}
	return &scrubber{self: self, db: db, cp: cp, interval: cfg.ScrubInterval, lim: lim, metrics: m, now: now,
		log: log.With().Str("component", "scrub").Logger(), corrupt: map[meta.SegmentID]scrubMark{},
		status: ScrubStatus{Enabled: cfg.ScrubInterval > 0}}
}

// firstScrubDelay bounds the wait before the first cycle: a broker that
// restarts more often than the interval is still scrubbed, and a broker
// that just started is not read end to end while it catches up.
const firstScrubDelay = 5 * time.Minute

// run waits, scrubs one cycle, waits interval, and again, until ctx is
// done.
func (s *scrubber) run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(min(s.interval, firstScrubDelay)):
	}
	for {
		start := s.now()
		s.cycle(ctx)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.status.Cycles++
		s.status.LastCycleAt = s.now()
		s.status.CycleSeconds = s.now().Sub(start).Seconds()
		s.mu.Unlock()
		s.metrics.scrubCycles.Inc()
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.interval):
		}
	}
}

// cycle verifies every sealed copy the local metadata assigns here.
func (s *scrubber) cycle(ctx context.Context) {
	snap := s.cp.Snapshot()
	for i := range snap.Segments {
		seg := snap.Segments[i]
		if ctx.Err() != nil {
			return
		}
		if !seg.Sealed || !seg.HasReplica(s.self) || s.db.LatchErr(seg.ID) != nil {
			continue
		}
		fi, err := s.db.Identity(seg.ID)
		if err != nil || fi.Size != seg.ByteSize+store.FooterSize {
			continue // missing, short or overrun: the probe reports it
		}
		if !s.wait(ctx, fi.Size) {
			return
		}
		err = s.db.Verify(seg.ID, seg)
		s.metrics.scrubBytes.Add(float64(fi.Size))
		s.mu.Lock()
		s.status.Verified++
		s.status.BytesRead += fi.Size
		s.mu.Unlock()
		switch {
		case err == nil:
			s.clear(seg.ID)
		case errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrShort) || errors.Is(err, store.ErrNotSealed):
			s.mark(seg.ID, fi, err.Error())
		default:
			// Latched (an I/O error: the probe reports it), busy (being
			// received), gone: not this scrubber's finding.
			s.log.Debug().Err(err).Str("segment", string(seg.ID)).Msg("scrub: verify did not run")
		}
	}
}

// wait takes n bytes from the rate limiter, in bursts it can grant.
func (s *scrubber) wait(ctx context.Context, n int64) bool {
	if s.lim.Limit() == rate.Inf {
		return ctx.Err() == nil
	}
	for n > 0 {
		k := min(n, int64(s.lim.Burst()))
		if err := s.lim.WaitN(ctx, int(k)); err != nil {
			return false
		}
		n -= k
	}
	return true
}

func (s *scrubber) mark(id meta.SegmentID, fi store.FileIdentity, reason string) {
	s.mu.Lock()
	_, had := s.corrupt[id]
	s.corrupt[id] = scrubMark{ident: fi, reason: reason}
	s.mu.Unlock()
	if !had {
		s.metrics.scrubCorrupt.Inc()
		s.log.Error().Str("segment", string(id)).Str("reason", reason).Msg("scrub: copy corrupt")
	}
}

func (s *scrubber) clear(id meta.SegmentID) {
	s.mu.Lock()
	_, had := s.corrupt[id]
	delete(s.corrupt, id)
	s.mu.Unlock()
	if had {
		s.metrics.scrubCorrupt.Dec()
	}
}

// corruptNow reports whether the copy of id at identity (dev, ino, size)
// is the one the scrubber found corrupt. A different file clears the mark.
func (s *scrubber) corruptNow(id meta.SegmentID, dev, ino uint64, size int64) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	m, ok := s.corrupt[id]
	s.mu.Unlock()
	if !ok {
		return false
	}
	if m.ident.Dev == dev && m.ident.Ino == ino && m.ident.Size == size {
		return true
	}
	s.clear(id)
	return false
}

// snapshot returns the status, with the corrupt list sorted.
func (s *scrubber) snapshot() ScrubStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Corrupt = nil
	for id := range s.corrupt {
		st.Corrupt = append(st.Corrupt, id)
	}
	slices.Sort(st.Corrupt)
	return st
}
