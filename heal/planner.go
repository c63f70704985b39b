package heal

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/malachi-log/malachi/meta"
)

// Planner makes Plans. Its zero value is ready to use. It keeps no decision
// state between passes (the settle cursor travels in Input and Plan), only
// scratch buffers, so that a pass over a million healthy segments allocates
// nothing per segment. It is not safe for concurrent use; the Plans it
// returns share no memory with it (the Actions' Segment values share their
// Replicas with Input.View, which nobody modifies).
type Planner struct {
	pl       placer
	index    []int32 // broker id -> node index + 1, when ids are small
	rackName []string
	anoms    []anom
	troubled []trouble
	lost     []bool
	unset    []unsettledCopy
	unconf   []CopyRef // Input.Unconfirmed, sorted
	avoid    []CopyRef // Input.Avoid, sorted
	state    []copyState
	refused  []Refusal        // Input.Refused, sorted by segment then source
	acked    []meta.SegmentID // Input.Acknowledged, sorted
	inForce  []Refusal        // the refusals applied this pass
	wasLost  []meta.SegmentID // Input.Lost, sorted
	conflict []Conflict       // Input.Conflicts, sorted by segment
	held     []Conflict       // the conflicts applied this pass
	prints   []uint64         // copyPrint of each replica, parallel to state
	timedOut int              // segments with a copy whose probe timed out this pass
}

// anom is one fact about one copy, flattened out of the reports; scan
// classifies it (kind, size, confirmed) once its segment is known.
type anom struct {
	seg       meta.SegmentID
	broker    meta.BrokerID
	flags     FactFlags
	raw       int64 // the fact's size
	kind      Kind
	confirmed bool // an Intact fact listed anyway: a confirmed overrun
	size      int64
}

// trouble is a sealed segment that needs a look beyond the fast path.
type trouble struct {
	seg     int32         // position in the view (id order)
	s       *meta.Segment // shared with the view
	lo, hi  int32         // its anomalies, p.anoms[lo:hi]
	healthy int32         // healthy copies, for risk order
	st      int32         // its replicas' states, p.state[st:st+len(replicas)]
	fp      uint64
}

// unsettledCopy is one copy of the seed's unsettled list.
type unsettledCopy struct {
	ref   CopyRef
	s     *meta.Segment
	print uint64 // its copy's copyPrint
	// selectable: its segment meets the seed's conditions this pass.
	selectable bool
}

// copyState classifies one replica of a troubled segment.
type copyState uint8

const (
	copyIntact   copyState = iota // up, no anomaly: a source
	copyOverrun                   // up, overrun not confirmed: a source of last resort
	copyShort                     // up, short or missing: resumed in place
	copyTimedOut                  // up, its probe timed out: unknown
	copySuspect                   // broker not up, within its grace delay: unknown
	copyRefused                   // up, intact to the probe, but refused as a source (Refusal in force)
	copyConflict                  // up, its own seal disagrees with the metadata (Conflict in force): left alone
	copyLatched                   // up, latched: lost
	copyCorrupt                   // up, failed its checksum (scrubber): lost
	copyDead                      // broker dead or unknown: lost
)

func (s copyState) healthy() bool { return s <= copyOverrun }
func (s copyState) lost() bool    { return s >= copyLatched }
func (s copyState) unknown() bool { return s == copyTimedOut || s == copySuspect }

// severity orders the kinds of two anomalies reported for one copy.
var severity = [...]uint8{KindUnknown: 0, Overrun: 1, Short: 2, Missing: 3, TimedOut: 4, Corrupt: 5, Latched: 6}

const denseIDs = 1 << 16

// Plan runs one pass over in. It returns an error wrapping ErrInvalid, and
// no plan, when the policy or the replication factor is invalid. The
// reports must be valid (ProbeReport.Validate): they are validated once,
// where they cross the network (the executor leaves out a report that
// is not, as if its broker had not answered), and not again here; under
// the invariants build tag an invalid report panics.
func (p *Planner) Plan(in Input) (Plan, error) {
	pol := in.Policy
	if err := pol.Validate(); err != nil {
		return Plan{}, err
	}
	view := in.View
	if view == nil {
		return Plan{}, fmt.Errorf("%w: input has no metadata view", ErrInvalid)
	}
	rf := view.ReplicationFactor()
	if rf < 1 {
		return Plan{}, fmt.Errorf("%w: snapshot %d: replication_factor %d: want at least 1", ErrInvalid, view.Index(), rf)
	}
	checkReports(in.Reports)
	plan := Plan{Index: view.Index(), Actions: []Action{}, SettleCursor: in.SettleCursor}
	rep := &plan.Report
	rep.Index = view.Index()
	rep.Segments = view.Len()

	p.nodes(in, rep)
	hold, reason := Hold(p.holdBrokers(view), in.Reports, in.Seen, in.Policy)
	if hold {
		rep.HoldReason = reason
		rep.HoldReleased = in.Release
		hold = !in.Release
	} else if in.Held && !in.Release {
		p.restartGrace(rep)
	}
	p.flatten(in)
	p.memory(in)
	rep.Active = p.scan(view)
	rep.Sealed = rep.Segments - rep.Active

	// Risk order: fewest healthy copies first, then snapshot order.
	p.state = p.state[:0]
	p.prints = p.prints[:0]
	p.timedOut = 0
	p.inForce = p.inForce[:0]
	p.held = p.held[:0]
	for i := range p.troubled {
		p.classify(view, &p.troubled[i], rep)
	}
	if len(p.inForce) > 0 {
		plan.Refused = slices.Clone(p.inForce)
	}
	if len(p.held) > 0 {
		plan.Conflicts = slices.Clone(p.held)
	}
	slices.SortFunc(p.troubled, func(a, b trouble) int {
		if c := cmp.Compare(a.healthy, b.healthy); c != 0 {
			return c
		}
		return cmp.Compare(a.seg, b.seg)
	})
	p.unset = p.unset[:0]
	backfills := 0
	for i := range p.troubled {
		t := &p.troubled[i]
		id := t.s.ID
		if _, ok := slices.BinarySearch(p.acked, id); ok {
			plan.Acknowledged = append(plan.Acknowledged, id)
		}
		p.segment(view, t, in, hold, &plan, &backfills)
	}
	slices.Sort(plan.Acknowledged)
	for _, l := range rep.Lost {
		plan.Lost = append(plan.Lost, l.Segment)
	}
	slices.Sort(plan.Lost)
	sortRefs(plan.Unconfirmed)
	p.decommission(view, in, hold, &plan, &backfills)
	p.rebalance(view, in, hold, &plan, &backfills)
	p.settle(in, &plan)
	// The scratch keeps no pointer into the view: an old view's chunks
	// must not outlive the pass (they would once the table copies them).
	clear(p.troubled)
	clear(p.unset)
	return plan, nil
}

// memory copies the refusals and acknowledgements into sorted scratch
// buffers, so that a troubled segment finds its own by binary search.
func (p *Planner) memory(in Input) {
	p.refused = append(p.refused[:0], in.Refused...)
	slices.SortFunc(p.refused, cmpRefusal)
	p.refused = slices.Compact(p.refused)
	p.acked = append(p.acked[:0], in.Acknowledged...)
	slices.Sort(p.acked)
	p.acked = slices.Compact(p.acked)
	p.wasLost = append(p.wasLost[:0], in.Lost...)
	slices.Sort(p.wasLost)
	p.unconf = append(p.unconf[:0], in.Unconfirmed...)
	sortRefs(p.unconf)
	p.avoid = append(p.avoid[:0], in.Avoid...)
	sortRefs(p.avoid)
	p.conflict = append(p.conflict[:0], in.Conflicts...)
	slices.SortFunc(p.conflict, func(a, b Conflict) int { return cmp.Compare(a.Segment, b.Segment) })
}

// avoided returns the copies of Input.Avoid on segment id (a sub-slice of
// p.avoid): placement checks a candidate against these, not against every
// avoided copy (20,000 after a pass whose backfills all failed).
func (p *Planner) avoided(id meta.SegmentID) []CopyRef {
	i, _ := slices.BinarySearchFunc(p.avoid, CopyRef{Segment: id}, cmpRefs)
	j := i
	for j < len(p.avoid) && p.avoid[j].Segment == id {
		j++
	}
	return p.avoid[i:j]
}

func cmpRefusal(a, b Refusal) int {
	if c := cmp.Compare(a.Segment, b.Segment); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Source, b.Source); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Version, b.Version); c != 0 {
		return c
	}
	return cmp.Compare(a.State, b.State)
}

// sealPrint starts a segment's fingerprint (FNV-1a) with what sealing
// fixed, so that a corrected seal lifts the refusals and conflicts
// recorded under the old one even if the version did not move.
func sealPrint(seg *meta.Segment) uint64 {
	h := uint64(14695981039346656037)
	for _, v := range [...]uint64{seg.StartOffset, seg.Length, uint64(seg.ByteSize), uint64(seg.Checksum)} {
		for k := 0; k < 8; k++ {
			h ^= v & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	return h
}

// fingerprint mixes one replica's raw state into h (FNV-1a over its id,
// class, anomaly kind, size and confirmation).
func fingerprint(h uint64, r meta.BrokerID, st copyState, a *anom) uint64 {
	const prime = 1099511628211
	mix := func(v uint64) {
		for k := 0; k < 8; k++ {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	mix(uint64(r))
	mix(uint64(st))
	if a != nil {
		conf := uint64(0)
		if a.confirmed {
			conf = 1
		}
		mix(uint64(a.kind) | conf<<8)
		mix(uint64(a.size))
	}
	return h
}

// nodes builds the pass's broker table: liveness from the reports, the
// last-seen times, the time of the pass and the grace delay.
func (p *Planner) nodes(in Input, rep *Report) {
	p.pl.nodes = p.pl.nodes[:0]
	p.rackName = p.rackName[:0]
	var maxID meta.BrokerID
	for _, b := range in.View.Brokers() {
		n := node{id: b.ID, rack: -1, report: -1}
		if b.Rack != "" {
			n.rack = int32(slices.Index(p.rackName, b.Rack))
			if n.rack < 0 {
				n.rack = int32(len(p.rackName))
				p.rackName = append(p.rackName, b.Rack)
			}
		}
		p.pl.nodes = append(p.pl.nodes, n)
		maxID = max(maxID, b.ID)
	}
	// The snapshot's brokers are sorted by id (meta invariant); be robust.
	if !slices.IsSortedFunc(p.pl.nodes, func(a, b node) int { return cmp.Compare(a.id, b.id) }) {
		slices.SortFunc(p.pl.nodes, func(a, b node) int { return cmp.Compare(a.id, b.id) })
	}
	p.index = p.index[:0]
	if maxID < denseIDs {
		p.index = slices.Grow(p.index, int(maxID)+1)[:maxID+1]
		clear(p.index)
		for j, n := range p.pl.nodes {
			p.index[n.id] = int32(j) + 1
		}
	}
	for i := range in.Reports {
		if j := p.find(in.Reports[i].Broker); j >= 0 {
			n := &p.pl.nodes[j]
			n.up, n.report = true, i
		}
	}
	from := in.Start
	if from.IsZero() || from.After(in.Now) {
		from = in.Now
	}
	for _, s := range in.Seen {
		if j := p.find(s.Broker); j >= 0 && from.Sub(p.lastSeen(in, s)) <= in.Policy.Grace {
			p.pl.nodes[j].recent = true
		}
	}
	p.modes(in, rep)
	for j := range p.pl.nodes {
		n := &p.pl.nodes[j]
		if n.up || n.maint {
			continue
		}
		if n.recent {
			rep.Suspect = append(rep.Suspect, n.id)
		} else {
			n.dead = true
			rep.Dead = append(rep.Dead, n.id)
		}
	}
}

// restartGrace counts as suspect the brokers counted dead on the pass
// where a hold lifts on its own, and lists them in rep.GraceRestarted
// (State.Seen then starts their grace delay again from this pass).
func (p *Planner) restartGrace(rep *Report) {
	rep.Dead = nil
	for j := range p.pl.nodes {
		n := &p.pl.nodes[j]
		if n.dead {
			n.dead, n.recent = false, true
			rep.Suspect = append(rep.Suspect, n.id)
			rep.GraceRestarted = append(rep.GraceRestarted, n.id)
		}
	}
	slices.Sort(rep.Suspect)
}

// find returns the node index of broker id, or -1.
func (p *Planner) find(id meta.BrokerID) int {
	if len(p.index) > 0 {
		if int(id) < len(p.index) {
			return int(p.index[id]) - 1
		}
		return -1
	}
	return p.pl.find(id)
}

// flatten copies every report's facts into p.anoms sorted by segment then
// broker (a copy may have several: anomaly picks the most severe).
func (p *Planner) flatten(in Input) {
	p.anoms = p.anoms[:0]
	for i := range in.Reports {
		r := &in.Reports[i]
		if p.find(r.Broker) < 0 {
			continue
		}
		for k := range r.Facts {
			f := &r.Facts[k]
			p.anoms = append(p.anoms, anom{seg: f.Segment, broker: r.Broker, flags: f.Flags, raw: f.Size})
		}
	}
	slices.SortFunc(p.anoms, func(a, b anom) int {
		if c := cmp.Compare(a.seg, b.seg); c != 0 {
			return c
		}
		if c := cmp.Compare(a.broker, b.broker); c != 0 {
			return c
		}
		if c := cmp.Compare(a.flags, b.flags); c != 0 {
			return c
		}
		return cmp.Compare(a.raw, b.raw)
	})
}

// classifyFacts decides the kind of each of seg's facts, p.anoms[lo:hi]
// (Classify); an Intact fact becomes a confirmed overrun, which changes
// nothing but is counted, as the broker listed it.
func (p *Planner) classifyFacts(seg *meta.Segment, lo, hi int) {
	for k := lo; k < hi; k++ {
		a := &p.anoms[k]
		v := Classify(seg, &Fact{Segment: a.seg, Flags: a.flags, Size: a.raw})
		a.kind, a.size, a.confirmed = v.Kind, v.Size, false
		if v.Kind == KindUnknown {
			a.kind, a.size, a.confirmed = Overrun, a.raw, true
		}
	}
}

// scan is the one iteration over the snapshot: it counts each broker's load
// and collects the sealed segments that are not plainly healthy, and
// returns the number of active segments. Its cost per healthy segment is a
// few index lookups and one string comparison.
func (p *Planner) scan(view *meta.View) (active int) {
	p.troubled = p.troubled[:0]
	rf := view.ReplicationFactor()
	nodes := p.pl.nodes
	dense := p.index
	ai := 0
	for i, seg := range view.All() {
		for ai < len(p.anoms) && p.anoms[ai].seg < seg.ID {
			ai++
		}
		lo := ai
		for ai < len(p.anoms) && p.anoms[ai].seg == seg.ID {
			ai++
		}
		ok := len(seg.Replicas) >= rf
		for _, r := range seg.Replicas {
			j := -1
			if len(dense) > 0 {
				if int(r) < len(dense) {
					j = int(dense[r]) - 1
				}
			} else {
				j = p.pl.find(r)
			}
			if j < 0 {
				ok = false
				continue
			}
			n := &nodes[j]
			n.load++
			if seg.Sealed {
				n.held++
				n.bytes += seg.ByteSize
			}
			ok = ok && n.up
		}
		if !seg.Sealed {
			active++
			continue
		}
		if ok && lo == ai {
			continue
		}
		p.classifyFacts(seg, lo, ai)
		p.troubled = append(p.troubled, trouble{seg: int32(i), s: seg, lo: int32(lo), hi: int32(ai)})
	}
	return active
}

// classify fills the states of t's replicas and its healthy count.
func (p *Planner) classify(view *meta.View, t *trouble, rep *Report) {
	seg := t.s
	t.st = int32(len(p.state))
	healthy := int32(0)
	fp := sealPrint(seg)
	for _, r := range seg.Replicas {
		st := copyDead
		var an *anom
		if j := p.find(r); j >= 0 {
			n := &p.pl.nodes[j]
			switch {
			case n.up:
				st = copyIntact
				if a := p.anomaly(t, r); a != nil {
					an = a
					rep.Anomalies++
					switch a.kind {
					case Missing, Short:
						st = copyShort
					case Latched:
						st = copyLatched
					case Corrupt:
						st = copyCorrupt
					case TimedOut:
						st = copyTimedOut
					case Overrun:
						if !a.confirmed && st == copyIntact {
							st = copyOverrun
						}
					}
				}
			case !n.dead:
				st = copySuspect
			}
		}
		fp = fingerprint(fp, r, st, an)
		p.state = append(p.state, st)
		p.prints = append(p.prints, copyPrint(r, an))
	}
	t.fp = fp
	// Refusals in force: the segment's version and raw states unchanged.
	states := p.state[t.st:]
	if len(p.refused) > 0 {
		k, _ := slices.BinarySearchFunc(p.refused, seg.ID, func(r Refusal, id meta.SegmentID) int { return cmp.Compare(r.Segment, id) })
		for ; k < len(p.refused) && p.refused[k].Segment == seg.ID; k++ {
			rf := p.refused[k]
			if rf.Version != seg.Version || rf.State != fp {
				continue
			}
			if i := slices.Index(seg.Replicas, rf.Source); i >= 0 && states[i].healthy() {
				states[i] = copyRefused
				rep.Refused++
				p.inForce = append(p.inForce, rf)
			}
		}
	}
	p.conflicts(seg, states, p.prints[t.st:])
	p.maintenanceFloor(view, seg, states, rep)
	timedOut := 0
	for _, st := range states {
		switch {
		case st.healthy():
			healthy++
		case st == copyTimedOut:
			timedOut++
		}
	}
	t.healthy = healthy
	// A copy whose own probe timed out is unknown this tick, not lost: it
	// does not make its segment under-replicated (the seed's P6.5 exempts
	// that copy alone, not its segment's other copies).
	if int(healthy)+timedOut < view.ReplicationFactor() {
		rep.UnderReplicated++
	}
	if timedOut > 0 {
		p.timedOut++
	}
}

// conflicts marks copyConflict the replicas of seg with a Conflict in
// force: the segment's version and seal unchanged, the broker still a
// replica, and its copy either reported as when the conflict was recorded
// (prints) or not seen this pass (a dead, suspect or timed-out broker
// proves nothing).
func (p *Planner) conflicts(seg *meta.Segment, states []copyState, prints []uint64) {
	if len(p.conflict) == 0 {
		return
	}
	seal := sealPrint(seg)
	k, _ := slices.BinarySearchFunc(p.conflict, seg.ID, func(c Conflict, id meta.SegmentID) int { return cmp.Compare(c.Segment, id) })
	for ; k < len(p.conflict) && p.conflict[k].Segment == seg.ID; k++ {
		c := p.conflict[k]
		i := slices.Index(seg.Replicas, c.Broker)
		if c.Version != seg.Version || c.Seal != seal || i < 0 || states[i] == copyConflict {
			continue
		}
		if st := states[i]; st.unknown() || st == copyDead || prints[i] == c.State {
			states[i] = copyConflict
			p.held = append(p.held, c)
		}
	}
}

// copyPrint is the fingerprint of one replica's copy as its broker
// reported it (an anomaly's kind, size and confirmation, or none), for a
// Conflict.
func copyPrint(r meta.BrokerID, a *anom) uint64 {
	return fingerprint(14695981039346656037, r, 0, a)
}

// anomaly returns broker r's most severe anomaly among t's, or nil.
func (p *Planner) anomaly(t *trouble, r meta.BrokerID) *anom {
	var best *anom
	for k := t.lo; k < t.hi; k++ {
		if a := &p.anoms[k]; a.broker == r && (best == nil || severity[a.kind] > severity[best.kind]) {
			best = a
		}
	}
	return best
}

// source picks the intact replica a backfill of t reads from: an intact
// copy first, then one whose only fault is an overrun; among equals the least busy, then the first in the set. It returns
// -1 when there is none, or when every candidate has reached the per-broker
// cap (capped is then true).
func (p *Planner) source(seg *meta.Segment, states []copyState, cap int) (j int, capped bool) {
	best, bestClass := -1, copyState(255)
	for i, r := range seg.Replicas {
		st := states[i]
		if !st.healthy() {
			continue
		}
		k := p.find(r)
		n := &p.pl.nodes[k]
		if cap > 0 && n.busy >= cap {
			capped = true
			continue
		}
		if best < 0 || st < bestClass || (st == bestClass && n.busy < p.pl.nodes[best].busy) {
			best, bestClass = k, st
		}
	}
	return best, capped && best < 0
}

// copyCounts tallies a troubled segment's copies by state.
type copyCounts struct {
	lost, dead, short, unknown, suspect, conflict int
}

// countCopies tallies states: dead copies count among the lost, suspect
// ones among the unknown.
func countCopies(states []copyState) copyCounts {
	var c copyCounts
	for _, st := range states {
		switch {
		case st == copyConflict:
			c.conflict++
		case st.lost():
			c.lost++
			if st == copyDead {
				c.dead++
			}
		case st == copyShort:
			c.short++
		case st.unknown():
			c.unknown++
			if st == copySuspect {
				c.suspect++
			}
		}
	}
	return c
}

// segment plans one troubled sealed segment.
func (p *Planner) segment(view *meta.View, t *trouble, in Input, hold bool, plan *Plan, backfills *int) {
	seg := t.s
	rf := view.ReplicationFactor()
	rep := &plan.Report
	states := p.state[t.st : int(t.st)+len(seg.Replicas)]
	pol := in.Policy

	c := countCopies(states)
	needPlace := c.lost > 0 || len(seg.Replicas) < rf

	// The seed's conditions (P6.5): its segment fully live (no replica's
	// broker silent, so its latch state is readable: see doc.go) and not
	// under-replicated. The copy's own latch and timed-out probe are its
	// state (unsettled lists only copyOverrun); another replica's
	// timed-out stat does not count.
	p.unsettled(t, states, !needPlace && c.short == 0 && c.suspect == 0 && c.conflict == 0, plan)
	if c.conflict > 0 {
		// A copy's own seal disagrees with the metadata: which is right
		// is for an operator to say. Nothing is cut, replaced or deleted.
		p.fail(plan, seg, SealConflict, copiesIn(seg, states, copyConflict))
		return
	}
	// Lost last pass and no copy known intact now (a timed-out probe or a
	// broker within its grace proves nothing): still lost.
	_, wasLost := slices.BinarySearch(p.wasLost, seg.ID)
	stillLost := wasLost && t.healthy == 0
	if !needPlace && c.short == 0 && !stillLost {
		return
	}

	src, ok := p.backfillSource(seg, states, c, wasLost, stillLost, pol, plan)
	if !ok {
		return
	}
	if hold {
		// The mass-failure brake: no backfill starts, in place or not.
		rep.Deferred++
		return
	}
	budget := func(k int) bool { return pol.MaxBackfills == 0 || *backfills+k <= pol.MaxBackfills }

	// Short or missing copies on live brokers: resume in place.
	start := len(plan.Actions)
	if !p.resume(t, states, src, pol, budget, plan, backfills) {
		return
	}
	if !needPlace {
		return
	}
	p.replace(t, states, src, c.lost, rf, in, budget, start, plan, backfills)
}

// backfillSource picks the node t's backfills read from; when there is
// none it fails or defers seg and returns false. A segment lost last pass
// whose sources are none known intact is failed again, and still planned.
func (p *Planner) backfillSource(seg *meta.Segment, states []copyState, c copyCounts, wasLost, stillLost bool, pol Policy, plan *Plan) (int, bool) {
	if c.dead == len(seg.Replicas) { // every replica dead, or none at all
		p.fail(plan, seg, AllReplicasDead, nil)
		return -1, false
	}
	src, capped := p.source(seg, states, pol.MaxBackfillsPerBroker)
	if src < 0 {
		if capped || (c.unknown > 0 && !stillLost) {
			plan.Report.Deferred++ // a source exists but is busy, or may answer next tick
			return -1, false
		}
		p.fail(plan, seg, NoIntactSource, lostCopies(seg, states))
		return -1, false
	}
	if wasLost && p.noneKnownIntact(seg, states) {
		p.fail(plan, seg, NoIntactSource, lostCopies(seg, states)) // still lost while the read is tried
	}
	return src, true
}

// replace places new replicas for t's lost or missing copies, backfilled
// from the node src, and plans them (placed); when a cap or the budget
// leaves no room it defers t and unplans its actions from start on.
func (p *Planner) replace(t *trouble, states []copyState, src, lost, rf int, in Input, budget func(int) bool, start int, plan *Plan, backfills *int) {
	seg := t.s
	pol := in.Policy
	p.lost = p.lost[:0]
	for _, st := range states {
		p.lost = append(p.lost, st.lost())
	}
	s := &p.pl.nodes[src]
	capHit := false
	avoided := p.avoided(seg.ID)
	eligible := func(n *node) bool {
		for _, a := range avoided {
			if a.Broker == n.id {
				return false
			}
		}
		if pol.MaxBackfillsPerBroker > 0 && n.busy >= pol.MaxBackfillsPerBroker {
			capHit = true
			return false
		}
		return true
	}
	p.pl.place(seg.Replicas, p.lost, rf, eligible)
	want := max(0, rf-(len(seg.Replicas)-lost))
	sourceRoom := pol.MaxBackfillsPerBroker == 0 || s.busy+len(p.pl.added) <= pol.MaxBackfillsPerBroker
	if (capHit && len(p.pl.added) < want) || !sourceRoom || !budget(len(p.pl.added)) {
		// Wait for a pass with room rather than record a half placement.
		for _, id := range p.pl.added {
			p.pl.nodes[p.find(id)].load--
		}
		plan.Report.Deferred++
		p.unplan(plan, start)
		return
	}
	p.placed(seg, t, states, s, rf, plan, backfills)
}

// resume plans the in-place backfills of t's short or missing copies
// from the node src; when a cap stops one it plans none and returns false.
func (p *Planner) resume(t *trouble, states []copyState, src int, pol Policy, budget func(int) bool, plan *Plan, backfills *int) bool {
	seg := t.s
	rep := &plan.Report
	start := len(plan.Actions)
	for i, st := range states {
		if st != copyShort {
			continue
		}
		n := &p.pl.nodes[p.find(seg.Replicas[i])]
		s := &p.pl.nodes[src]
		if !budget(1) || (pol.MaxBackfillsPerBroker > 0 && (n.busy >= pol.MaxBackfillsPerBroker || s.busy >= pol.MaxBackfillsPerBroker)) {
			rep.Deferred++
			p.unplan(plan, start)
			return false
		}
		a := p.anomaly(t, seg.Replicas[i])
		plan.Actions = append(plan.Actions, Action{Op: ResumeShortCopy, Segment: *seg, Target: n.id, Source: s.id, From: a.size,
			State: t.fp, TargetState: p.prints[int(t.st)+i]})
		n.busy++
		s.busy++
		*backfills++
		rep.Backfills++
	}
	return true
}

// placed appends the actions of the placement p.pl just made for t: one
// backfill per added replica from s, the command, the deletions of the
// dropped latched or corrupt copies, and the failure of a kept lost
// replica.
func (p *Planner) placed(seg *meta.Segment, t *trouble, states []copyState, s *node, rf int, plan *Plan, backfills *int) {
	rep := &plan.Report
	for k, id := range p.pl.added {
		op, replaces := AddMissingReplica, meta.BrokerID(0)
		if k < len(p.pl.replaced) {
			op, replaces = ReplaceDeadReplica, p.pl.replaced[k]
			switch states[slices.Index(seg.Replicas, replaces)] {
			case copyLatched:
				op = ReplaceLatchedCopy
			case copyCorrupt:
				op = ReplaceCorruptCopy
			}
		}
		n := &p.pl.nodes[p.find(id)]
		plan.Actions = append(plan.Actions, Action{Op: op, Segment: *seg, Target: id, Source: s.id, Replaces: replaces, State: t.fp})
		n.busy++
		s.busy++
		*backfills++
		rep.Backfills++
	}
	if !meta.SameReplicas(p.pl.out, seg.Replicas) {
		cmd := meta.SetSegmentReplicas{ID: seg.ID, Expected: slices.Clone(seg.Replicas), Replicas: slices.Clone(p.pl.out)}
		plan.Actions = append(plan.Actions, Action{Op: SetReplicas, Segment: *seg, Command: cmd})
		plan.Commands = append(plan.Commands, cmd)
		rep.Commands++
		for _, r := range p.pl.replaced {
			if st := states[slices.Index(seg.Replicas, r)]; st == copyLatched || st == copyCorrupt {
				plan.Actions = append(plan.Actions, Action{Op: DeleteDroppedCopy, Segment: *seg, Target: r})
			}
		}
	}
	if len(p.pl.kept) > 0 && len(p.pl.out)-len(p.pl.kept) < rf {
		// Survivors beyond the factor make a kept lost replica surplus,
		// not a failure.
		p.fail(plan, seg, NoSpareBroker, slices.Clone(p.pl.kept))
	}
}

// copiesIn returns the replicas of seg whose copy is in state st.
func copiesIn(seg *meta.Segment, states []copyState, st copyState) []meta.BrokerID {
	var out []meta.BrokerID
	for i, s := range states {
		if s == st {
			out = append(out, seg.Replicas[i])
		}
	}
	return out
}

// lostCopies returns the replicas of seg whose copy is lost.
func lostCopies(seg *meta.Segment, states []copyState) []meta.BrokerID {
	var out []meta.BrokerID
	for i, st := range states {
		if st.lost() {
			out = append(out, seg.Replicas[i])
		}
	}
	return out
}

// noneKnownIntact reports whether every healthy copy of seg is either
// overrun (never settled and confirmed against the segment's checksum: a
// returned broker's copy, or a leftover adopted into the set while the
// segment was lost) or was refused as a backfill source by an earlier pass
// (Input.Refused, in force or lifted since), so that none is known intact.
// A segment lost last pass whose only sources are such copies (a change to
// another replica lifted their refusals) stays listed lost on this pass
// too, while the read is tried (a backfill from it verifies its checksum;
// a fully live segment's overrun copies are settled, which checks it too):
// the seed reports a loss on every pass while it lasts.
func (p *Planner) noneKnownIntact(seg *meta.Segment, states []copyState) bool {
	k, _ := slices.BinarySearchFunc(p.refused, seg.ID, func(r Refusal, id meta.SegmentID) int { return cmp.Compare(r.Segment, id) })
	found := false
	for i, st := range states {
		if !st.healthy() {
			continue
		}
		found = true
		if st == copyOverrun {
			continue
		}
		refused := false
		for j := k; j < len(p.refused) && p.refused[j].Segment == seg.ID; j++ {
			if p.refused[j].Source == seg.Replicas[i] {
				refused = true
				break
			}
		}
		if !refused {
			return false
		}
	}
	return found
}

// unplan removes the actions appended since start, undoing their counts.
func (p *Planner) unplan(plan *Plan, start int) {
	for _, a := range plan.Actions[start:] {
		if a.Op.IsBackfill() {
			p.pl.nodes[p.find(a.Target)].busy--
			p.pl.nodes[p.find(a.Source)].busy--
			plan.Report.Backfills--
		}
	}
	plan.Actions = plan.Actions[:start]
}

// fail appends a ReportFailed action and the matching Report entry; a
// segment with no readable intact copy is also reported lost.
func (p *Planner) fail(plan *Plan, seg *meta.Segment, r Reason, copies []meta.BrokerID) {
	plan.Actions = append(plan.Actions, Action{Op: ReportFailed, Segment: *seg, Reason: r, Copies: copies})
	rep := &plan.Report
	rep.Failed = append(rep.Failed, Failure{Segment: seg.ID, Reason: r, Copies: copies})
	if r != AllReplicasDead && r != NoIntactSource {
		return
	}
	_, acked := slices.BinarySearch(p.acked, seg.ID)
	rep.Lost = append(rep.Lost, LostSegment{Segment: seg.ID, StartOffset: seg.StartOffset, EndOffset: seg.EndOffset(),
		ByteSize: seg.ByteSize, Replicas: slices.Clone(seg.Replicas), Reason: r, Acknowledged: acked})
	rep.LostBytes += seg.ByteSize
	if acked {
		rep.LostAcknowledged++
	}
}

// unsettled adds t's overrun copies to the seed's unsettled list (P6.2:
// "A copy whose bytes RUN PAST the sealed byte_size is reported as
// :unsettled"), selectable when meets says the segment meets the seed's
// conditions. The exception (P6.5) is a copy settled on an earlier pass
// and not confirmed since (Input.Unconfirmed): it is listed again only
// when meets. Such a copy stays in plan.Unconfirmed while it is overrun or
// unknown this tick (its probe timed out, its broker suspect).
func (p *Planner) unsettled(t *trouble, states []copyState, meets bool, plan *Plan) {
	seg := t.s
	for i, st := range states {
		ref := CopyRef{seg.ID, seg.Replicas[i]}
		settled := false
		if len(p.unconf) > 0 {
			_, settled = slices.BinarySearchFunc(p.unconf, ref, cmpRefs)
		}
		if settled && (st == copyOverrun || st.unknown()) {
			plan.Unconfirmed = append(plan.Unconfirmed, ref)
		}
		if st == copyOverrun && (meets || !settled) {
			p.unset = append(p.unset, unsettledCopy{ref: ref, s: seg, print: p.prints[int(t.st)+i], selectable: meets})
		}
	}
}

// settle lists the unsettled copies in order and selects, round-robin from
// the cursor and bounded by the settle batch, those to settle and confirm
// among the selectable ones (their segment meets the seed's conditions).
func (p *Planner) settle(in Input, plan *Plan) {
	if len(p.unset) == 0 {
		return
	}
	slices.SortFunc(p.unset, func(a, b unsettledCopy) int { return cmpRefs(a.ref, b.ref) })
	rep := &plan.Report
	rep.Unsettled = make([]CopyRef, len(p.unset))
	for i, u := range p.unset {
		rep.Unsettled[i] = u.ref
	}
	batch := in.Policy.SettleBatch
	if batch == 0 {
		return
	}
	start, _ := slices.BinarySearchFunc(p.unset, in.SettleCursor, func(u unsettledCopy, c CopyRef) int {
		if u.ref.less(c) || u.ref == c {
			return -1
		}
		return 1
	})
	for k := 0; k < len(p.unset) && len(rep.Settling) < batch; k++ {
		u := &p.unset[(start+k)%len(p.unset)]
		if !u.selectable {
			continue
		}
		seg := u.s
		plan.Actions = append(plan.Actions,
			Action{Op: SettleOverrun, Segment: *seg, Target: u.ref.Broker, TargetState: u.print},
			Action{Op: ConfirmCopy, Segment: *seg, Target: u.ref.Broker})
		rep.Settling = append(rep.Settling, u.ref)
		plan.SettleCursor = u.ref
	}
}
