package heal

import (
	"fmt"
	"slices"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// The operator's lifecycle modes (meta.SetBrokerMode) as the core reads
// them from the View's broker records:
//
//   - decommissioning: never a target; each of its sealed segments that
//     is not otherwise in trouble is moved (MoveReplica from an intact
//     replica, the broker itself included while it answers; the set with
//     the target in its place; then DeleteDroppedCopy of its copy), after
//     healing and within the budgets healing left. Its loss is an
//     ordinary failure.
//   - maintenance, before its Until: the broker's absence is neither dead
//     nor suspect, the hold brake does not count it, it is neither source
//     nor target while unseen, and its copies are unknown (not replaced),
//     unless a segment is down to one healthy copy: then its copy there
//     counts as dead and is replaced (MaintenanceFloor). From Until on,
//     the grace delay runs from max(last seen, Until).

// Reasons a decommissioning broker's segment does not move this pass
// (Drain.Blocked, BlockedSegment.Reason).
const (
	DrainNoSpareBroker  = "no_spare_broker"  // no live broker outside the set may take it
	DrainRackConstraint = "rack_constraint"  // every candidate would leave the set on fewer racks
	DrainNoIntactSource = "no_intact_source" // the segment is lost or has no readable copy
	DrainSourceLatched  = "source_latched"   // a copy is latched, corrupt or refused: healed first
	DrainHealing        = "healing"          // the segment is in trouble and healed first
	DrainDeferred       = "deferred"         // budgets (MaxBackfills, MaxBackfillsPerBroker) spent this pass
	DrainActive         = "active"           // not sealed yet: moves once sealed
	DrainHeld           = "held"             // the mass-failure brake holds every backfill
)

// maxBlockedExamples bounds Drain.Examples.
const maxBlockedExamples = 16

// Drain is the progress of one decommissioning broker.
type Drain struct {
	Broker meta.BrokerID `json:"broker"`
	// Up says the broker answered this pass (it is then a source).
	Up bool `json:"up"`
	// Segments and Bytes are what its replica sets still name.
	Segments int   `json:"segments"`
	Bytes    int64 `json:"bytes"`
	// Moving counts the moves planned this pass.
	Moving int `json:"moving"`
	// Blocked counts, by reason (the Drain* constants), the segments
	// that do not move this pass; Examples names a few of them.
	Blocked  map[string]int   `json:"blocked,omitempty"`
	Examples []BlockedSegment `json:"examples,omitempty"`
	// Drained says no replica set names the broker: it can be stopped.
	Drained bool `json:"drained"`
	// Rate is the bytes drained per second since the decommission was
	// first seen by this State (DrainMark); ETA is Bytes/Rate (zero when
	// no rate is known yet).
	Rate float64       `json:"rate_bytes_per_sec,omitempty"`
	ETA  time.Duration `json:"eta,omitempty"`
}

// BlockedSegment is one segment of a decommission that does not move this
// pass, and why.
type BlockedSegment struct {
	Segment meta.SegmentID `json:"segment"`
	Reason  string         `json:"reason"`
}

// Maintenance is one broker in maintenance mode.
type Maintenance struct {
	Broker meta.BrokerID `json:"broker"`
	Until  time.Time     `json:"until"`
	// Seen says it answered this pass; Ended that Until has passed (the
	// grace delay then runs from Until).
	Seen  bool `json:"seen"`
	Ended bool `json:"ended,omitempty"`
}

// MaintenanceFloor is a segment healed in spite of a maintenance window:
// its copy on Broker counted as dead because the segment was down to one
// healthy copy.
type MaintenanceFloor struct {
	Segment meta.SegmentID `json:"segment"`
	Broker  meta.BrokerID  `json:"broker"`
	Reason  string         `json:"reason"`
}

// DrainMark is where a State first saw a decommission: the time and the
// bytes then left. A decommission whose bytes grow past Start restarts it.
type DrainMark struct {
	Broker meta.BrokerID `json:"broker"`
	Since  time.Time     `json:"since"`
	Start  int64         `json:"start"`
}

// lastSeen is s.At, or the end of its broker's maintenance window (its
// Until, also kept when ended early) when later: the grace delay starts
// when the window ends.
func (p *Planner) lastSeen(in Input, s Seen) time.Time {
	if b, ok := in.View.Broker(s.Broker); ok && b.Until.After(s.At) {
		return b.Until
	}
	return s.At
}

// modes marks the decommissioning nodes and those in an open maintenance
// window that did not answer, and lists the maintenance brokers.
func (p *Planner) modes(in Input, rep *Report) {
	for _, b := range in.View.Brokers() {
		if b.Mode == "" {
			continue
		}
		j := p.find(b.ID)
		if j < 0 {
			continue
		}
		n := &p.pl.nodes[j]
		switch b.Mode {
		case meta.ModeDecommissioning:
			n.decom = true
		case meta.ModeMaintenance:
			open := b.InMaintenance(in.Now)
			n.maint = open && !n.up
			rep.Maintenance = append(rep.Maintenance, Maintenance{Broker: b.ID, Until: b.Until, Seen: n.up, Ended: !open})
		}
	}
}

// holdBrokers is the brokers the mass-failure brake counts: all but those
// absent in a maintenance window.
func (p *Planner) holdBrokers(view *meta.View) []meta.Broker {
	bs := view.Brokers()
	if !slices.ContainsFunc(p.pl.nodes, func(n node) bool { return n.maint }) {
		return bs
	}
	out := make([]meta.Broker, 0, len(bs))
	for _, b := range bs {
		if j := p.find(b.ID); j < 0 || !p.pl.nodes[j].maint {
			out = append(out, b)
		}
	}
	return out
}

// maintenanceFloor counts as dead the copies of seg on brokers absent in a
// maintenance window when seg is down to one healthy copy (and the
// replication factor asks for more), so that it is healed anyway.
func (p *Planner) maintenanceFloor(view *meta.View, seg *meta.Segment, states []copyState, rep *Report) {
	if view.ReplicationFactor() < 2 {
		return
	}
	healthy := 0
	for _, st := range states {
		if st.healthy() {
			healthy++
		}
	}
	if healthy != 1 {
		return
	}
	for i, st := range states {
		if st != copySuspect {
			continue
		}
		if j := p.find(seg.Replicas[i]); j >= 0 && p.pl.nodes[j].maint {
			states[i] = copyDead
			rep.MaintenanceFloor = append(rep.MaintenanceFloor, MaintenanceFloor{Segment: seg.ID, Broker: seg.Replicas[i], Reason: "one_healthy_copy"})
		}
	}
}

// decommission plans the moves off each decommissioning broker, after
// healing, with the budgets healing left, and reports each one's progress.
func (p *Planner) decommission(view *meta.View, in Input, hold bool, plan *Plan, backfills *int) {
	var troubled map[*meta.Segment]*trouble
	var failed map[meta.SegmentID]Reason // plan.Report.FailedReason of each, built once
	for _, b := range view.Brokers() {
		if !b.Is(meta.ModeDecommissioning) {
			continue
		}
		if troubled == nil {
			troubled = make(map[*meta.Segment]*trouble, len(p.troubled))
			for i := range p.troubled {
				troubled[p.troubled[i].s] = &p.troubled[i]
			}
			failed = failedReasons(plan.Report.Failed)
		}
		d := Drain{Broker: b.ID}
		if j := p.find(b.ID); j >= 0 {
			d.Up = p.pl.nodes[j].up
		}
		for seg := range view.HeldBy(b.ID) {
			d.Segments++
			d.Bytes += seg.ByteSize
			reason := ""
			switch t := troubled[seg]; {
			case !seg.Sealed:
				reason = DrainActive
			case t != nil:
				reason = p.troubledReason(t, failed[t.s.ID])
			case hold:
				reason = DrainHeld
			default:
				reason = p.move(view, seg, b.ID, in, plan, backfills, MoveReplica, nil)
			}
			if reason == "" {
				d.Moving++
				continue
			}
			if d.Blocked == nil {
				d.Blocked = map[string]int{}
			}
			d.Blocked[reason]++
			if len(d.Examples) < maxBlockedExamples {
				d.Examples = append(d.Examples, BlockedSegment{Segment: seg.ID, Reason: reason})
			}
		}
		d.Drained = d.Segments == 0
		plan.Report.Decommission = append(plan.Report.Decommission, d)
	}
}

// troubledReason says why a troubled segment of a decommission waits;
// failed is the reason it failed this pass, or ReasonNone.
func (p *Planner) troubledReason(t *trouble, failed Reason) string {
	switch failed {
	case NoIntactSource, AllReplicasDead:
		return DrainNoIntactSource
	case NoSpareBroker:
		return DrainNoSpareBroker
	}
	for _, st := range p.state[t.st : int(t.st)+len(t.s.Replicas)] {
		if st == copyLatched || st == copyCorrupt || st == copyRefused {
			return DrainSourceLatched
		}
	}
	return DrainHealing
}

// move plans the move of seg's replica on the decommissioning broker d (seg
// is sealed and healthy: every replica answered with no anomaly) and
// returns "" or the reason it cannot move this pass. A set above the
// replication factor merely drops d; otherwise the new replica is added,
// verified and recorded before d's copy is dropped, so the set never has
// fewer than the replication factor. op names the backfill (MoveReplica,
// RebalanceReplica); want, when not nil, further restricts the target.
func (p *Planner) move(view *meta.View, seg *meta.Segment, d meta.BrokerID, in Input, plan *Plan, backfills *int, op Op, want func(*node) bool) string {
	rf := view.ReplicationFactor()
	pol := in.Policy
	rep := &plan.Report
	if len(seg.Replicas) > rf {
		p.recordMove(seg, d, slices.DeleteFunc(slices.Clone(seg.Replicas), func(r meta.BrokerID) bool { return r == d }), plan)
		return ""
	}
	capped := func(n *node) bool { return pol.MaxBackfillsPerBroker > 0 && n.busy >= pol.MaxBackfillsPerBroker }
	if pol.MaxBackfills > 0 && *backfills+1 > pol.MaxBackfills {
		return DrainDeferred
	}
	src := -1
	for _, r := range seg.Replicas {
		k := p.find(r)
		if k < 0 || !p.pl.nodes[k].up || capped(&p.pl.nodes[k]) {
			continue
		}
		if src < 0 || p.pl.nodes[k].busy < p.pl.nodes[src].busy {
			src = k
		}
	}
	if src < 0 {
		return DrainDeferred
	}
	p.lost = p.lost[:0]
	for _, r := range seg.Replicas {
		p.lost = append(p.lost, r == d)
	}
	capHit := false
	avoided := p.avoided(seg.ID)
	p.pl.place(seg.Replicas, p.lost, rf, func(n *node) bool {
		for _, a := range avoided {
			if a.Broker == n.id {
				return false
			}
		}
		if want != nil && !want(n) {
			return false
		}
		if capped(n) {
			capHit = true
			return false
		}
		return true
	})
	if len(p.pl.added) == 0 {
		if capHit {
			return DrainDeferred
		}
		return DrainNoSpareBroker
	}
	target := p.find(p.pl.added[0])
	if p.racks(p.pl.out) < p.racks(seg.Replicas) {
		p.pl.nodes[target].load--
		return DrainRackConstraint
	}
	s, n := &p.pl.nodes[src], &p.pl.nodes[target]
	plan.Actions = append(plan.Actions, Action{Op: op, Segment: *seg, Target: n.id, Source: s.id, Replaces: d})
	n.busy++
	s.busy++
	*backfills++
	rep.Backfills++
	p.recordMove(seg, d, slices.Clone(p.pl.out), plan)
	return ""
}

// recordMove appends the SetReplicas recording replicas in place of seg's
// set, and the deletion of d's copy after it.
func (p *Planner) recordMove(seg *meta.Segment, d meta.BrokerID, replicas []meta.BrokerID, plan *Plan) {
	cmd := meta.SetSegmentReplicas{ID: seg.ID, Expected: slices.Clone(seg.Replicas), Replicas: replicas}
	plan.Actions = append(plan.Actions,
		Action{Op: SetReplicas, Segment: *seg, Command: cmd, Replaces: d},
		Action{Op: DeleteDroppedCopy, Segment: *seg, Target: d})
	plan.Commands = append(plan.Commands, cmd)
	plan.Report.Commands++
}

// racks counts the distinct racks of set's brokers (a broker without a
// rack counts as its own).
func (p *Planner) racks(set []meta.BrokerID) int {
	var seen []int32
	n := 0
	for _, r := range set {
		j := p.find(r)
		if j < 0 || p.pl.nodes[j].rack < 0 {
			n++
			continue
		}
		if rk := p.pl.nodes[j].rack; !slices.Contains(seen, rk) {
			seen = append(seen, rk)
			n++
		}
	}
	return n
}

// lifecycleString is the lifecycle part of Report.String: moves recorded,
// each decommission's segments left, the brokers in an open maintenance
// window; empty when there is none.
func lifecycleString(r *Report) string {
	s := ""
	if len(r.Moved) > 0 {
		s += fmt.Sprintf(" moved=%d", len(r.Moved))
	}
	for _, d := range r.Decommission {
		s += fmt.Sprintf(" decommission_%d_left=%d", d.Broker, d.Segments)
	}
	if rb := r.Rebalance; rb != nil && (rb.Moves > 0 || !rb.Balanced) {
		s += fmt.Sprintf(" rebalance_moves=%d rebalance_outside=%d", rb.Moves, rb.Outside)
	}
	open := 0
	for _, m := range r.Maintenance {
		if !m.Ended {
			open++
		}
	}
	if open > 0 {
		s += fmt.Sprintf(" maintenance=%d", open)
	}
	return s
}

// drainRates computes each decommission's rate and ETA in rep from the
// marks of the previous State, and returns the marks to keep: one per
// decommissioning broker, started when first seen (or when its bytes
// grew).
func drainRates(marks []DrainMark, rep *Report, now time.Time) []DrainMark {
	var out []DrainMark
	for i := range rep.Decommission {
		d := &rep.Decommission[i]
		k := slices.IndexFunc(marks, func(m DrainMark) bool { return m.Broker == d.Broker })
		var m DrainMark
		if k < 0 || d.Bytes > marks[k].Start {
			m = DrainMark{Broker: d.Broker, Since: now, Start: d.Bytes}
		} else {
			m = marks[k]
		}
		if el := now.Sub(m.Since).Seconds(); el > 0 && m.Start > d.Bytes {
			d.Rate = float64(m.Start-d.Bytes) / el
			d.ETA = time.Duration(float64(d.Bytes) / d.Rate * float64(time.Second))
		}
		out = append(out, m)
	}
	return out
}
