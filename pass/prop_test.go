package pass

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

type brokerFate uint8

const (
	fateUp brokerFate = iota
	fateSuspect
	fateDead
)

// drawWorld draws a random pass input: brokers up, suspect or dead,
// sealed and active segments, and anomalies on their copies.
func drawWorld(t *rapid.T) (*world, map[meta.BrokerID]brokerFate) {
	n := rapid.IntRange(1, 8).Draw(t, "brokers")
	rf := rapid.IntRange(1, 4).Draw(t, "rf")
	ids := make([]meta.BrokerID, n+1) // n+1 is never registered
	for i := range ids {
		ids[i] = meta.BrokerID(i + 1)
	}
	var segs []meta.Segment
	for i, k := 0, rapid.IntRange(0, 10).Draw(t, "segments"); i < k; i++ {
		reps := rapid.SliceOfNDistinct(rapid.SampledFrom(ids), 0, rf, rapid.ID[meta.BrokerID]).Draw(t, "replicas")
		s := seg(fmt.Sprintf("s%02d", i), reps...)
		s.Sealed = rapid.IntRange(0, 5).Draw(t, "sealed") > 0
		segs = append(segs, s)
	}
	w := newWorld(n, rf, segs...)
	w.snap.Brokers = brokers(n, rapid.SliceOfN(rapid.SampledFrom([]string{"", "a", "b"}), 1, 3).Draw(t, "racks")...)
	w.in.Policy.HoldShare = -1
	w.in.Policy.SettleBatch = rapid.IntRange(0, 4).Draw(t, "batch")
	fate := map[meta.BrokerID]brokerFate{meta.BrokerID(n + 1): fateDead}
	for i := 1; i <= n; i++ {
		b := meta.BrokerID(i)
		switch f := brokerFate(rapid.IntRange(0, 2).Draw(t, "fate")); f {
		case fateSuspect:
			w.down(b, time.Second)
			fate[b] = f
		case fateDead:
			w.dead(b)
			fate[b] = f
		default:
			if rapid.IntRange(0, 9).Draw(t, "latchunknown") == 0 {
				// Latch state unreadable: the broker did not answer.
				w.down(b, time.Second)
				fate[b] = fateSuspect
			}
		}
	}
	kinds := []heal.Kind{heal.KindUnknown, heal.KindUnknown, heal.KindUnknown, heal.Missing, heal.Short, heal.Overrun, heal.Latched, heal.TimedOut, heal.Corrupt}
	for _, s := range segs {
		for _, r := range s.Replicas {
			if fate[r] != fateUp {
				continue
			}
			k := rapid.SampledFrom(kinds).Draw(t, "kind")
			if k == heal.KindUnknown {
				continue
			}
			size := int64(0)
			if k == heal.Short {
				size = rapid.Int64Range(0, 999).Draw(t, "size")
			}
			if k == heal.Overrun {
				size = 1040
			}
			w.anomaly(r, string(s.ID), k, size, k == heal.Overrun && rapid.Bool().Draw(t, "confirmed"))
		}
	}
	return w, fate
}

// TestPlanProperties: invariants 1 and 2 over whole passes.
func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w, fate := drawWorld(t)
		p := w.plan()
		snap := &w.snap
		kind := func(s meta.SegmentID, b meta.BrokerID) heal.Kind {
			for _, r := range w.in.Reports {
				if r.Broker == b {
					for _, f := range r.Facts {
						if f.Segment == s {
							sg, _ := w.snap.Segment(s)
							return heal.Classify(sg, &f).Kind
						}
					}
				}
			}
			return heal.KindUnknown
		}
		for _, a := range p.Actions {
			if a.Op == heal.OpUnknown {
				t.Fatalf("action with the reserved op: %+v", a)
			}
			cur, _ := snap.Segment(a.Segment.ID)
			if !cur.Sealed && a.Op != heal.ReportFailed {
				t.Fatalf("%s on active segment %s", a.Op, cur.ID)
			}
			switch {
			case a.Op.IsBackfill():
				if fate[a.Target] != fateUp || fate[a.Source] != fateUp {
					t.Fatalf("%s: target %d or source %d not up", a, a.Target, a.Source)
				}
				if !cur.HasReplica(a.Source) {
					t.Fatalf("%s: source not a replica", a)
				}
				if k := kind(cur.ID, a.Source); k != heal.KindUnknown && k != heal.Overrun {
					t.Fatalf("%s: source copy is %s", a, k)
				}
				if (a.Op == heal.ResumeShortCopy) != cur.HasReplica(a.Target) {
					t.Fatalf("%s: target membership wrong", a)
				}
				if a.Op == heal.ReplaceDeadReplica && fate[a.Replaces] != fateDead || a.Op == heal.ReplaceLatchedCopy && kind(cur.ID, a.Replaces) != heal.Latched ||
					a.Op == heal.ReplaceCorruptCopy && kind(cur.ID, a.Replaces) != heal.Corrupt {
					t.Fatalf("%s: replaces a replica that is not lost that way", a)
				}
			case a.Op == heal.SetReplicas:
				c := a.Command
				if err := c.Validate(); err != nil {
					t.Fatalf("%s: %v", a, err)
				}
				if !meta.SameReplicas(c.Expected, cur.Replicas) {
					t.Fatalf("%s: expected is not the snapshot's %v", a, cur.Replicas)
				}
				if len(c.Replicas) > max(snap.ReplicationFactor, len(c.Expected)) {
					t.Fatalf("%s exceeds the factor", a)
				}
				if len(c.Replicas) < len(c.Expected) {
					t.Fatalf("%s drops a copy without replacement", a)
				}
				for _, r := range c.Replicas {
					if !slices.Contains(c.Expected, r) {
						if fate[r] != fateUp {
							t.Fatalf("%s names %d, which is not up", a, r)
						}
						if !slices.ContainsFunc(p.Actions, func(b heal.Action) bool {
							return b.Op.IsBackfill() && b.Segment.ID == a.Segment.ID && b.Target == r
						}) {
							t.Fatalf("%s adds %d without a backfill", a, r)
						}
					}
				}
				for _, r := range c.Expected {
					if k := kind(cur.ID, r); !slices.Contains(c.Replicas, r) && fate[r] != fateDead && k != heal.Latched && k != heal.Corrupt {
						t.Fatalf("%s drops %d, which is neither dead, latched nor corrupt", a, r)
					}
				}
			case a.Op == heal.DeleteDroppedCopy:
				if k := kind(cur.ID, a.Target); k != heal.Latched && k != heal.Corrupt {
					t.Fatalf("%s: deletes a copy that is neither latched nor corrupt", a)
				}
				// Invariant 6: only behind a backfill from an intact source.
				if !slices.ContainsFunc(p.Actions, func(b heal.Action) bool {
					return b.Op.IsBackfill() && b.Op != heal.ResumeShortCopy && b.Segment.ID == a.Segment.ID && b.Replaces == a.Target
				}) {
					t.Fatalf("%s: no backfill replaces it", a)
				}
			}
		}
		// Lost is exactly the failures with no readable intact copy, once
		// each; and none of them has a backfill planned.
		for _, f := range p.Report.Failed {
			if lost := f.Reason == heal.AllReplicasDead || f.Reason == heal.NoIntactSource; lost != p.Report.IsLost(f.Segment) {
				t.Fatalf("%s failed %s, lost %v: %+v", f.Segment, f.Reason, p.Report.IsLost(f.Segment), p.Report.Lost)
			}
		}
		if len(p.Lost) != len(p.Report.Lost) {
			t.Fatalf("plan lost %v, report %+v", p.Lost, p.Report.Lost)
		}
		for _, l := range p.Report.Lost {
			if slices.ContainsFunc(p.Actions, func(a heal.Action) bool { return a.Segment.ID == l.Segment && a.Op != heal.ReportFailed }) {
				t.Fatalf("lost %s has actions:\n%s", l.Segment, ops(p))
			}
		}
		// A failure is reported on every pass until it is healed: the same
		// input gives the same failures, and so does a second Planner.
		var again heal.Planner
		q, err := again.Plan(w.input())
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(q.Report.Failed) != fmt.Sprint(p.Report.Failed) || ops(q) != ops(p) {
			t.Fatalf("not deterministic:\n%s\n%s", ops(p), ops(q))
		}
	})
}

// TestFailureReportedUntilHealed: executing a plan that heals nothing
// (every backfill fails) leaves every failed segment failed on the next
// pass, and a segment whose only failure was all_replicas_dead stays so.
func TestFailureReportedUntilHealed(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w, _ := drawWorld(t)
		var p heal.Planner
		prev, err := p.Plan(w.input())
		if err != nil {
			t.Fatal(err)
		}
		for pass := 0; pass < 3; pass++ {
			// Only the settle cursor moves between passes; no segment changed.
			w.in.SettleCursor = prev.SettleCursor
			next, err := p.Plan(w.input())
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range prev.Report.Failed {
				if next.Report.FailedReason(f.Segment) != f.Reason {
					t.Fatalf("pass %d: %s failed %s before, now %s", pass, f.Segment, f.Reason, next.Report.FailedReason(f.Segment))
				}
			}
			prev = next
		}
	})
}

// fakeBrokers is a unit-test double of the broker interfaces: it records
// calls and fails the backfills it is told to.
type fakeBrokers struct {
	mu        sync.Mutex
	calls     []string
	failFill  func(target meta.BrokerID, seg meta.SegmentID) bool
	behind    map[meta.BrokerID]bool // Probe answers ErrBehind
	failSet   func(meta.SegmentID) error
	durable   map[heal.CopyRef]int64
	snap      meta.Snapshot
	reports   map[meta.BrokerID]heal.ProbeReport
	onCall    func(string)
	settleErr error
	fillErr   error // what a failing fill returns; "transfer broke" when nil
}

func (f *fakeBrokers) log(format string, args ...any) {
	f.mu.Lock()
	s := fmt.Sprintf(format, args...)
	f.calls = append(f.calls, s)
	cb := f.onCall
	f.mu.Unlock()
	if cb != nil {
		cb(s)
	}
}

func (f *fakeBrokers) View(ctx context.Context) (*meta.View, error) {
	return meta.NewView(f.snap), ctx.Err()
}
func (f *fakeBrokers) SetReplicas(ctx context.Context, c meta.SetSegmentReplicas) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.log("set %s %v", c.ID, c.Replicas)
	if f.failSet != nil {
		return f.failSet(c.ID)
	}
	return nil
}
func (f *fakeBrokers) Probe(ctx context.Context, b meta.BrokerID, index uint64) (heal.ProbeReport, error) {
	r, ok := f.reports[b]
	if f.behind[b] {
		return heal.ProbeReport{}, fmt.Errorf("broker %d at index 1, asked for %d: %w", b, index, heal.ErrBehind)
	}
	if !ok {
		return heal.ProbeReport{}, errors.New("down")
	}
	return r, nil
}
func (f *fakeBrokers) Backfill(ctx context.Context, target, source meta.BrokerID, s meta.Segment) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	from := f.durable[heal.CopyRef{Segment: s.ID, Broker: target}] // the target resumes at its durable end
	f.log("backfill %s %d<-%d from %d", s.ID, target, source, from)
	if f.failFill != nil && f.failFill(target, s.ID) {
		if f.fillErr != nil {
			return 0, f.fillErr
		}
		return 0, errors.New("transfer broke")
	}
	return s.ByteSize - from, nil
}
func (f *fakeBrokers) settleOne(ctx context.Context, b meta.BrokerID, s meta.Segment) error {
	f.log("settle %s@%d", s.ID, b)
	return f.settleErr
}
func (f *fakeBrokers) confirmOne(ctx context.Context, b meta.BrokerID, s meta.Segment) error {
	f.log("confirm %s@%d", s.ID, b)
	return nil
}
func (f *fakeBrokers) Delete(ctx context.Context, b meta.BrokerID, s meta.SegmentID) error {
	f.log("delete %s@%d", s, b)
	return nil
}

func newFake(w *world) *fakeBrokers {
	f := &fakeBrokers{snap: w.snap, reports: map[meta.BrokerID]heal.ProbeReport{}, durable: map[heal.CopyRef]int64{}}
	for _, r := range w.in.Reports {
		f.reports[r.Broker] = r
	}
	return f
}

func coordinator(t interface{ Fatal(...any) }, f *fakeBrokers, now time.Time) *Coordinator {
	c, err := New(Config{Metadata: f, Prober: f, Backfiller: f, Settler: f, Deleter: f,
		Policy: heal.Policy{Grace: 10 * time.Second, SettleBatch: 8, HoldShare: -1}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCommandNeverAfterFailedBackfill: invariant 3 over random worlds and
// random backfill failures, through the real Coordinator.
func TestCommandNeverAfterFailedBackfill(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w, _ := drawWorld(t)
		f := newFake(w)
		failing := map[heal.CopyRef]bool{}
		f.failFill = func(b meta.BrokerID, s meta.SegmentID) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return failing[heal.CopyRef{Segment: s, Broker: b}]
		}
		for _, s := range w.snap.Segments {
			for b := meta.BrokerID(1); b <= 9; b++ {
				failing[heal.CopyRef{Segment: s.ID, Broker: b}] = rapid.IntRange(0, 3).Draw(t, "fail") == 0
			}
		}
		// Every broker already counts as seen long ago: the dead are dead.
		c := coordinator(t, f, w.in.Now)
		seeAll(c, w.in.Seen)
		rep, err := c.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		bad := map[meta.SegmentID]bool{}
		set := map[meta.SegmentID]bool{}
		for _, call := range f.calls {
			var s string
			var tg, src meta.BrokerID
			var from int64
			if n, _ := fmt.Sscanf(call, "backfill %s %d<-%d from %d", &s, &tg, &src, &from); n == 4 && failing[heal.CopyRef{Segment: meta.SegmentID(s), Broker: tg}] {
				bad[meta.SegmentID(s)] = true
			}
			if n, _ := fmt.Sscanf(call, "set %s", &s); n == 1 {
				set[meta.SegmentID(s)] = true
			}
		}
		for s := range bad {
			if set[s] {
				t.Fatalf("command for %s after a failed backfill: %v", s, f.calls)
			}
			if !slices.ContainsFunc(rep.Failed, func(f heal.Failure) bool { return f.Segment == s && f.Reason == heal.BackfillFailed }) {
				t.Fatalf("%s backfill failed but not reported: %+v", s, rep.Failed)
			}
		}
	})
}

func (f *fakeBrokers) Settle(ctx context.Context, b meta.BrokerID, segs []meta.Segment, errs []error) error {
	return eachCopy(ctx, b, segs, errs, f.settleOne)
}

func (f *fakeBrokers) Confirm(ctx context.Context, b meta.BrokerID, segs []meta.Segment, errs []error) error {
	return eachCopy(ctx, b, segs, errs, f.confirmOne)
}
