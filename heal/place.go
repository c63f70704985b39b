package heal

import (
	"slices"

	"github.com/malachi-log/malachi/meta"
)

// Placement is the healed replica set of one segment and how it differs
// from the current one.
type Placement struct {
	// Replicas is the healed set: the healthy survivors in their current
	// order, then the new replicas, then the lost replicas kept for lack
	// of a spare broker (so reads avoid them). It never names a broker
	// twice and never names a broker outside the current set and the live
	// brokers.
	Replicas []meta.BrokerID
	// Added are the new replicas, in the order they appear in Replicas;
	// each needs a backfill before Replicas may be recorded.
	Added []meta.BrokerID
	// Replaced are the lost replicas left out of Replicas, each replaced
	// by the Added broker at the same index.
	Replaced []meta.BrokerID
	// Kept are the lost replicas that stay in Replicas because no live
	// broker without a copy was left to replace them.
	Kept []meta.BrokerID
}

// Changed reports whether the healed set differs from current.
func (p Placement) Changed(current []meta.BrokerID) bool {
	return !meta.SameReplicas(p.Replicas, current)
}

// Place returns the healed replica set of a segment whose replica set is
// current, given the live brokers (with their racks), the replication
// factor, the replicas whose copy of this segment is latched failed, and the
// number of replicas each broker holds (load; nil counts zero).
//
// A replica is lost when its broker is not live or its copy is latched.
// Place keeps the healthy survivors in their order and replaces each lost
// replica, and each slot missing up to factor, with the live broker that
// holds no copy of the segment (it is not in current), preferring a rack
// that none of the chosen replicas uses yet (brokers without a rack never
// count as sharing one), then the least load, then the lowest id. A lost
// replica that cannot be replaced stays in the set, behind the others: a
// copy is never dropped without a replacement. Healthy survivors beyond
// factor are kept (Place never removes a healthy copy). Place is
// deterministic: equal inputs give equal outputs, whatever the order of
// live.
func Place(current []meta.BrokerID, live []meta.Broker, factor int, latched []meta.BrokerID, load func(meta.BrokerID) int) Placement {
	var p placer
	racks := map[string]int32{}
	for _, b := range live {
		n := node{id: b.ID, rack: -1, up: true}
		if b.Rack != "" {
			r, ok := racks[b.Rack]
			if !ok {
				r = int32(len(racks))
				racks[b.Rack] = r
			}
			n.rack = r
		}
		if load != nil {
			n.load = load(b.ID)
		}
		p.nodes = append(p.nodes, n)
	}
	slices.SortFunc(p.nodes, func(a, b node) int { return int(int64(a.id) - int64(b.id)) })
	p.nodes = slices.CompactFunc(p.nodes, func(a, b node) bool { return a.id == b.id })
	lost := make([]bool, len(current))
	for i, r := range current {
		lost[i] = p.find(r) < 0 || slices.Contains(latched, r)
	}
	p.place(current, lost, factor, nil)
	return Placement{
		Replicas: slices.Clone(p.out),
		Added:    slices.Clone(p.added),
		Replaced: slices.Clone(p.replaced),
		Kept:     slices.Clone(p.kept),
	}
}

// node is one registered broker as a pass sees it.
type node struct {
	id   meta.BrokerID
	rack int32 // index of the rack name; -1 when the broker has none
	// up: answered this tick (a source and a target); dead: unseen for
	// longer than the grace delay. Neither: suspect.
	up, dead bool
	recent   bool  // seen within the grace delay
	decom    bool  // decommissioning: never a target (lifecycle.go)
	maint    bool  // in a maintenance window and not up: not dead, not suspect
	load     int   // replicas held, plus those placed this pass
	busy     int   // backfills planned this pass as source or target
	held     int   // replicas of sealed segments held (rebalance.go)
	bytes    int64 // their bytes
	report   int   // index of its report in the pass's input, -1 none
}

// placer holds the brokers of a pass and the scratch buffers of placement,
// reused from segment to segment and pass to pass.
type placer struct {
	nodes                      []node // sorted by id
	racks                      []int32
	out, added, replaced, kept []meta.BrokerID
}

// find returns the index of broker id in nodes, or -1.
func (p *placer) find(id meta.BrokerID) int {
	lo, hi := 0, len(p.nodes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if p.nodes[m].id < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(p.nodes) && p.nodes[lo].id == id {
		return lo
	}
	return -1
}

// place computes the healed set of current, where lost[i] says current[i]
// is lost, into p.out, p.added, p.replaced and p.kept (valid until the next
// call). eligible, when not nil, further restricts targets (per-broker
// caps). The chosen targets' load is incremented.
func (p *placer) place(current []meta.BrokerID, lost []bool, factor int, eligible func(*node) bool) {
	p.out, p.added, p.replaced, p.kept, p.racks = p.out[:0], p.added[:0], p.replaced[:0], p.kept[:0], p.racks[:0]
	survivors := 0
	for i, r := range current {
		if lost[i] {
			continue
		}
		p.out = append(p.out, r)
		survivors++
		if j := p.find(r); j >= 0 && p.nodes[j].rack >= 0 {
			p.racks = append(p.racks, p.nodes[j].rack)
		}
	}
	for survivors+len(p.added) < factor {
		best := -1
		bestShared := false
		for j := range p.nodes {
			n := &p.nodes[j]
			if !n.up || n.decom || slices.Contains(current, n.id) || slices.Contains(p.added, n.id) {
				continue
			}
			if eligible != nil && !eligible(n) {
				continue
			}
			shared := n.rack >= 0 && slices.Contains(p.racks, n.rack)
			if best < 0 || (!shared && bestShared) || (shared == bestShared && n.load < p.nodes[best].load) {
				best, bestShared = j, shared
			}
		}
		if best < 0 {
			break
		}
		n := &p.nodes[best]
		n.load++
		p.added = append(p.added, n.id)
		p.out = append(p.out, n.id)
		if n.rack >= 0 {
			p.racks = append(p.racks, n.rack)
		}
	}
	replaced := 0
	for i, r := range current {
		if !lost[i] {
			continue
		}
		if replaced < len(p.added) {
			p.replaced = append(p.replaced, r)
			replaced++
			continue
		}
		p.kept = append(p.kept, r)
		p.out = append(p.out, r)
	}
}
