package plugin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/scrub"
	"github.com/malachi-log/malachi/store"
)

// scrubber runs the broker's scrub.Scrubber: it verifies this broker's
// sealed copies in the background at a bounded rate (store.Verify: every
// frame's CRC, the offsets, the footer and the checksum against the
// metadata). It finds the in-place corruption the size probe cannot see by
// construction: a copy that fails is remembered by file identity, in Pebble
// under <data_dir>/scrub so that it survives a restart, and reported by the
// probe as heal.Corrupt until the file changes or is deleted. Progress is
// kept there too: a restarted broker resumes after the last copy verified.
type scrubber struct {
	s       *scrub.Scrubber
	metrics *metrics
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

// firstScrubDelay bounds the wait before the first cycle: a broker that
// restarts more often than the interval is still scrubbed, and a broker
// that just started is not read end to end while it catches up.
const firstScrubDelay = 5 * time.Minute

func newScrubber(cfg Config, self meta.BrokerID, db *store.DB, cp ControlPlane, m *metrics, log zerolog.Logger, now func() time.Time) (*scrubber, error) {
	sc := &scrubber{metrics: m}
	s, err := scrub.Open(scrub.Config{
		Dir:            filepath.Join(cfg.DataDir, "scrub"),
		Self:           self,
		BytesPerSecond: cfg.ScrubBytesPerSecond,
		RoundPause:     cfg.ScrubInterval,
		FirstDelay:     min(cfg.ScrubInterval, firstScrubDelay),
		Logger:         log,
		Now:            now,
		OnVerify:       sc.verified,
		OnRound:        func(scrub.Stats) { m.scrubCycles.Inc() },
	}, db, cp)
	if err != nil {
		return nil, fmt.Errorf("plugin: heal.scrub_interval = %q: %w", cfg.ScrubInterval, err)
	}
	sc.s = s
	m.scrubCorrupt.Set(float64(s.Stats().Corrupt))
	return sc, nil
}

func (sc *scrubber) verified(_ meta.SegmentID, bytes int64, _ error) {
	sc.metrics.scrubBytes.Add(float64(bytes))
	sc.metrics.scrubCorrupt.Set(float64(sc.s.Stats().Corrupt))
}

// run scrubs until ctx is done.
func (sc *scrubber) run(ctx context.Context, log zerolog.Logger) {
	if err := sc.s.Run(ctx); !errors.Is(err, context.Canceled) {
		log.Error().Err(err).Msg("scrub stopped")
	}
}

func (sc *scrubber) close() error { return sc.s.Close() }

// clear forgets any finding on id: the copy was deleted.
func (sc *scrubber) clear(id meta.SegmentID) error {
	if err := sc.s.Forget(id); err != nil {
		return err
	}
	sc.metrics.scrubCorrupt.Set(float64(sc.s.Stats().Corrupt))
	return nil
}

// corruptNow reports whether the copy of id at identity (dev, ino, size)
// is the one the scrubber found corrupt. A nil scrubber finds nothing.
func (sc *scrubber) corruptNow(id meta.SegmentID, dev, ino uint64, size int64) bool {
	if sc == nil {
		return false
	}
	_, bad := sc.s.Corrupt(id, store.FileIdentity{Dev: dev, Ino: ino, Size: size})
	return bad
}

// snapshot returns the status, with the corrupt list sorted.
func (sc *scrubber) snapshot() ScrubStatus {
	st := sc.s.Stats()
	out := ScrubStatus{Enabled: true, Cycles: st.Rounds, Verified: st.CopiesVerified, BytesRead: int64(st.BytesVerified),
		LastCycleAt: st.LastRoundAt, CycleSeconds: st.RoundSeconds}
	for _, f := range sc.s.Findings() {
		out.Corrupt = append(out.Corrupt, f.Segment)
	}
	return out
}
