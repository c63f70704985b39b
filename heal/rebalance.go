package heal

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/malachi-log/malachi/meta"
)

// The rebalancer. After healing and the decommissions,
// and only on a pass that planned nothing more urgent (no hold, nothing
// under-replicated, failed, deferred or suspect, no backfill planned), the
// replicas of sealed segments move from the most to the least loaded of
// the eligible brokers (up this pass, mode active: not decommissioning, not
// in maintenance; an auth-failed broker is not up) until every one is
// within the bound of the mean, by count and by bytes:
//
//	|x - mean| <= max(0.1*mean, floor)
//
// where the floor is one replica for the count and the mean replica's
// bytes for the bytes (so a tiny cluster does not thrash). Each move is a
// decommission's move (Planner.move: RebalanceReplica from an intact
// replica, SetReplicas with the target in the donor's place, then
// DeleteDroppedCopy of the donor's copy), of a sealed segment at its
// factor that is not in trouble and has nothing else planned this pass,
// to a broker that holds no copy of it, never lowering the set's rack
// count. A leftover copy of it on the receiver (a returned broker's) is
// not in the way: as for healing, the move's backfill resumes at its
// durable end and verifies it, and the leftover becomes the new replica.
// Greedy and deterministic: the donor is the most loaded by relative
// excess (ties by id); among a bounded number of the donor's segments and
// every receiver, the move that lowers the potential
//
//	Phi = sum over brokers ((count-mean)/bound)^2 + ((bytes-mean)/bound)^2
//
// most is moved, and only if it lowers Phi strictly. Moves keep the totals
// of the eligible brokers, so the means and bounds are fixed while the set
// of eligible brokers is: Phi falls with every recorded move and the loads
// converge without oscillating (TestRebalanceConvergesWithoutPingPong).
// At most Policy.RebalanceMoves moves per pass, within MaxBackfills and
// MaxBackfillsPerBroker.

// Reasons the rebalancer planned nothing this pass (Rebalance.Skipped).
const (
	RebalanceHeld    = "held"    // the mass-failure brake holds every backfill
	RebalanceHealing = "healing" // a segment is under-replicated, failed, deferred or a broker suspect
	RebalanceBusy    = "busy"    // healing or a decommission planned backfills this pass
)

// rebalanceCandidates bounds the donor's segments weighed for one move.
const rebalanceCandidates = 256

// rebalanceTries bounds the donors tried for one move.
const rebalanceTries = 4

// Spread is the minimum, mean and maximum of a load over the eligible
// brokers.
type Spread struct {
	Min  int64   `json:"min"`
	Mean float64 `json:"mean"`
	Max  int64   `json:"max"`
}

// Rebalance is what the rebalancer saw and planned this pass.
type Rebalance struct {
	// Brokers counts the eligible brokers; Outside those beyond the bound
	// (by count or by bytes) before this pass's moves.
	Brokers int `json:"brokers"`
	Outside int `json:"outside"`
	// Count and Bytes are the spreads of replicas and replica bytes of
	// sealed segments over the eligible brokers, before this pass's moves.
	Count Spread `json:"count"`
	Bytes Spread `json:"bytes"`
	// Moves counts the RebalanceReplica moves planned; Skipped says why
	// none was tried (the Rebalance* constants), empty otherwise.
	Moves   int    `json:"moves"`
	Skipped string `json:"skipped,omitempty"`
	// Balanced says every eligible broker was within the bound.
	Balanced bool `json:"balanced"`
}

// String is a one-line summary.
func (r Rebalance) String() string {
	s := fmt.Sprintf("brokers=%d outside=%d moves=%d count=%d/%.1f/%d bytes=%d/%.0f/%d", r.Brokers, r.Outside, r.Moves,
		r.Count.Min, r.Count.Mean, r.Count.Max, r.Bytes.Min, r.Bytes.Mean, r.Bytes.Max)
	if r.Balanced {
		s += " balanced"
	}
	if r.Skipped != "" {
		s += " skipped=" + r.Skipped
	}
	return s
}

// balance is the rebalancer's arithmetic over the eligible nodes.
type balance struct {
	nodes          []int // node indices, eligible
	meanC, meanB   float64
	boundC, boundB float64
}

// score is node n's relative excess: the larger of its count's and its
// bytes' distance above the mean, in bounds (negative below).
func (b *balance) score(n *node) float64 {
	return max((float64(n.held)-b.meanC)/b.boundC, (float64(n.bytes)-b.meanB)/b.boundB)
}

// outside reports whether n is beyond the bound by count or by bytes.
func (b *balance) outside(n *node) bool {
	return math.Abs(float64(n.held)-b.meanC) > b.boundC || math.Abs(float64(n.bytes)-b.meanB) > b.boundB
}

// delta is the change of Phi when a segment of size bytes moves from d to
// r: for a transfer t between loads x_d and x_r the sum of squares changes
// by 2t(t - (x_d - x_r)).
func (b *balance) delta(d, r *node, size int64) float64 {
	dc := 2 * (1 - float64(d.held-r.held)) / (b.boundC * b.boundC)
	s := float64(size)
	db := 2 * s * (s - float64(d.bytes-r.bytes)) / (b.boundB * b.boundB)
	return dc + db
}

// rebalanceSetup computes the eligible nodes, the means and bounds, and
// the report's spreads; ok is false with fewer than two eligible brokers.
func (p *Planner) rebalanceSetup(view *meta.View) (b balance, r Rebalance, ok bool) {
	var cnt, byt int64
	r.Count.Min, r.Bytes.Min = math.MaxInt64, math.MaxInt64
	for j := range p.pl.nodes {
		n := &p.pl.nodes[j]
		if !n.up || n.decom {
			continue
		}
		if br, found := view.Broker(n.id); !found || !br.Is(meta.ModeActive) {
			continue
		}
		b.nodes = append(b.nodes, j)
		cnt += int64(n.held)
		byt += n.bytes
		r.Count.Min, r.Count.Max = min(r.Count.Min, int64(n.held)), max(r.Count.Max, int64(n.held))
		r.Bytes.Min, r.Bytes.Max = min(r.Bytes.Min, n.bytes), max(r.Bytes.Max, n.bytes)
	}
	r.Brokers = len(b.nodes)
	if len(b.nodes) < 2 || cnt == 0 {
		return b, r, false
	}
	k := float64(len(b.nodes))
	b.meanC, b.meanB = float64(cnt)/k, float64(byt)/k
	r.Count.Mean, r.Bytes.Mean = b.meanC, b.meanB
	b.boundC = max(0.1*b.meanC, 1)
	b.boundB = max(0.1*b.meanB, float64(byt)/float64(cnt), 1)
	for _, j := range b.nodes {
		if b.outside(&p.pl.nodes[j]) {
			r.Outside++
		}
	}
	r.Balanced = r.Outside == 0
	return b, r, true
}

// rebalance plans this pass's rebalancing moves (see the top of this file)
// and reports them in plan.Report.Rebalance.
func (p *Planner) rebalance(view *meta.View, in Input, hold bool, plan *Plan, backfills *int) {
	pol := in.Policy
	if !pol.Rebalance {
		return
	}
	b, r, ok := p.rebalanceSetup(view)
	rep := &plan.Report
	defer func() { rep.Rebalance = &r }()
	if !ok || r.Balanced {
		return
	}
	switch {
	case hold:
		r.Skipped = RebalanceHeld
	case rep.UnderReplicated > 0 || len(rep.Failed) > 0 || rep.Deferred > 0 || len(rep.Suspect) > 0 || len(rep.Lost) > 0 || p.timedOut > 0:
		r.Skipped = RebalanceHealing
	case *backfills > 0:
		r.Skipped = RebalanceBusy
	}
	if r.Skipped != "" {
		return
	}
	skip := make(map[meta.SegmentID]bool, len(p.troubled)+len(plan.Actions))
	for i := range p.troubled {
		skip[p.troubled[i].s.ID] = true
	}
	for i := range plan.Actions {
		skip[plan.Actions[i].Segment.ID] = true
	}
	for r.Moves < pol.rebalanceMoves() {
		seg, d, t := p.pickMove(view, in, &b, skip)
		if seg == nil {
			break
		}
		skip[seg.ID] = true
		dn, tn := &p.pl.nodes[d], &p.pl.nodes[t]
		target := tn.id
		if p.move(view, seg, dn.id, in, plan, backfills, RebalanceReplica, func(n *node) bool { return n.id == target }) != "" {
			break // the budgets are spent (or no source has room): the rest waits
		}
		dn.held--
		dn.bytes -= seg.ByteSize
		tn.held++
		tn.bytes += seg.ByteSize
		r.Moves++
	}
}

// pickMove returns the segment to move from donor d to receiver t (node
// indices), or nil when no move lowers Phi. Donors are tried most loaded
// first (at most rebalanceTries of them); for each, up to
// rebalanceCandidates of its movable segments are weighed against every
// eligible receiver, and the pair lowering Phi most wins (ties: the
// donor's first segment, then the least loaded receiver).
func (p *Planner) pickMove(view *meta.View, in Input, b *balance, skip map[meta.SegmentID]bool) (*meta.Segment, int, int) {
	order := slices.Clone(b.nodes)
	slices.SortFunc(order, func(x, y int) int {
		if c := cmp.Compare(b.score(&p.pl.nodes[y]), b.score(&p.pl.nodes[x])); c != 0 {
			return c
		}
		return cmp.Compare(p.pl.nodes[x].id, p.pl.nodes[y].id)
	})
	rf := view.ReplicationFactor()
	capped := func(n *node) bool {
		return in.Policy.MaxBackfillsPerBroker > 0 && n.busy >= in.Policy.MaxBackfillsPerBroker
	}
	for k, d := range order {
		if k >= rebalanceTries {
			break
		}
		dn := &p.pl.nodes[d]
		if capped(dn) {
			continue // the donor's copy is the natural source; others may be busy too
		}
		if seg, t := p.bestMove(view, in, b, d, order, rf, skip, capped); seg != nil {
			return seg, d, t
		}
	}
	return nil, -1, -1
}

// bestMove weighs up to rebalanceCandidates of donor d's movable segments
// against each receiver and returns the move lowering Phi most, or nil.
func (p *Planner) bestMove(view *meta.View, in Input, b *balance, d int, receivers []int, rf int, skip map[meta.SegmentID]bool, capped func(*node) bool) (*meta.Segment, int) {
	dn := &p.pl.nodes[d]
	var best *meta.Segment
	bestT, bestD := -1, 0.0
	seen := 0
	for seg := range view.HeldBy(dn.id) {
		if !seg.Sealed || len(seg.Replicas) != rf || skip[seg.ID] {
			continue
		}
		seen++
		for i := len(receivers) - 1; i >= 0; i-- { // least loaded first
			t := receivers[i]
			tn := &p.pl.nodes[t]
			if t == d || capped(tn) || slices.Contains(seg.Replicas, tn.id) {
				continue
			}
			delta := b.delta(dn, tn, seg.ByteSize)
			if delta >= bestD || (delta == bestD && best != nil) {
				continue
			}
			if !p.racksKept(seg.Replicas, dn.id, tn.id) {
				continue
			}
			best, bestT, bestD = seg, t, delta
		}
		if seen >= rebalanceCandidates {
			break
		}
	}
	return best, bestT
}

// racksKept reports whether replacing d by t in set keeps its rack count.
func (p *Planner) racksKept(set []meta.BrokerID, d, t meta.BrokerID) bool {
	next := make([]meta.BrokerID, 0, len(set))
	for _, r := range set {
		if r == d {
			r = t
		}
		next = append(next, r)
	}
	return p.racks(next) >= p.racks(set)
}
