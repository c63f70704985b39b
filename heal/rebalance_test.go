package heal

import (
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/meta"
)

// rebalanceWorld is n brokers, the first full ones holding segs segments
// of replication factor 3 in rotation, the others empty, rebalancing on.
func rebalanceWorld(n, full, segs int) *world {
	var ss []meta.Segment
	for i := 0; i < segs; i++ {
		ss = append(ss, seg(fmt.Sprintf("s%02d", i), meta.BrokerID(1+i%full), meta.BrokerID(1+(i+1)%full), meta.BrokerID(1+(i+2)%full)))
	}
	w := newWorld(n, 3, ss...)
	w.in.Policy.Rebalance = true
	return w
}

// rebalanceMoves returns the plan's rebalance_replica actions.
func rebalanceMoves(p Plan) []Action {
	var out []Action
	for _, a := range p.Actions {
		if a.Op == RebalanceReplica {
			out = append(out, a)
		}
	}
	return out
}

// A new empty broker gets moves: each is add, record, drop, from a
// broker holding more than the mean, onto the empty one.
func TestRebalanceFillsEmptyBroker(t *testing.T) {
	w := rebalanceWorld(5, 4, 20)
	p := w.plan()
	mv := rebalanceMoves(p)
	if len(mv) != DefaultRebalanceMoves {
		t.Fatalf("want %d moves (the default budget):\n%s", DefaultRebalanceMoves, ops(p))
	}
	for i, a := range p.Actions {
		if a.Op != RebalanceReplica {
			continue
		}
		if a.Target != 5 || a.Replaces == 5 || a.Replaces == 0 {
			t.Fatalf("move %s: target %d replaces %d", a.Segment.ID, a.Target, a.Replaces)
		}
		set, del := p.Actions[i+1], p.Actions[i+2]
		if set.Op != SetReplicas || set.Replaces != a.Replaces || del.Op != DeleteDroppedCopy || del.Target != a.Replaces {
			t.Fatalf("move %s not followed by its record and drop:\n%s", a.Segment.ID, ops(p))
		}
	}
	rb := p.Report.Rebalance
	if rb == nil || rb.Moves != len(mv) || rb.Outside == 0 || rb.Balanced || rb.Count.Min != 0 || rb.Count.Max != 15 || rb.Brokers != 5 {
		t.Fatalf("report %+v", rb)
	}
	if p.Report.Backfills != len(mv) || p.Report.Commands != len(mv) {
		t.Fatalf("counts backfills %d commands %d", p.Report.Backfills, p.Report.Commands)
	}
}

// Within the bound nothing moves; the report says balanced.
func TestRebalanceWithinBoundNothingMoves(t *testing.T) {
	w := rebalanceWorld(4, 4, 20) // 15 each
	p := w.plan()
	if len(p.Actions) != 0 {
		t.Fatalf("balanced cluster planned:\n%s", ops(p))
	}
	if rb := p.Report.Rebalance; rb == nil || !rb.Balanced || rb.Outside != 0 || rb.Count.Mean != 15 {
		t.Fatalf("report %+v", rb)
	}
	// 16/15/15/14 is within 10% of 15 (bound 1.5): still nothing.
	w = newWorld(4, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 4), seg("c", 1, 3, 4), seg("d", 1, 2, 3), seg("e", 2, 3, 4))
	w.in.Policy.Rebalance = true
	if p := w.plan(); len(p.Actions) != 0 {
		t.Fatalf("4/4/4/3 with floor 1 planned:\n%s", ops(p))
	}
}

// Off by configuration: nothing moves and nothing is reported.
func TestRebalanceOff(t *testing.T) {
	w := rebalanceWorld(5, 4, 20)
	w.in.Policy.Rebalance = false
	p := w.plan()
	if len(p.Actions) != 0 || p.Report.Rebalance != nil {
		t.Fatalf("rebalance off planned:\n%s%+v", ops(p), p.Report.Rebalance)
	}
}

// Never while anything is under-replicated, suspect or held: healing
// comes first and the rebalancer says why it waits.
func TestRebalanceNeverWhileHealing(t *testing.T) {
	t.Run("dead", func(t *testing.T) {
		w := rebalanceWorld(6, 4, 20)
		w.dead(6)
		w.snap.Segments = append(w.snap.Segments, seg("z", 1, 2, 6))
		p := w.plan()
		if len(rebalanceMoves(p)) != 0 || p.Report.Rebalance.Skipped != RebalanceHealing {
			t.Fatalf("rebalanced while healing:\n%s%+v", ops(p), p.Report.Rebalance)
		}
	})
	t.Run("short", func(t *testing.T) {
		w := rebalanceWorld(5, 4, 20)
		w.anomaly(2, "s03", Short, 10, false)
		p := w.plan()
		if len(rebalanceMoves(p)) != 0 || p.Report.Rebalance.Skipped == "" {
			t.Fatalf("rebalanced beside a resume:\n%s%+v", ops(p), p.Report.Rebalance)
		}
	})
	t.Run("suspect", func(t *testing.T) {
		w := rebalanceWorld(6, 4, 20)
		w.down(6, 1)
		p := w.plan()
		if len(rebalanceMoves(p)) != 0 || p.Report.Rebalance.Skipped != RebalanceHealing {
			t.Fatalf("rebalanced with a suspect broker:\n%s%+v", ops(p), p.Report.Rebalance)
		}
	})
}

// The rack rule: a move never lowers its set's rack count. With racks
// ra rb rc rc, the empty broker 4 (rc) may only take broker 3's (rc)
// replicas.
func TestRebalanceKeepsRacks(t *testing.T) {
	var ss []meta.Segment
	for i := 0; i < 12; i++ {
		ss = append(ss, seg(fmt.Sprintf("s%02d", i), 1, 2, 3))
	}
	w := newWorld(4, 3, ss...)
	w.snap.Brokers = brokers(4, "ra", "rb", "rc", "rc")
	w.in.Policy.Rebalance = true
	p := w.plan()
	mv := rebalanceMoves(p)
	if len(mv) == 0 {
		t.Fatalf("no move from broker 3:\n%s", ops(p))
	}
	for _, a := range mv {
		if a.Replaces != 3 || a.Target != 4 {
			t.Fatalf("move %s replaces %d onto %d: lowers the rack count", a.Segment.ID, a.Replaces, a.Target)
		}
	}
}

// The budget: RebalanceMoves, MaxBackfills and MaxBackfillsPerBroker each
// bound the moves of a pass.
func TestRebalanceBudget(t *testing.T) {
	for _, tc := range []struct {
		name           string
		moves, all, pb int
		want           int
	}{
		{"rebalance_moves", 2, 0, 0, 2},
		{"max_backfills", 0, 3, 0, 3},
		{"per_broker", 0, 0, 1, 1},
		{"unbounded_default", 0, 0, 0, DefaultRebalanceMoves},
		{"large", 100, 0, 0, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := rebalanceWorld(5, 4, 20)
			w.in.Policy.RebalanceMoves, w.in.Policy.MaxBackfills, w.in.Policy.MaxBackfillsPerBroker = tc.moves, tc.all, tc.pb
			p := w.plan()
			if got := len(rebalanceMoves(p)); got != tc.want {
				t.Fatalf("%d moves, want %d:\n%s", got, tc.want, ops(p))
			}
		})
	}
}

// A segment with anything else planned this pass (here a settle) is not
// moved.
func TestRebalanceSkipsActedSegments(t *testing.T) {
	w := rebalanceWorld(5, 4, 20)
	w.in.Policy.RebalanceMoves = 100
	for i := 0; i < 20; i++ {
		w.anomaly(meta.BrokerID(1+i%4), fmt.Sprintf("s%02d", i), Overrun, 1100, false)
	}
	p := w.plan()
	if mv := rebalanceMoves(p); len(mv) != 0 {
		t.Fatalf("moved a segment being settled:\n%s", ops(p))
	}
}
