package heal

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

func (w *world) mode(b meta.BrokerID, m meta.BrokerMode, until time.Time) *world {
	for i := range w.snap.Brokers {
		if w.snap.Brokers[i].ID == b {
			w.snap.Brokers[i].Mode, w.snap.Brokers[i].Until = m, until
		}
	}
	return w
}

func drainOf(t *testing.T, rep Report, b meta.BrokerID) Drain {
	t.Helper()
	d := rep.DrainOf(b)
	if d == nil {
		t.Fatalf("no decommission progress for broker %d in %+v", b, rep.Decommission)
	}
	return *d
}

func wantOps(t *testing.T, p Plan, want string) {
	t.Helper()
	if got := ops(p); got != want {
		t.Fatalf("plan:\n%swant:\n%s", got, want)
	}
}

// Decommission: the broker's replica moves to another broker (add, record,
// then drop), the broker itself serving as a source.
func TestDecommissionMovesReplica(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3))
	w.mode(2, meta.ModeDecommissioning, time.Time{})
	p := w.plan()
	wantOps(t, p, "move_replica a 4<-1\nset_replicas a [1 2 3]->[1 3 4]\ndelete_dropped_copy a 2\n")
	d := drainOf(t, p.Report, 2)
	if d.Segments != 1 || d.Bytes != 1000 || d.Moving != 1 || d.Drained || !d.Up || len(d.Blocked) != 0 {
		t.Fatalf("progress %+v", d)
	}
	if p.Report.Backfills != 1 || p.Report.Commands != 1 {
		t.Fatalf("report counts backfills %d commands %d", p.Report.Backfills, p.Report.Commands)
	}
}

// A decommissioning broker is never a target, not even to heal.
func TestDecommissioningNeverTarget(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3))
	w.dead(3)
	w.mode(4, meta.ModeDecommissioning, time.Time{})
	p := w.plan()
	wantOps(t, p, "report_failed a no_spare_broker [3]\n")
	if d := drainOf(t, p.Report, 4); !d.Drained || d.Segments != 0 {
		t.Fatalf("broker 4 holds nothing: %+v", d)
	}
}

// A set above the replication factor merely drops the decommissioning
// replica: no copy is needed.
func TestDecommissionSurplusDrops(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3, 4))
	w.mode(4, meta.ModeDecommissioning, time.Time{})
	wantOps(t, w.plan(), "set_replicas a [1 2 3 4]->[1 2 3]\ndelete_dropped_copy a 4\n")
}

// Healing comes first and moves get what budget it leaves; the rest wait,
// reported deferred.
func TestDecommissionAfterHealingWithinBudget(t *testing.T) {
	w := newWorld(6, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 4), seg("c", 2, 3, 4), seg("d", 1, 3, 5))
	w.in.Policy.MaxBackfills = 2
	w.dead(5)
	w.mode(1, meta.ModeDecommissioning, time.Time{})
	p := w.plan()
	if p.Actions[0].Op != ReplaceDeadReplica || p.Actions[0].Segment.ID != "d" || p.Actions[0].Target == 1 {
		t.Fatalf("healing first, not onto broker 1:\n%s", ops(p))
	}
	moves := 0
	for _, a := range p.Actions {
		if a.Op == MoveReplica {
			moves++
		}
	}
	if moves != 1 || p.Report.Backfills != 2 {
		t.Fatalf("want 1 move within the budget of 2:\n%s", ops(p))
	}
	d := drainOf(t, p.Report, 1)
	// d is healed (troubled) this pass, a moves, b waits for budget.
	if d.Segments != 3 || d.Moving != 1 || d.Blocked[DrainDeferred] != 1 || d.Blocked[DrainHealing] != 1 {
		t.Fatalf("progress %+v", d)
	}
}

// Each reason a segment cannot move is reported.
func TestDecommissionBlockedReasons(t *testing.T) {
	t.Run("no_spare_broker", func(t *testing.T) {
		w := newWorld(3, 3, seg("a", 1, 2, 3))
		w.mode(1, meta.ModeDecommissioning, time.Time{})
		p := w.plan()
		wantOps(t, p, "")
		if d := drainOf(t, p.Report, 1); d.Blocked[DrainNoSpareBroker] != 1 || d.Examples[0] != (BlockedSegment{"a", DrainNoSpareBroker}) {
			t.Fatalf("progress %+v", d)
		}
	})
	t.Run("rack_constraint", func(t *testing.T) {
		w := newWorld(4, 3, seg("a", 1, 2, 3))
		w.snap.Brokers = brokers(4, "ra", "rb", "rc", "rc")
		w.mode(1, meta.ModeDecommissioning, time.Time{})
		p := w.plan()
		wantOps(t, p, "")
		if d := drainOf(t, p.Report, 1); d.Blocked[DrainRackConstraint] != 1 {
			t.Fatalf("progress %+v", d)
		}
	})
	t.Run("source_latched", func(t *testing.T) {
		w := newWorld(5, 3, seg("a", 1, 2, 3))
		w.anomaly(3, "a", Latched, 0, false)
		w.mode(1, meta.ModeDecommissioning, time.Time{})
		p := w.plan()
		if d := drainOf(t, p.Report, 1); d.Blocked[DrainSourceLatched] != 1 {
			t.Fatalf("progress %+v\n%s", d, ops(p))
		}
	})
	t.Run("no_intact_source", func(t *testing.T) {
		w := newWorld(4, 3, seg("a", 1, 2, 3))
		for _, b := range []meta.BrokerID{1, 2, 3} {
			w.anomaly(b, "a", Corrupt, 1000, false)
		}
		w.mode(1, meta.ModeDecommissioning, time.Time{})
		if d := drainOf(t, w.plan().Report, 1); d.Blocked[DrainNoIntactSource] != 1 {
			t.Fatalf("progress %+v", d)
		}
	})
	t.Run("active", func(t *testing.T) {
		a := seg("a", 1, 2, 3)
		a.Sealed, a.Checksum = false, 0
		w := newWorld(4, 3, a)
		w.mode(1, meta.ModeDecommissioning, time.Time{})
		if d := drainOf(t, w.plan().Report, 1); d.Blocked[DrainActive] != 1 {
			t.Fatalf("progress %+v", d)
		}
	})
}

// A decommissioning broker that dies is an ordinary failure: its replica
// is replaced as dead once the grace delay has passed, never onto itself.
func TestDecommissioningDeathIsOrdinaryFailure(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3))
	w.mode(2, meta.ModeDecommissioning, time.Time{})
	w.down(2, 5*time.Second)
	p := w.plan()
	wantOps(t, p, "")
	if d := drainOf(t, p.Report, 2); d.Up || d.Blocked[DrainHealing] != 1 {
		t.Fatalf("within grace: %+v", d)
	}
	w.dead(2)
	wantOps(t, w.plan(), "replace_dead_replica a 4<-1\nset_replicas a [1 2 3]->[1 3 4]\n")
}

// Step computes a decommission's rate and ETA from the bytes left and the
// time of the pass, deterministically.
func TestDecommissionRateAndETA(t *testing.T) {
	w := newWorld(5, 3, seg("a", 1, 2, 3), seg("b", 1, 3, 4), seg("c", 1, 4, 5))
	w.mode(1, meta.ModeDecommissioning, time.Time{})
	var pl Planner
	step := func(st State) (Plan, State) {
		in := w.input()
		p, next, err := pl.Step(st, Observation{View: in.View, Reports: in.Reports, Start: in.Now, Now: in.Now, Policy: in.Policy})
		if err != nil {
			t.Fatal(err)
		}
		return p, next
	}
	p, st := step(State{})
	if d := drainOf(t, p.Report, 1); d.Bytes != 3000 || d.Rate != 0 || d.ETA != 0 {
		t.Fatalf("first pass: %+v", d)
	}
	// 10 s later a has moved off broker 1.
	w.snap.Segments[0].Replicas = []meta.BrokerID{2, 3, 5}
	w.in.Now = w.in.Now.Add(10 * time.Second)
	for i := range w.in.Seen {
		w.in.Seen[i].At = w.in.Now
	}
	p, st = step(st)
	d := drainOf(t, p.Report, 1)
	if d.Bytes != 2000 || d.Rate != 100 || d.ETA != 20*time.Second {
		t.Fatalf("after 1000 bytes in 10 s: %+v", d)
	}
	if len(st.Drains) != 1 || st.Drains[0].Start != 3000 || !st.Drains[0].Since.Equal(t0) {
		t.Fatalf("marks %+v", st.Drains)
	}
}

// Maintenance: inside the window a broker's absence is not a failure.
func TestMaintenanceAbsenceIsNotFailure(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3))
	w.dead(3)
	w.mode(3, meta.ModeMaintenance, t0.Add(30*time.Minute))
	p := w.plan()
	wantOps(t, p, "")
	if len(p.Report.Dead) != 0 || len(p.Report.Suspect) != 0 {
		t.Fatalf("dead %v suspect %v, want neither", p.Report.Dead, p.Report.Suspect)
	}
	want := []Maintenance{{Broker: 3, Until: t0.Add(30 * time.Minute)}}
	if !slices.Equal(p.Report.Maintenance, want) {
		t.Fatalf("maintenance %+v, want %+v", p.Report.Maintenance, want)
	}
}

// When the window ends, the grace delay starts at its end.
func TestMaintenanceGraceStartsAtUntil(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3))
	w.dead(3)
	w.mode(3, meta.ModeMaintenance, t0.Add(-5*time.Second)) // ended 5 s ago; grace 10 s
	p := w.plan()
	wantOps(t, p, "")
	if !slices.Equal(p.Report.Suspect, []meta.BrokerID{3}) || !p.Report.Maintenance[0].Ended {
		t.Fatalf("suspect %v maintenance %+v", p.Report.Suspect, p.Report.Maintenance)
	}
	w.mode(3, meta.ModeMaintenance, t0.Add(-11*time.Second))
	p = w.plan()
	wantOps(t, p, "replace_dead_replica a 4<-1\nset_replicas a [1 2 3]->[1 2 4]\n")
	// Ended early (--end): active, Until recording when; the grace delay
	// runs from then too.
	w.mode(3, "", t0.Add(-5*time.Second))
	if p = w.plan(); !slices.Equal(p.Report.Suspect, []meta.BrokerID{3}) || len(p.Report.Maintenance) != 0 {
		t.Fatalf("ended early: suspect %v maintenance %+v", p.Report.Suspect, p.Report.Maintenance)
	}
}

// A segment down to one healthy copy is healed anyway, and the report says
// why.
func TestMaintenanceFloorHealsAnyway(t *testing.T) {
	w := newWorld(5, 3, seg("a", 1, 2, 3), seg("b", 1, 3, 4))
	w.dead(3)
	w.dead(2)
	w.mode(3, meta.ModeMaintenance, t0.Add(30*time.Minute))
	p := w.plan()
	// a is healed (3's copy counted dead); b, with two healthy copies,
	// waits for 3.
	wantOps(t, p, "replace_dead_replica a 5<-1\nreplace_dead_replica a 4<-1\nset_replicas a [1 2 3]->[1 5 4]\n")
	want := []MaintenanceFloor{{Segment: "a", Broker: 3, Reason: "one_healthy_copy"}}
	if !slices.Equal(p.Report.MaintenanceFloor, want) {
		t.Fatalf("floor %+v, want %+v", p.Report.MaintenanceFloor, want)
	}
}

// The hold brake does not count a broker absent in a maintenance window.
func TestMaintenanceNotCountedByHold(t *testing.T) {
	w := newWorld(6, 3, seg("a", 1, 2, 3))
	w.down(5, time.Minute)
	w.down(6, time.Minute)
	if p := w.plan(); p.Report.HoldReason == "" {
		t.Fatal("two of six missing must hold without maintenance")
	}
	w.mode(5, meta.ModeMaintenance, t0.Add(time.Hour))
	w.mode(6, meta.ModeMaintenance, t0.Add(time.Hour))
	if p := w.plan(); p.Report.HoldReason != "" {
		t.Fatalf("hold %q for brokers in maintenance", p.Report.HoldReason)
	}
}

// A move's recorded set is reported moved, not healed, and its dropped
// copy deleted.
func TestMoveReportedMovedNotHealed(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3))
	w.mode(2, meta.ModeDecommissioning, time.Time{})
	p := w.plan()
	out := &Outcomes{Plan: p, Of: make([]Outcome, len(p.Actions))}
	for i := range out.Of {
		out.Of[i].Result = Succeeded
	}
	rep := out.Report()
	if !slices.Equal(rep.Moved, []meta.SegmentID{"a"}) || len(rep.Healed) != 0 || !slices.Equal(rep.Deleted, []CopyRef{{"a", 2}}) {
		t.Fatalf("moved %v healed %v deleted %v", rep.Moved, rep.Healed, rep.Deleted)
	}
	if s := rep.String(); !strings.Contains(s, "moved=1 decommission_2_left=1") {
		t.Fatalf("report line %q", s)
	}
}
