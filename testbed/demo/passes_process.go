package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
)

// passStatus is what the stages that act on the leader's latest heal pass
// read from its /v1/status: the pass counter, the brokers that pass listed
// dead, and the hold. The stages that judge every pass read them from the
// pass history instead (harness.PassFeed, passTally).
type passStatus struct {
	Leader meta.BrokerID
	Passes uint64
	Hold   string
	Dead   []meta.BrokerID
	// HoldReleased: the last pass ran under an operator's release.
	HoldReleased bool
}

// decodePassStatus reads a plugin /v1/status document. ok is false when it
// holds no pass yet (or the plugin is off).
func decodePassStatus(raw json.RawMessage) (passStatus, bool) {
	st, ok := admin.DecodeStatus(raw)
	if !ok || st.LastPass == nil {
		return passStatus{}, false
	}
	return passStatus{
		Leader: st.Broker, Passes: st.Passes, Hold: st.Hold, Dead: st.LastPass.Dead,
		HoldReleased: st.LastPass.HoldReleased,
	}, true
}

// passTally counts, over the heal passes its feed reads (every pass of
// the leader's history that ended after the feed began), on how many a
// watched segment was reported as the stage requires. A segment is
// tracked from the first pass that reports it (its detection): every
// later pass that does not report it is a miss. A pass the history no
// longer holds is a gap of the feed (harness.PassFeed.Problem), never a hit or a
// miss. The zero value is not usable: use newPassTally.
type passTally struct {
	watch []meta.SegmentID
	// reported judges one segment on one pass.
	reported func(r *heal.Report, seg meta.SegmentID) bool
	feed     *harness.PassFeed

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

func newPassTally(watch []meta.SegmentID, reported func(*heal.Report, meta.SegmentID) bool, feed *harness.PassFeed) *passTally {
	return &passTally{
		watch: slices.Clone(watch), reported: reported, feed: feed,
		Hits: map[meta.SegmentID]int{}, Misses: map[meta.SegmentID]int{},
		FirstPass: map[meta.SegmentID]int{}, FirstAt: map[meta.SegmentID]time.Time{},
		Collected: map[heal.CopyRef]bool{},
	}
}

// read judges the passes the feed reads from c's brokers now and returns
// them; its error is the feed's (the passes not read are read later).
func (t *passTally) read(ctx context.Context, c *harness.Cluster) ([]plugin.PassRecord, error) {
	recs, err := t.feed.Next(ctx, c)
	for i := range recs {
		t.observe(&recs[i])
	}
	return recs, err
}

// observe judges one pass.
func (t *passTally) observe(p *plugin.PassRecord) {
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

// detected: every watched segment was reported at least once.
func (t *passTally) detected() bool {
	for _, id := range t.watch {
		if t.FirstPass[id] == 0 {
			return false
		}
	}
	return true
}

// minHits is the fewest passes any watched segment was reported on.
func (t *passTally) minHits() int {
	n := -1
	for _, id := range t.watch {
		if h := t.Hits[id]; n < 0 || h < n {
			n = h
		}
	}
	return max(n, 0)
}

// misses sums the misses of every watched segment.
func (t *passTally) misses() int {
	n := 0
	for _, id := range t.watch {
		n += t.Misses[id]
	}
	return n
}

// leaderStatus reads the leader's heal status (harness.Cluster.LeaderBroker).
func leaderStatus(ctx context.Context, c *harness.Cluster) (passStatus, error) {
	lb := c.LeaderBroker(ctx)
	if lb == nil {
		return passStatus{}, fmt.Errorf("no running broker of %d names a leader", len(c.Running()))
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	raw, err := lb.Client.Status(sctx)
	if err != nil {
		return passStatus{}, err
	}
	p, ok := decodePassStatus(raw)
	if !ok {
		return passStatus{}, fmt.Errorf("leader %d (admin %s): no heal pass in /v1/status yet", lb.ID, lb.Admin)
	}
	return p, nil
}

// holdReleaser watches the leader's status while a stage heals and, when
// the mass-failure brake holds, releases it through the admin API
// (POST /v1/heal/release), as an operator would. Start it with
// startHoldReleaser and stop it (once) with stop; Releases and Reasons are
// read after stop.
type holdReleaser struct {
	Releases int
	Reasons  []string
	Errors   []string

	cancel context.CancelFunc
	done   chan struct{}
}

// startHoldReleaser polls every tick until stop. Each hold seen is released
// once per pass counter value (a release lasts until the condition clears,
// so one is normally enough). The goroutine alone writes the fields and
// does not log (the progress output is the caller's); stop orders its
// writes before the caller's reads.
func (d *demo) startHoldReleaser(ctx context.Context) *holdReleaser {
	ctx, cancel := context.WithCancel(ctx)
	h := &holdReleaser{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		var releasedAt uint64
		for ctx.Err() == nil {
			p, err := leaderStatus(ctx, d.c)
			if err == nil && p.Hold != "" && !p.HoldReleased && p.Passes != releasedAt {
				if rerr := d.release(ctx, p.Leader); rerr != nil {
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
			case <-time.After(d.o.Tick):
			}
		}
	}()
	return h
}

// stop ends the watch and waits for it.
func (h *holdReleaser) stop() {
	h.cancel()
	<-h.done
}

// note says what the releaser did, or "".
func (h *holdReleaser) note() string {
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
func (d *demo) release(ctx context.Context, id meta.BrokerID) error {
	b := d.c.Broker(id)
	if b == nil {
		return fmt.Errorf("release: no broker %d", id)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return b.Client.Release(rctx)
}

// acknowledge posts POST /v1/heal/acknowledge/{id} to broker b.
func acknowledge(ctx context.Context, b *harness.Broker, id meta.SegmentID) error {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return b.Client.Acknowledge(actx, id)
}
