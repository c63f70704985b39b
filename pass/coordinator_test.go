package pass

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

func calls(f *fakeBrokers) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, "\n")
}

// seenLongAgo makes the coordinator's grace clock start an hour ago, so
// the brokers without a report are dead.
func seenLongAgo(c *Coordinator, w *world) {
	seeAll(c, w.in.Seen)
}

// P2.2: the command only when every backfill of the segment succeeded.
func TestCoordinatorBackfillGatesCommand(t *testing.T) {
	w := newWorld(9, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3)).dead(1).dead(2)
	f := newFake(w)
	f.failFill = func(target meta.BrokerID, s meta.SegmentID) bool { return s == "a" && target == 5 }
	c := coordinator(t, f, w.in.Now)
	seenLongAgo(c, w)
	rep, err := c.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := calls(f)
	if strings.Contains(got, "set a") || !strings.Contains(got, "set b [3 6 7]") {
		t.Errorf("calls:\n%s", got)
	}
	if rep.FailedReason("a") != heal.BackfillFailed || !slices.Equal(rep.Healed, []meta.SegmentID{"b"}) {
		t.Errorf("report %+v", rep)
	}
	if !strings.Contains(rep.Failed[0].Err, "replace_dead_replica to 5 from 3: transfer broke") {
		t.Errorf("failure text %q", rep.Failed[0].Err)
	}
}

// P8.2: a dropped latched copy is deleted only after the new set is
// recorded; a stale command deletes nothing and the segment is re-planned.
func TestCoordinatorDeleteAfterRecorded(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3))
	w.anomaly(2, "a", heal.Latched, 0, false).anomaly(2, "b", heal.Latched, 0, false)
	f := newFake(w)
	f.failSet = func(s meta.SegmentID) error {
		if s == "b" {
			return fmt.Errorf("cluster: %w", meta.ErrStaleReplicas)
		}
		return nil
	}
	c := coordinator(t, f, w.in.Now)
	rep, err := c.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := calls(f)
	ia, id := strings.Index(got, "set a [1 3 4]"), strings.Index(got, "delete a@2")
	if ia < 0 || id < ia || strings.Contains(got, "delete b") {
		t.Errorf("calls:\n%s", got)
	}
	if !slices.Equal(rep.Stale, []meta.SegmentID{"b"}) || len(rep.Deleted) != 1 || len(rep.Failed) != 0 {
		t.Errorf("report %+v", rep)
	}
	// Any other command error: reported, nothing deleted.
	f.calls = nil
	f.failSet = func(meta.SegmentID) error { return errors.New("raft: timeout") }
	rep, _ = c.Pass(context.Background())
	if strings.Contains(calls(f), "delete") || rep.FailedReason("a") != heal.CommandFailed {
		t.Errorf("calls:\n%s\nreport %+v", calls(f), rep)
	}
}

// P5.2: a short copy is resumed at its exact durable end, which the
// target finds itself within the one backfill request; a healthy cluster
// costs no call at all.
func TestCoordinatorResumeAtDurableEnd(t *testing.T) {
	w := newWorld(3, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3)).anomaly(2, "a", heal.Short, 512, false)
	f := newFake(w)
	f.durable[heal.CopyRef{Segment: "a", Broker: 2}] = 496 // the last whole frame ends before the stored size
	c := coordinator(t, f, w.in.Now)
	rep, err := c.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.calls, "\n"); got != "backfill a 2<-1 from 496" {
		t.Errorf("calls:\n%s", got)
	}
	if rep.BytesCopied != 1000-496 || !slices.Equal(rep.Resumed, []heal.CopyRef{{Segment: "a", Broker: 2}}) || !slices.Equal(rep.Healed, []meta.SegmentID{"a"}) {
		t.Errorf("report %+v", rep)
	}
	f.calls = nil
	f.reports[2] = heal.ProbeReport{Broker: 2}
	if _, err := c.Pass(context.Background()); err != nil || len(f.calls) != 0 {
		t.Errorf("healthy pass made calls %v (err %v)", f.calls, err)
	}
}

// P6.5/P6.6: confirm only after a successful settle of the same copy.
func TestCoordinatorConfirmAfterSettle(t *testing.T) {
	w := newWorld(3, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3)).anomaly(1, "a", heal.Overrun, 1040, false).anomaly(1, "b", heal.Overrun, 1040, false)
	f := newFake(w)
	c := coordinator(t, f, w.in.Now)
	rep, _ := c.Pass(context.Background())
	got := calls(f)
	for _, c := range []string{"a@1", "b@1"} {
		if i, j := strings.Index(got, "settle "+c), strings.Index(got, "confirm "+c); i < 0 || j < i {
			t.Errorf("%s: want settle then confirm:\n%s", c, got)
		}
	}
	if len(rep.Settled) != 2 || len(rep.Confirmed) != 2 {
		t.Errorf("report %+v", rep)
	}
	f.calls, f.settleErr = nil, errors.New("fsync: EIO")
	rep, _ = c.Pass(context.Background())
	if got := calls(f); strings.Contains(got, "confirm") {
		t.Errorf("confirmed after a failed settle:\n%s", got)
	}
	if len(rep.Settled) != 0 || len(rep.Confirmed) != 0 || len(rep.Unsettled) != 2 {
		t.Errorf("report %+v", rep)
	}
}

// Leadership lost mid-pass: nothing is started after the cancellation, no
// command is applied, the report says aborted, and its Ready holds only
// the commands whose backfills succeeded (c's, a's and b's, which the fake
// completes as the cancellation lands; d's and e's never ran).
func TestCoordinatorStopsWhenLeadershipLost(t *testing.T) {
	w := newWorld(12, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3), seg("c", 1, 2, 3), seg("d", 1, 2, 3), seg("e", 1, 2, 3)).dead(1)
	w.anomaly(2, "c", heal.Latched, 0, false)
	f := newFake(w)
	ctx, cancel := context.WithCancel(context.Background())
	f.onCall = func(s string) {
		if strings.HasPrefix(s, "backfill b") {
			cancel() // the second segment's backfill: leadership goes
		}
	}
	c := coordinator(t, f, w.in.Now)
	c.cfg.Concurrency = 1 // one step at a time, in plan order: c, a, b, d, e
	seenLongAgo(c, w)
	rep, err := c.Pass(ctx)
	if !errors.Is(err, context.Canceled) || !rep.Aborted {
		t.Fatalf("err %v aborted %v", err, rep.Aborted)
	}
	got := calls(f)
	if strings.Contains(got, "set ") || strings.Contains(got, "delete") {
		t.Errorf("applied after leadership was lost:\n%s", got)
	}
	if !strings.Contains(got, "backfill a") || strings.Contains(got, "backfill d") || strings.Contains(got, "backfill e") {
		t.Errorf("want backfills of c, a, b only:\n%s", got)
	}
	var ready []meta.SegmentID
	for _, cmd := range rep.Ready {
		ready = append(ready, cmd.ID)
	}
	if !slices.Equal(ready, []meta.SegmentID{"c", "a", "b"}) {
		t.Errorf("aborted pass: Ready %v, want only the commands whose backfills succeeded: [c a b]", ready)
	}
}

// The grace delay runs from when this leader started watching: a broker
// that never answered is not dead on the first pass of a new term.
func TestCoordinatorGraceFromTermStart(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3)).dead(1)
	f := newFake(w)
	now := w.in.Now
	c, err := New(Config{Metadata: f, Prober: f, Backfiller: f, Settler: f, Deleter: f,
		Policy: heal.Policy{Grace: 10 * time.Second, SettleBatch: 8}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := c.Pass(context.Background())
	if len(f.calls) != 0 || len(rep.Suspect) != 1 {
		t.Fatalf("first pass: calls %v report %+v", f.calls, rep)
	}
	now = now.Add(11 * time.Second)
	rep, _ = c.Pass(context.Background())
	if !slices.Equal(rep.Healed, []meta.SegmentID{"a"}) || !slices.Equal(rep.Dead, []meta.BrokerID{1}) {
		t.Fatalf("after grace: calls %v report %+v", f.calls, rep)
	}
	if c.Last().Index != rep.Index || len(c.Last().Healed) != 1 {
		t.Errorf("Last %+v", c.Last())
	}
}

func TestCoordinatorRun(t *testing.T) {
	w := newWorld(3, 3, seg("a", 1, 2, 3))
	f := newFake(w)
	tick := make(chan time.Time)
	var reports []heal.Report
	c, err := New(Config{Metadata: f, Prober: f, Backfiller: f, Settler: f, Deleter: f,
		Now: func() time.Time { return t0 }, OnReport: func(r heal.Report) { reports = append(reports, r) },
		After: func(time.Duration) <-chan time.Time { return tick }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- c.Run(ctx) }()
	tick <- t0
	tick <- t0
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
	if len(reports) < 2 {
		t.Errorf("%d reports, want at least 2", len(reports))
	}
}

func TestNewCoordinatorValidates(t *testing.T) {
	f := &fakeBrokers{}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Metadata is nil"},
		{Config{Metadata: f}, "Prober is nil"},
		{Config{Metadata: f, Prober: f, Backfiller: f, Settler: f, Deleter: f, Concurrency: -1}, "Concurrency -1"},
		{Config{Metadata: f, Prober: f, Backfiller: f, Settler: f, Deleter: f, Policy: heal.Policy{SettleBatch: -1}}, "settle_batch -1"},
	} {
		if _, err := New(tc.cfg); !errors.Is(err, heal.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
}

// barrierProber answers a probe only once every broker's probe is in
// flight at the same time, or fails it when its own deadline ends first.
type barrierProber struct {
	*fakeBrokers
	all     chan struct{}
	mu      sync.Mutex
	waiting int
	need    int
}

func (b *barrierProber) Probe(ctx context.Context, id meta.BrokerID, index uint64) (heal.ProbeReport, error) {
	b.mu.Lock()
	b.waiting++
	if b.waiting == b.need {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return b.fakeBrokers.Probe(ctx, id, index)
	case <-ctx.Done():
		return heal.ProbeReport{}, ctx.Err()
	}
}

// TestCoordinatorProbesEveryBrokerAtOnce: a pass probes all brokers of a
// 300-broker cluster concurrently (no fixed bound such as 64), so a
// broker slow to answer delays no other broker's probe. Every probe here
// waits until all 300 are in flight: with any bound below 300 none would
// answer before its deadline and every broker would be suspect.
func TestCoordinatorProbesEveryBrokerAtOnce(t *testing.T) {
	const n = 300
	w := newWorld(n, 3, seg("a", 1, 2, 3))
	f := newFake(w)
	bp := &barrierProber{fakeBrokers: f, all: make(chan struct{}), need: n}
	c, err := New(Config{Metadata: f, Prober: bp, Backfiller: f, Settler: f, Deleter: f,
		ProbeTimeout: time.Minute, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Suspect)+len(rep.Dead) != 0 {
		t.Fatalf("%d suspect and %d dead brokers: probes did not all run at once", len(rep.Suspect), len(rep.Dead))
	}
}

// fastTick is the FastTick the plugin's loop ran with.
const fastTick = 25 * time.Millisecond

// TestNextPassIgnoresAuthFailed (moved from the plugin with the loop): a broker inside its grace delay hurries
// the next pass; one that only fails authentication does not (it would
// make the coordinator probe every broker every 25 ms for as long as the
// certificates are wrong).
func TestNextPassIgnoresAuthFailed(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    heal.Report
		want time.Duration
		ok   bool
	}{
		{"work done", heal.Report{Backfills: 1, Suspect: []meta.BrokerID{5}}, 0, true},
		{"every backfill failed", heal.Report{Backfills: 1, Failed: []heal.Failure{{Segment: "a", Reason: heal.BackfillFailed}}}, 0, false},
		{"one of two backfills failed", heal.Report{Backfills: 2, Failed: []heal.Failure{{Segment: "a", Reason: heal.BackfillFailed}}}, 0, true},
		{"in grace", heal.Report{Suspect: []meta.BrokerID{4}}, fastTick, true},
		{"deferred", heal.Report{Deferred: 2}, fastTick, true},
		{"quiet", heal.Report{}, 0, false},
		{"auth failed only", heal.Report{Suspect: []meta.BrokerID{5}, Deferred: 3, AuthFailed: []heal.AuthFailure{{Broker: 5, Reason: "x"}}}, 0, false},
		{"auth failed and in grace", heal.Report{Suspect: []meta.BrokerID{4, 5}, AuthFailed: []heal.AuthFailure{{Broker: 5}}}, fastTick, true},
	} {
		d, ok := NextPass(&tc.r, fastTick)
		if d != tc.want || ok != tc.ok {
			t.Errorf("%s: next pass in %v (%v), want %v (%v)", tc.name, d, ok, tc.want, tc.ok)
		}
	}
}

// invalidProber answers broker 2's probes with a report that is not valid
// (a fact of an unknown flag); the others as the fake does.
type invalidProber struct{ *fakeBrokers }

func (p invalidProber) Probe(ctx context.Context, id meta.BrokerID, index uint64) (heal.ProbeReport, error) {
	r, err := p.fakeBrokers.Probe(ctx, id, index)
	if id == 2 {
		r.Facts = append(r.Facts, heal.Fact{Segment: "a", Flags: 99})
	}
	return r, err
}

// TestCoordinatorLeavesOutInvalidReports: a report is validated once,
// where it crosses the network; an invalid one is left out, as if its
// broker had not answered (suspect within its grace delay), and the pass
// goes on for the others.
func TestCoordinatorLeavesOutInvalidReports(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3))
	f := newFake(w)
	c, err := New(Config{Metadata: f, Prober: invalidProber{f}, Backfiller: f, Settler: f, Deleter: f,
		Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Suspect, []meta.BrokerID{2}) || len(rep.Dead) != 0 {
		t.Fatalf("suspect %v dead %v, want broker 2 suspect only (its report invalid)", rep.Suspect, rep.Dead)
	}
}

// droppingProber loses the first probe of broker 2 as a cut link does
// (no answer until the caller gives up); later attempts answer.
type droppingProber struct {
	*fakeBrokers
	mu       sync.Mutex
	attempts int
}

func (p *droppingProber) Probe(ctx context.Context, id meta.BrokerID, index uint64) (heal.ProbeReport, error) {
	if id == 2 {
		p.mu.Lock()
		p.attempts++
		first := p.attempts == 1
		p.mu.Unlock()
		if first {
			<-ctx.Done()
			return heal.ProbeReport{}, ctx.Err()
		}
	}
	return p.fakeBrokers.Probe(ctx, id, index)
}

// TestProbeHedgeReachesAFlappingBroker: broker 2's first probe is lost
// (a flapping link dropped it); the hedge asks again within the same
// ProbeTimeout and broker 2 is seen, not suspect. Without a hedge, the
// pass waits the whole ProbeTimeout and counts it suspect.
func TestProbeHedgeReachesAFlappingBroker(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hedge   time.Duration
		suspect bool
	}{{"hedged", 10 * time.Millisecond, false}, {"not hedged", -1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(3, 3, seg("a", 1, 2, 3))
			f := newFake(w)
			p := &droppingProber{fakeBrokers: f}
			c, err := New(Config{Metadata: f, Prober: p, Backfiller: f, Settler: f, Deleter: f,
				ProbeTimeout: 200 * time.Millisecond, ProbeHedge: tc.hedge, Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := c.Pass(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(rep.Suspect, 2); got != tc.suspect {
				t.Fatalf("broker 2 suspect %v, want %v (suspect %v, %d attempts)", got, tc.suspect, rep.Suspect, p.attempts)
			}
		})
	}
}
