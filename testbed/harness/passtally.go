package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
)

// PassStatus is what a stage that acts on the leader's latest heal pass
// reads from its /v1/status: the pass counter, the brokers that pass listed
// dead, and the hold. The stages that judge every pass read them from the
// pass history instead (PassFeed, PassTally).
type PassStatus struct {
	Leader meta.BrokerID
	Passes uint64
	Hold   string
	Dead   []meta.BrokerID
	// HoldReleased: the last pass ran under an operator's release.
	HoldReleased bool
}

// DecodePassStatus reads a plugin /v1/status document. ok is false when it
// holds no pass yet (or the plugin is off).
func DecodePassStatus(raw json.RawMessage) (PassStatus, bool) {
	st, ok := admin.DecodeStatus(raw)
	if !ok || st.LastPass == nil {
		return PassStatus{}, false
	}
	return PassStatus{
		Leader: st.Broker, Passes: st.Passes, Hold: st.Hold, Dead: st.LastPass.Dead,
		HoldReleased: st.LastPass.HoldReleased,
	}, true
}

// PassTally counts, over the heal passes its feed reads (every pass of
// the leader's history that ended after the feed began), on how many a
// watched segment was reported as the stage requires. A segment is
// tracked from the first pass that reports it (its detection): every
// later pass that does not report it is a miss. A pass the history no
// longer holds is a gap of the feed (PassFeed.Problem), never a hit or a
// miss. The zero value is not usable: use NewPassTally.
type PassTally struct {
	watch []meta.SegmentID
	// reported judges one segment on one pass.
	reported func(r *heal.Report, seg meta.SegmentID) bool
	Feed     *PassFeed

	Observed int // passes judged
	Hits     map[meta.SegmentID]int
	Misses   map[meta.SegmentID]int
	// FirstPass is the count of passes judged (1-based) when a segment
	// was first reported, FirstAt the end of that pass; 0 and zero while
	// never.
	FirstPass map[meta.SegmentID]int
	FirstAt   map[meta.SegmentID]time.Time
	// Collected are the leftover copies (outside their set) of watched
	// segments that a pass deleted while it did not count the segment
	// lost: it saw every replica intact then (a scrubber had not yet
	// found them damaged).
	Collected map[heal.CopyRef]bool
}

func NewPassTally(watch []meta.SegmentID, reported func(*heal.Report, meta.SegmentID) bool, feed *PassFeed) *PassTally {
	return &PassTally{
		watch: slices.Clone(watch), reported: reported, Feed: feed,
		Hits: map[meta.SegmentID]int{}, Misses: map[meta.SegmentID]int{},
		FirstPass: map[meta.SegmentID]int{}, FirstAt: map[meta.SegmentID]time.Time{},
		Collected: map[heal.CopyRef]bool{},
	}
}

// Observe judges one pass.
func (t *PassTally) Observe(p *plugin.PassRecord) {
	t.Observed++
	for _, id := range t.watch {
		switch {
		case t.reported(&p.Report, id):
			t.Hits[id]++
			if t.FirstPass[id] == 0 {
				t.FirstPass[id] = t.Observed
				t.FirstAt[id] = p.Ended
			}
		case t.FirstPass[id] != 0:
			t.Misses[id]++
		}
	}
	for _, c := range p.Report.LeftoversDeleted {
		if slices.Contains(t.watch, c.Segment) && !p.Report.IsLost(c.Segment) {
			t.Collected[c] = true
		}
	}
}

// Detected: every watched segment was reported at least once.
func (t *PassTally) Detected() bool {
	for _, id := range t.watch {
		if t.FirstPass[id] == 0 {
			return false
		}
	}
	return true
}

// MinHits is the fewest passes any watched segment was reported on.
func (t *PassTally) MinHits() int {
	n := -1
	for _, id := range t.watch {
		if h := t.Hits[id]; n < 0 || h < n {
			n = h
		}
	}
	return max(n, 0)
}

// MissCount sums the misses of every watched segment.
func (t *PassTally) MissCount() int {
	n := 0
	for _, id := range t.watch {
		n += t.Misses[id]
	}
	return n
}

// Held: every watched segment was reported on want passes at least and
// on every pass after its first report.
func (t *PassTally) Held(want int) bool { return t.MinHits() >= want && t.MissCount() == 0 }

// Shortfall says how the watched segments fell short of Held(want), a
// line per segment and problem (never reported, reported on too few
// passes, passes after its first report that did not report it), what
// naming the report and within the time the watch had; nil when it held.
func (t *PassTally) Shortfall(what string, want int, within time.Duration) []string {
	var out []string
	for _, id := range t.watch {
		switch {
		case t.FirstPass[id] == 0:
			out = append(out, fmt.Sprintf("%s never reported %s within %v", id, what, within))
		case t.Hits[id] < want:
			out = append(out, fmt.Sprintf("%s reported %s on only %d passes within %v", id, what, t.Hits[id], within))
		}
		if m := t.Misses[id]; m > 0 {
			out = append(out, fmt.Sprintf("%s not reported %s on %d passes after its first report", id, what, m))
		}
	}
	return out
}

// leaderStatus reads the leader's heal status (Leader).
func (c *Cluster) leaderStatus(ctx context.Context) (PassStatus, error) {
	lb := c.Leader(ctx)
	if lb == nil {
		return PassStatus{}, fmt.Errorf("no running broker of %d names a leader", len(c.Running()))
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	raw, err := lb.Client.Status(sctx)
	if err != nil {
		return PassStatus{}, err
	}
	p, ok := DecodePassStatus(raw)
	if !ok {
		return PassStatus{}, fmt.Errorf("leader %d (admin %s): no heal pass in /v1/status yet", lb.ID, lb.Admin)
	}
	return p, nil
}

// HoldReleaser watches the leader's status while a stage heals and, when
// the mass-failure brake holds, releases it through the admin API
// (POST /v1/heal/release), as an operator would. Start it with
// Cluster.ReleaseHolds and stop it (once) with Stop; Releases and Reasons
// are read after Stop.
type HoldReleaser struct {
	Releases int
	Reasons  []string
	Errors   []string

	cancel context.CancelFunc
	done   chan struct{}
}

// ReleaseHolds polls every period until Stop. Each hold seen is released
// once per pass counter value (a release lasts until the condition
// clears, so one is normally enough). The goroutine alone writes the
// fields; Stop orders its writes before the caller's reads.
func (c *Cluster) ReleaseHolds(ctx context.Context, every time.Duration) *HoldReleaser {
	ctx, cancel := context.WithCancel(ctx)
	h := &HoldReleaser{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		var releasedAt uint64
		for ctx.Err() == nil {
			p, err := c.leaderStatus(ctx)
			if err == nil && p.Hold != "" && !p.HoldReleased && p.Passes != releasedAt {
				if rerr := c.release(ctx, p.Leader); rerr != nil {
					h.Errors = append(h.Errors, rerr.Error())
				} else {
					releasedAt = p.Passes
					h.Releases++
					if !slices.Contains(h.Reasons, p.Hold) {
						h.Reasons = append(h.Reasons, p.Hold)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return h
}

// Stop ends the watch and waits for it.
func (h *HoldReleaser) Stop() {
	h.cancel()
	<-h.done
}

// Note says what the releaser did, or "".
func (h *HoldReleaser) Note() string {
	s := ""
	if h.Releases > 0 {
		s = fmt.Sprintf("the mass-failure brake held (%s); released %d time(s) through POST /v1/heal/release, as an operator would", strings.Join(h.Reasons, "; "), h.Releases)
	}
	if len(h.Errors) > 0 {
		s += fmt.Sprintf("; %d release(s) failed: %s", len(h.Errors), h.Errors[0])
	}
	return s
}

// release posts POST /v1/heal/release to broker id.
func (c *Cluster) release(ctx context.Context, id meta.BrokerID) error {
	b := c.Broker(id)
	if b == nil {
		return fmt.Errorf("release: no broker %d", id)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return b.Client.Release(rctx)
}

// Acknowledge posts POST /v1/heal/acknowledge/{id} to broker b.
func Acknowledge(ctx context.Context, b *Broker, id meta.SegmentID) error {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return b.Client.Acknowledge(actx, id)
}
