//go:build invariants

package heal

import (
	"fmt"
	"slices"

	"github.com/malachi-log/malachi/meta"
)

// checkStep checks, after every Step, expensive properties of the plan
// and the next State (built with -tags invariants; Pebble's model). A
// violation is a bug in the core: it panics, naming it.
func checkStep(_ *State, obs *Observation, plan *Plan, next *State) {
	if err := planInvariants(obs.View, plan); err != nil {
		panic(fmt.Sprintf("heal: invariant violated at index %d: %v", plan.Index, err))
	}
	if !slices.IsSortedFunc(next.Seen, func(a, b Seen) int { return int(a.Broker) - int(b.Broker) }) {
		panic("heal: invariant violated: State.Seen not sorted by broker")
	}
	if !slices.IsSorted(next.Lost) || !slices.IsSorted(next.Acknowledged) {
		panic("heal: invariant violated: State.Lost or Acknowledged not sorted")
	}
}

// checkReports panics on a report that is not valid: the executor
// validates each where it crosses the network, so Plan never sees one.
func checkReports(reports []ProbeReport) {
	for i := range reports {
		if err := reports[i].Validate(); err != nil {
			panic(fmt.Sprintf("heal: invariant violated: Plan given an invalid report: %v", err))
		}
	}
}

// planInvariants checks plan against the view it was made from.
func planInvariants(view *meta.View, plan *Plan) error {
	recorded := map[meta.SegmentID][]meta.BrokerID{} // the set each SetReplicas records
	commands := 0
	for i := range plan.Actions {
		a := &plan.Actions[i]
		cur, ok := view.Segment(a.Segment.ID)
		if !ok && a.Op != DeleteLeftoverCopy {
			return fmt.Errorf("action %d (%s) names segment %s, not in the view", i, a.Op, a.Segment.ID)
		}
		if a.Op == DeleteLeftoverCopy {
			if err := leftoverInvariant(plan, a, cur); err != nil {
				return err
			}
			continue
		}
		switch a.Op {
		case SetReplicas:
			commands++
			cmd := a.Command
			if !meta.SameReplicas(cmd.Expected, cur.Replicas) {
				return fmt.Errorf("set_replicas %s expects %v, the view has %v", cmd.ID, cmd.Expected, cur.Replicas)
			}
			if dup := duplicate(cmd.Replicas); dup != 0 {
				return fmt.Errorf("set_replicas %s names broker %d twice: %v", cmd.ID, dup, cmd.Replicas)
			}
			if len(cmd.Replicas) == 0 {
				return fmt.Errorf("set_replicas %s records an empty set", cmd.ID)
			}
			if !keepsIntact(plan, i, cur) {
				return fmt.Errorf("set_replicas %s %v->%v keeps no copy that is intact or backfilled in this plan", cmd.ID, cmd.Expected, cmd.Replicas)
			}
			if err := checkMove(view, a, cur); err != nil {
				return err
			}
			recorded[cmd.ID] = cmd.Replicas
		case DeleteDroppedCopy:
			set, ok := recorded[a.Segment.ID]
			if !ok {
				return fmt.Errorf("delete_dropped_copy %s@%d follows no set_replicas of its segment", a.Segment.ID, a.Target)
			}
			if slices.Contains(set, a.Target) {
				return fmt.Errorf("delete_dropped_copy %s@%d: the recorded set %v keeps it", a.Segment.ID, a.Target, set)
			}
		case ConfirmCopy:
			if i == 0 || plan.Actions[i-1].Op != SettleOverrun || plan.Actions[i-1].Target != a.Target || plan.Actions[i-1].Segment.ID != a.Segment.ID {
				return fmt.Errorf("confirm_copy %s@%d does not follow its settle", a.Segment.ID, a.Target)
			}
		}
		if a.Op.IsBackfill() && (a.Source == a.Target || a.Source == 0) {
			return fmt.Errorf("%s %s: source %d, target %d", a.Op, a.Segment.ID, a.Source, a.Target)
		}
	}
	if commands != len(plan.Commands) || commands != plan.Report.Commands {
		return fmt.Errorf("%d set_replicas actions, %d Plan.Commands, Report.Commands %d", commands, len(plan.Commands), plan.Report.Commands)
	}
	return nil
}

// duplicate returns a broker named twice in set, or 0.
func duplicate(set []meta.BrokerID) meta.BrokerID {
	for i, b := range set {
		if slices.Contains(set[i+1:], b) {
			return b
		}
	}
	return 0
}

// keepsIntact reports whether the set recorded by the SetReplicas at i
// keeps a copy: an old replica, or a target a backfill of the same plan
// fills from an old replica (a command never drops the last copy; every
// backfill it depends on reads from the current set).
func keepsIntact(plan *Plan, i int, cur *meta.Segment) bool {
	cmd := plan.Actions[i].Command
	for _, b := range cmd.Replicas {
		if slices.Contains(cur.Replicas, b) {
			return true
		}
		for k := range plan.Actions {
			a := &plan.Actions[k]
			if a.Segment.ID == cmd.ID && a.Op.IsBackfill() && a.Target == b && slices.Contains(cur.Replicas, a.Source) {
				return true
			}
		}
	}
	return false
}

// leftoverInvariant checks a DeleteLeftoverCopy: its target outside the
// set, and, for a known segment, a sealed one at its factor with nothing
// else planned for it.
func leftoverInvariant(plan *Plan, a *Action, cur *meta.Segment) error {
	if cur == nil {
		return nil
	}
	if slices.Contains(cur.Replicas, a.Target) {
		return fmt.Errorf("delete_leftover_copy %s@%d: the set %v names it", a.Segment.ID, a.Target, cur.Replicas)
	}
	if !cur.Sealed {
		return fmt.Errorf("delete_leftover_copy %s@%d: the segment is active", a.Segment.ID, a.Target)
	}
	for _, b := range plan.Actions {
		if b.Segment.ID == a.Segment.ID && b.Op != DeleteLeftoverCopy {
			return fmt.Errorf("delete_leftover_copy %s@%d beside %s of its segment", a.Segment.ID, a.Target, b.Op)
		}
	}
	return nil
}

// checkMove checks that a SetReplicas adds no decommissioning broker and,
// for a decommission's move (Replaces set), keeps at least the replication
// factor and leaves Replaces out.
func checkMove(view *meta.View, a *Action, cur *meta.Segment) error {
	cmd := a.Command
	if a.Replaces != 0 && (len(cmd.Replicas) < view.ReplicationFactor() || slices.Contains(cmd.Replicas, a.Replaces)) {
		return fmt.Errorf("move %s %v->%v: below the factor %d or keeps %d", cmd.ID, cmd.Expected, cmd.Replicas, view.ReplicationFactor(), a.Replaces)
	}
	for _, b := range cmd.Replicas {
		if br, ok := view.Broker(b); ok && !cur.HasReplica(b) && br.Is(meta.ModeDecommissioning) {
			return fmt.Errorf("move %s %v->%v adds decommissioning broker %d", cmd.ID, cmd.Expected, cmd.Replicas, b)
		}
	}
	return nil
}
