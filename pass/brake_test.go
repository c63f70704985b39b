package pass

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// 3 of 6 brokers lost within one grace window: no backfill
// starts, the hold is reported on every pass, and an operator's release
// lets placement go ahead.
func TestCoordinatorHoldsOnMassFailure(t *testing.T) {
	w := newWorld(6, 3, seg("a", 1, 2, 3), seg("b", 3, 4, 5), seg("c", 1, 4, 5))
	w.anomaly(4, "b", heal.Short, 10, false)
	f := newFake(w)
	delete(f.reports, 1)
	delete(f.reports, 2)
	delete(f.reports, 3)
	now := t0
	c, err := New(Config{Metadata: f, Prober: f, Backfiller: f, Settler: f, Deleter: f,
		Policy: heal.Policy{Grace: 10 * time.Second, SettleBatch: 8}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for pass := 0; pass < 3; pass++ {
		now = now.Add(11 * time.Second)
		rep, err := c.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(rep.HoldReason, "brokers_missing: 3 of 6") {
			t.Fatalf("pass %d: hold_reason %q", pass, rep.HoldReason)
		}
		if len(f.calls) != 0 {
			t.Fatalf("pass %d: calls under a hold: %v", pass, f.calls)
		}
		// The first pass of a term: 1-3 are suspect, only b's short copy
		// waits; then c's dead replica too.
		if want := min(pass+1, 2); rep.Deferred != want {
			t.Fatalf("pass %d: deferred %d, want %d", pass, rep.Deferred, want)
		}
	}
	c.Release()
	f.calls = nil
	rep, _ := c.Pass(context.Background())
	if got := strings.Join(f.calls, "\n"); !rep.HoldReleased || !strings.Contains(got, "backfill b 4<-5") || !strings.Contains(got, "backfill c 6<-4") {
		t.Errorf("after release: report %s, calls %v", rep, f.calls)
	}
}

// A split of 2 of 6 brokers heals, and the two answer on different
// passes: the pass where the hold lifts (one answered) counts the other
// suspect, not dead, and its grace delay starts again from that pass, so
// that its replicas are kept when it answers one pass later; a straggler
// that never answers is healed one grace delay after the hold lifted.
func TestHoldLiftRestartsGrace(t *testing.T) {
	for _, returns := range []bool{true, false} {
		w := newWorld(6, 3, seg("a", 1, 2, 3), seg("b", 3, 4, 5), seg("c", 2, 5, 6))
		f := newFake(w)
		r5, r6 := f.reports[5], f.reports[6]
		delete(f.reports, 5)
		delete(f.reports, 6)
		now := t0
		c, err := New(Config{Metadata: f, Prober: f, Backfiller: f, Settler: f, Deleter: f,
			Policy: heal.Policy{Grace: 10 * time.Second, SettleBatch: 8}, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		pass := func(step time.Duration) heal.Report {
			t.Helper()
			now = now.Add(step)
			f.calls = nil
			rep, err := c.Pass(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return rep
		}
		for range 2 {
			if rep := pass(11 * time.Second); !strings.HasPrefix(rep.HoldReason, "brokers_missing: 2 of 6") {
				t.Fatalf("split: hold_reason %q", rep.HoldReason)
			}
		}
		f.reports[5] = r5 // broker 5 answers first
		rep := pass(time.Second)
		if rep.HoldReason != "" || !slices.Equal(rep.GraceRestarted, []meta.BrokerID{6}) || len(rep.Dead) != 0 || len(f.calls) != 0 {
			t.Fatalf("the hold lifts: %s, grace restarted %v, dead %v, calls %v", rep, rep.GraceRestarted, rep.Dead, f.calls)
		}
		if !slices.ContainsFunc(rep.Events, func(e heal.Event) bool { return e.Kind == heal.EventHoldLifted }) {
			t.Errorf("no hold_lifted event: %v", rep.Events)
		}
		if rep = pass(9 * time.Second); !slices.Equal(rep.Suspect, []meta.BrokerID{6}) || len(rep.GraceRestarted) != 0 || len(f.calls) != 0 {
			t.Fatalf("within the restarted grace delay: %s, suspect %v, calls %v", rep, rep.Suspect, f.calls)
		}
		if returns {
			f.reports[6] = r6
			if rep = pass(2 * time.Second); len(rep.Dead)+len(rep.Suspect) != 0 || len(rep.Healed) != 0 || len(f.calls) != 0 {
				t.Fatalf("broker 6 back: %s, calls %v", rep, f.calls)
			}
			continue
		}
		if rep = pass(2 * time.Second); !slices.Equal(rep.Dead, []meta.BrokerID{6}) || !strings.Contains(strings.Join(f.calls, " "), "backfill c") {
			t.Fatalf("broker 6 still missing past the restarted grace delay: %s, dead %v, calls %v", rep, rep.Dead, f.calls)
		}
	}
}

// A broker that answers its probe with metadata behind the pass's index
// (ErrBehind) is up: listed behind and suspect on every pass, never dead
// however long it lags, and none of its replicas is replaced; a broker that
// does not answer at all is dead past the grace delay.
func TestBehindBrokerNeverDead(t *testing.T) {
	w := newWorld(5, 3, seg("a", 1, 2, 4), seg("b", 3, 4, 5), seg("c", 1, 2, 3))
	f := newFake(w)
	f.behind = map[meta.BrokerID]bool{4: true}
	delete(f.reports, 5)
	now := t0
	c, err := New(Config{Metadata: f, Prober: f, Backfiller: f, Settler: f, Deleter: f,
		Policy: heal.Policy{Grace: 10 * time.Second, SettleBatch: 8, HoldShare: -1}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for pass := range 4 {
		now = now.Add(11 * time.Second)
		f.calls = nil
		rep, err := c.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Behind, []meta.BrokerID{4}) || !slices.Contains(rep.Suspect, 4) || slices.Contains(rep.Dead, 4) {
			t.Fatalf("pass %d: behind %v, suspect %v, dead %v", pass, rep.Behind, rep.Suspect, rep.Dead)
		}
		if got := strings.Join(f.calls, " "); strings.Contains(got, "set a ") || strings.Contains(got, "<-4") {
			t.Fatalf("pass %d: a replica of the broker behind replaced or read: %v", pass, f.calls)
		}
		if pass > 0 && !slices.Contains(rep.Dead, 5) {
			t.Fatalf("pass %d: broker 5, silent past the grace delay, not dead: %v", pass, rep.Dead)
		}
	}
}

// timedProber is fakeBrokers' Probe on a clock that a probe of a broker
// in slow advances by the probe timeout (it never answers).
type timedProber struct {
	*fakeBrokers
	mu   sync.Mutex
	now  time.Time
	slow map[meta.BrokerID]bool
}

func (p *timedProber) clock() time.Time { p.mu.Lock(); defer p.mu.Unlock(); return p.now }

func (p *timedProber) Probe(ctx context.Context, b meta.BrokerID, index uint64) (heal.ProbeReport, error) {
	p.mu.Lock()
	slow := p.slow[b]
	if slow {
		p.now = p.now.Add(2 * time.Second)
	}
	p.mu.Unlock()
	if slow {
		return heal.ProbeReport{}, context.DeadlineExceeded
	}
	return p.fakeBrokers.Probe(ctx, b, index)
}

// A split cuts brokers 4 and 5 off between their probes: 4 answers, 5's
// probe times out (2 s, past the 1 s grace delay). That pass counts 5
// suspect, not dead (it was seen within the grace delay before the pass
// began probing), so nothing is re-replicated; on the next pass both are
// missing, seen within one grace window of each other (each at the time
// it answered), and the mass-failure brake holds.
func TestSplitBetweenProbesHolds(t *testing.T) {
	w := newWorld(6, 3, seg("a", 4, 5, 1), seg("b", 5, 1, 2), seg("c", 3, 4, 5))
	p := &timedProber{fakeBrokers: newFake(w), now: t0}
	c, err := New(Config{Metadata: p, Prober: p, Backfiller: p, Settler: p, Deleter: p, MaxProbes: 1,
		Policy: heal.Policy{Grace: time.Second, SettleBatch: 8}, Now: p.clock})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(what string) heal.Report {
		t.Helper()
		p.calls = nil
		rep, err := c.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(p.calls) != 0 {
			t.Fatalf("%s: calls %v (report %s)", what, p.calls, rep)
		}
		return rep
	}
	pass("all up")
	p.now = p.now.Add(200 * time.Millisecond)
	p.slow = map[meta.BrokerID]bool{5: true}
	if rep := pass("the split lands between the probes of 4 and 5"); !slices.Equal(rep.Suspect, []meta.BrokerID{5}) || len(rep.Dead) != 0 || rep.Backfills != 0 {
		t.Fatalf("the split lands between the probes of 4 and 5: suspect %v, dead %v, backfills %d", rep.Suspect, rep.Dead, rep.Backfills)
	}
	p.now = p.now.Add(200 * time.Millisecond)
	delete(p.reports, 4)
	if rep := pass("both missing"); !strings.HasPrefix(rep.HoldReason, "brokers_missing: 2 of 6") {
		t.Fatalf("both missing: hold_reason %q, dead %v, suspect %v", rep.HoldReason, rep.Dead, rep.Suspect)
	}
}

// a segment with no intact copy is reported on every pass and
// costs its replicas no reads.
func TestLostSegmentCostsNoReads(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(1, "a", heal.Missing, 0, false).anomaly(2, "a", heal.Short, 5, false).anomaly(3, "a", heal.Latched, 0, false)
	f := newFake(w)
	c := coordinator(t, f, w.in.Now)
	for pass := 0; pass < 3; pass++ {
		rep, err := c.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.FailedReason("a") != heal.NoIntactSource || len(rep.Failed[0].Copies) != 1 {
			t.Fatalf("pass %d: failed %+v", pass, rep.Failed)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("calls to brokers for a lost segment: %v", f.calls)
	}
}

// Broker ids too large for the dense index take the binary-search path and
// plan the same.
func TestSparseBrokerIDs(t *testing.T) {
	const off = 1 << 20
	mk := func(base meta.BrokerID) heal.Plan {
		w := newWorld(0, 3, seg("a", base+1, base+2, base+3), seg("b", base+2, base+3, base+4))
		for i := meta.BrokerID(1); i <= 5; i++ {
			w.snap.Brokers = append(w.snap.Brokers, meta.Broker{ID: base + i})
			w.up(base + i)
		}
		return w.dead(base+1).anomaly(base+4, "b", heal.Latched, 0, false).plan()
	}
	dense, sparse := mk(0), mk(off)
	if len(dense.Actions) == 0 || len(dense.Actions) != len(sparse.Actions) {
		t.Fatalf("dense:\n%s\nsparse:\n%s", ops(dense), ops(sparse))
	}
	for i, a := range dense.Actions {
		b := sparse.Actions[i]
		if a.Op != b.Op || a.Target+off*(min(a.Target, 1)) != b.Target || a.Source+off*(min(a.Source, 1)) != b.Source {
			t.Errorf("action %d: dense %s, sparse %s", i, a, b)
		}
	}
}

// a broker back before its backfills finish: they are cancelled,
// no replica-set change is applied for its segments, the bytes saved are
// reported, and other segments heal as planned.
func TestCoordinatorReturningBroker(t *testing.T) {
	w := newWorld(8, 3, seg("a", 1, 2, 3), seg("b", 4, 5, 6)).dead(1).dead(4)
	w.in.Policy.HoldShare = -1
	f := newFake(w)
	back := make(chan struct{})
	var once sync.Once
	blocked := &blockingFake{fakeBrokers: f, block: "a", started: func() { once.Do(func() { close(back) }) }}
	c, err := New(Config{Metadata: f, Prober: blocked, Backfiller: blocked, Settler: f, Deleter: f,
		Policy: heal.Policy{Grace: 10 * time.Second, SettleBatch: 8, HoldShare: -1}, Now: func() time.Time { return w.in.Now },
		ReturnCheck: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	seenLongAgo(c, w)
	go func() {
		<-back
		blocked.mu.Lock()
		blocked.returned = true // broker 1 answers again, its copy of a intact
		blocked.mu.Unlock()
	}()
	rep, err := c.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := calls(f)
	if strings.Contains(got, "set a") || !strings.Contains(got, "set b") {
		t.Errorf("calls:\n%s", got)
	}
	if !slices.Equal(rep.Returned, []meta.SegmentID{"a"}) || rep.BytesSaved != 1000 || len(rep.Failed) != 0 || !slices.Equal(rep.Healed, []meta.SegmentID{"b"}) {
		t.Errorf("report %+v", rep)
	}
	if avoid := folded(c).Avoid; len(avoid) != 0 {
		t.Errorf("a cancelled backfill's target is avoided: %v", avoid)
	}
}

// blockingFake blocks the backfills of one segment until their context
// ends, and answers probes of broker 1 once returned is set.
type blockingFake struct {
	*fakeBrokers
	mu       sync.Mutex
	block    meta.SegmentID
	started  func()
	returned bool
}

func (b *blockingFake) Probe(ctx context.Context, id meta.BrokerID, index uint64) (heal.ProbeReport, error) {
	b.mu.Lock()
	ret := b.returned
	b.mu.Unlock()
	if id == 1 && ret {
		return heal.ProbeReport{Broker: 1, Index: index}, nil
	}
	return b.fakeBrokers.Probe(ctx, id, index)
}

func (b *blockingFake) Backfill(ctx context.Context, target, source meta.BrokerID, s meta.Segment) (int64, error) {
	if s.ID != b.block {
		return b.fakeBrokers.Backfill(ctx, target, source, s)
	}
	b.fakeBrokers.log("backfill %s %d<-%d (blocks)", s.ID, target, source)
	b.started()
	<-ctx.Done()
	return 0, ctx.Err()
}
