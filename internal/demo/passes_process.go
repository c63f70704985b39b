package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/internal/harness"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// passStatus is what the stages that watch every heal pass read from the
// leader's /v1/status: the pass counter, the hold, and the last pass's
// failed and lost segments (admin.HealReport has no lost list; this mirror
// reads it without touching that one).
type passStatus struct {
	Leader meta.BrokerID
	Passes uint64
	Hold   string
	Index  uint64
	Dead   []meta.BrokerID
	Failed []admin.HealFailure
	Lost   []admin.LostEntry
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
		Leader: st.Broker, Passes: st.Passes, Hold: st.Hold, Index: st.LastPass.Index,
		Dead: st.LastPass.Dead, Failed: st.LastPass.Failed, Lost: st.LastPass.Lost,
		HoldReleased: st.LastPass.HoldReleased,
	}, true
}

// failedReason is the reason the pass reports seg failed with, or "".
func (p passStatus) failedReason(seg meta.SegmentID) string {
	for _, f := range p.Failed {
		if f.Segment == seg {
			return f.Reason
		}
	}
	return ""
}

// lost returns seg's entry in the pass's lost list.
func (p passStatus) lost(seg meta.SegmentID) (admin.LostEntry, bool) {
	for _, l := range p.Lost {
		if l.Segment == seg {
			return l, true
		}
	}
	return admin.LostEntry{}, false
}

// passTally counts, over the heal passes the demo observed, on how many a
// watched segment was reported as the stage requires. A segment is
// tracked from the first pass that reports it (its detection): every later
// observed pass that does not report it is a miss. Passes that ran between
// two observations (the pass counter jumped) are counted as unseen, never
// as reported. The zero value is not usable: use newPassTally.
//
// Passes are told apart by (coordinator, pass counter): a new leader's
// counter starts again, and its first pass seen is a new pass.
type passTally struct {
	watch []meta.SegmentID
	// reported judges one segment on one pass.
	reported func(p passStatus, seg meta.SegmentID) bool

	leader meta.BrokerID
	last   uint64
	seen   bool

	Observed int // distinct passes whose report the demo read
	Unseen   int // passes that ran but whose report was replaced before a poll
	Hits     map[meta.SegmentID]int
	Misses   map[meta.SegmentID]int
	// FirstPass is the observation count (1-based) at which a segment was
	// first reported; 0 while never.
	FirstPass map[meta.SegmentID]int
}

func newPassTally(watch []meta.SegmentID, reported func(passStatus, meta.SegmentID) bool) *passTally {
	return &passTally{
		watch: slices.Clone(watch), reported: reported,
		Hits: map[meta.SegmentID]int{}, Misses: map[meta.SegmentID]int{}, FirstPass: map[meta.SegmentID]int{},
	}
}

// observe takes one poll of the leader's status. It returns whether the
// poll showed a pass not observed before.
func (t *passTally) observe(p passStatus) bool {
	if t.seen && p.Leader == t.leader && p.Passes == t.last {
		return false
	}
	if t.seen && p.Leader == t.leader && p.Passes < t.last {
		return false // an older answer (a slow poll): already counted
	}
	if t.seen && p.Leader == t.leader && p.Passes > t.last+1 {
		t.Unseen += int(p.Passes - t.last - 1)
	}
	t.seen, t.leader, t.last = true, p.Leader, p.Passes
	t.Observed++
	for _, id := range t.watch {
		switch {
		case t.reported(p, id):
			t.Hits[id]++
			if t.FirstPass[id] == 0 {
				t.FirstPass[id] = t.Observed
			}
		case t.FirstPass[id] != 0:
			t.Misses[id]++
		}
	}
	return true
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

// leaderStatus reads the status of the leader among brokers (the leader
// their health names), skipping none of them: callers pass the brokers
// that can answer (a paused broker would stall each call).
func leaderStatus(ctx context.Context, brokers []*harness.Broker) (passStatus, error) {
	var leader meta.BrokerID
	var lastErr error
	for _, b := range brokers {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := b.Client.Health(hctx)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		if h.Leader != 0 {
			leader = h.Leader
			break
		}
	}
	if leader == 0 {
		if lastErr == nil {
			lastErr = fmt.Errorf("no broker of %d knows a leader", len(brokers))
		}
		return passStatus{}, lastErr
	}
	var lb *harness.Broker
	for _, b := range brokers {
		if b.ID == leader {
			lb = b
		}
	}
	if lb == nil {
		return passStatus{}, fmt.Errorf("leader %d is not among the brokers asked", leader)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	raw, err := lb.Client.Status(sctx)
	if err != nil {
		return passStatus{}, err
	}
	p, ok := decodePassStatus(raw)
	if !ok {
		return passStatus{}, fmt.Errorf("leader %d (admin %s): no heal pass in /v1/status yet", leader, lb.Admin)
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
			p, err := leaderStatus(ctx, d.c.Running())
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
