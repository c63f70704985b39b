package plugin

import (
	"maps"
	"time"

	"github.com/malachi-log/malachi/heal"
)

// Totals are the coordinator's cumulative figures since this node started
// leading (Since), summed over the passes' reports in the report hook:
// the last pass says what is wrong now, Totals what healing has done.
// They start again from zero when a new coordinator starts (a node that
// regains leadership within one grace delay resumes its coordinator, and
// its totals with it); each leader counts only its own passes.
type Totals struct {
	// Since is when this coordinator started.
	Since time.Time `json:"since"`
	// Passes counts the passes it finished.
	Passes uint64 `json:"passes"`
	// SegmentsHealed counts the segments whose new replica set was
	// recorded (heal.Report.Healed), BytesHealed the bytes the backfills
	// transferred (heal.Report.BytesCopied) and Backfills the backfills
	// started (heal.Report.Backfills).
	SegmentsHealed uint64 `json:"segments_healed"`
	BytesHealed    int64  `json:"bytes_healed"`
	Backfills      uint64 `json:"backfills"`
	// Settled, Confirmed and Deleted count the copies acted on.
	Settled   uint64 `json:"settled"`
	Confirmed uint64 `json:"confirmed"`
	Deleted   uint64 `json:"deleted"`
	// Failures counts, by reason (heal.Reason's name), the segments
	// reported failed, once per pass: a segment that fails on ten passes
	// counts ten.
	Failures map[string]uint64 `json:"failures,omitempty"`
}

// newTotals starts the figures of a coordinator started at since.
func newTotals(since time.Time) *Totals { return &Totals{Since: since} }

// add folds one pass's report in.
func (t *Totals) add(r *heal.Report) {
	t.Passes++
	t.SegmentsHealed += uint64(len(r.Healed))
	t.BytesHealed += r.BytesCopied
	t.Backfills += uint64(max(r.Backfills, 0))
	t.Settled += uint64(len(r.Settled))
	t.Confirmed += uint64(len(r.Confirmed))
	t.Deleted += uint64(len(r.Deleted))
	for _, f := range r.Failed {
		if t.Failures == nil {
			t.Failures = map[string]uint64{}
		}
		t.Failures[f.Reason.String()]++
	}
}

// clone is a copy the caller owns.
func (t *Totals) clone() *Totals {
	if t == nil {
		return nil
	}
	c := *t
	c.Failures = maps.Clone(t.Failures)
	return &c
}
