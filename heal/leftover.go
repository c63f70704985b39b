package heal

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/malachi-log/malachi/meta"
)

// Leftover is what a broker observed of one copy its store holds outside
// the segment's replica set (at the probe's index): facts, not a verdict.
// ClassifyLeftover decides its Cause. Leftovers are never replicas: no
// count of the Report takes them for one.
type Leftover struct {
	Segment meta.SegmentID `json:"s"`
	// Size is the copy's stored size in bytes.
	Size int64 `json:"n,omitempty"`
	// Footer says a valid seal footer ends the copy.
	Footer bool `json:"ft,omitempty"`
	// DeleteErr is the error text (with its errno text) of the last
	// delete of this copy that failed on the broker; empty otherwise.
	DeleteErr string `json:"e,omitempty"`
}

// Validate checks l on its own: a valid segment id, a size not negative,
// a short DeleteErr.
func (l *Leftover) Validate() error {
	if err := l.Segment.Validate(); err != nil {
		return err
	}
	if l.Size < 0 {
		return fmt.Errorf("leftover %s: size %d is negative", l.Segment, l.Size)
	}
	if len(l.DeleteErr) > MaxWhy {
		return fmt.Errorf("leftover %s: delete error is %d bytes, at most %d", l.Segment, len(l.DeleteErr), MaxWhy)
	}
	return nil
}

// AddLeftover appends l to the report, cutting a DeleteErr longer than
// MaxWhy at a rune boundary.
func (r *ProbeReport) AddLeftover(l Leftover) {
	if len(l.DeleteErr) > MaxWhy {
		n := MaxWhy
		for n > 0 && !utf8.RuneStart(l.DeleteErr[n]) {
			n--
		}
		l.DeleteErr = l.DeleteErr[:n]
	}
	r.Leftovers = append(r.Leftovers, l)
}

// Cause says why a broker holds a copy outside its segment's replica set.
type Cause uint8

const (
	// CauseNone: not a leftover (the broker is in the set after all).
	CauseNone Cause = iota
	// ReturnedBroker: an intact-looking copy (a seal footer, above the
	// sealed size) of a sealed segment whose set no longer names the
	// broker: it came back after its replicas were replaced.
	ReturnedBroker
	// PartialBackfill: a copy of a sealed segment that ends at or below
	// its sealed size, or has no footer: a backfill that stalled or failed.
	PartialBackfill
	// FailedDelete: a delete of the copy failed on the broker
	// (Leftover.DeleteErr says why); it is retried with backoff.
	FailedDelete
	// FailedLoad: a copy of a segment unknown to the metadata, or of an
	// active segment whose set does not name the broker (a load that
	// failed before its segment was recorded or sealed).
	FailedLoad
)

var causeNames = [...]string{"none", "returned_broker", "partial_backfill", "failed_delete", "failed_load"}

// Causes are the causes a leftover can have, in report order.
var Causes = [...]Cause{ReturnedBroker, PartialBackfill, FailedDelete, FailedLoad}

// String returns the snake_case name of c.
func (c Cause) String() string {
	if c == CauseUnknown {
		return "unknown"
	}
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// MarshalText implements encoding.TextMarshaler with the String form.
func (c Cause) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// CauseUnknown is a cause this build does not know (a newer broker's),
// as UnmarshalText reads it.
const CauseUnknown Cause = math.MaxUint8

// UnmarshalText parses the String form; a name this build does not know
// reads as CauseUnknown, so that a report from a newer broker decodes.
func (c *Cause) UnmarshalText(b []byte) error {
	*c = Cause(lenientName(causeNames[:], b, false, uint8(CauseUnknown)))
	return nil
}

// ClassifyLeftover decides why broker holds l, given view. The checks run
// in this order: the broker in the set (CauseNone: the probe answered an
// older view); a failed delete; a segment unknown to the metadata or
// active (FailedLoad); at most the sealed size or no footer
// (PartialBackfill); otherwise ReturnedBroker.
func ClassifyLeftover(view *meta.View, broker meta.BrokerID, l *Leftover) Cause {
	seg, known := view.Segment(l.Segment)
	switch {
	case known && slices.Contains(seg.Replicas, broker):
		return CauseNone
	case l.DeleteErr != "":
		return FailedDelete
	case !known || !seg.Sealed:
		return FailedLoad
	case l.Size <= seg.ByteSize || !l.Footer:
		return PartialBackfill
	}
	return ReturnedBroker
}

// usableSource reports whether l, a leftover of the sealed seg, may serve
// as a backfill source: a footer and more bytes than the frames. The
// source verifies its checksum before it sends anything.
func usableSource(seg *meta.Segment, l *Leftover) bool {
	return seg.Sealed && l.Footer && l.Size > seg.ByteSize
}

// LeftoverGroup counts one broker's leftovers of one cause.
type LeftoverGroup struct {
	Broker meta.BrokerID `json:"broker"`
	Cause  Cause         `json:"cause"`
	Copies int           `json:"copies"`
	Bytes  int64         `json:"bytes"`
	// Err is, for FailedDelete, the error text of the first such copy (by
	// segment id).
	Err string `json:"err,omitempty"`
	// Segments are the first MaxLeftoverNames of them, sorted.
	Segments []meta.SegmentID `json:"segments,omitempty"`
}

// MaxLeftoverNames bounds LeftoverGroup.Segments.
const MaxLeftoverNames = 8

// leftoverBatch bounds the DeleteLeftoverCopy actions of one pass.
const leftoverBatch = 256

// maxLeftoverBackoff bounds the passes between two attempts to delete a
// leftover whose deletes keep failing.
const maxLeftoverBackoff = 64

// LeftoverMemo is heal's memory of one leftover copy: when it was first
// seen with its cause (the safety delay runs from there, and starts again
// when the cause changes: a copy seen as a failed load just before its
// broker went silent is a returned broker's when it comes back), how many
// deletes of it failed in a row, and the first pass a delete may be
// planned again.
type LeftoverMemo struct {
	Copy     CopyRef   `json:"copy"`
	Cause    Cause     `json:"cause,omitempty"`
	Since    time.Time `json:"since"`
	Failures int       `json:"failures,omitempty"`
	Retry    int       `json:"retry,omitempty"`
}

func (p Policy) leftoverDelay() time.Duration {
	if p.LeftoverDelay == 0 {
		return 2 * time.Minute
	}
	return p.LeftoverDelay
}

// leftovers is Step's last stage: it folds the previous pass's leftover
// deletions into memo (a failure backs the next attempt off, doubling in
// passes), classifies this pass's leftovers into plan.Report.Leftovers,
// plans a backfill of a lost segment from a usable leftover, and plans the
// DeleteLeftoverCopy actions that are safe (see safeToCollect). It returns
// the next memo, sorted, and the refusals of leftover sources to keep
// (the planner keeps only those of replicas).
func leftovers(plan *Plan, obs *Observation, memo []LeftoverMemo, refused []Refusal, pass int) ([]LeftoverMemo, []Refusal) {
	memo = slices.Clone(memo)
	if x := obs.Executed; x != nil {
		for i := range x.Plan.Actions {
			a := &x.Plan.Actions[i]
			if a.Op != DeleteLeftoverCopy {
				continue
			}
			k, ok := slices.BinarySearchFunc(memo, CopyRef{a.Segment.ID, a.Target}, cmpMemo)
			switch o := x.of(i); {
			case !ok:
			case o.Result == Succeeded:
				memo = slices.Delete(memo, k, k+1)
			case o.Result == Failed:
				memo[k].Failures++
				memo[k].Retry = pass + min(1<<min(memo[k].Failures, 6), maxLeftoverBackoff)
			}
		}
	}
	up := map[meta.BrokerID]*ProbeReport{}
	for i := range obs.Reports {
		up[obs.Reports[i].Broker] = &obs.Reports[i]
	}
	next := memo[:0:0]
	for _, m := range memo { // keep what silent brokers held: not seen is not gone
		if _, ok := up[m.Copy.Broker]; !ok {
			if _, reg := obs.View.Broker(m.Copy.Broker); reg {
				next = append(next, m)
			}
		}
	}
	rep := &plan.Report
	groups := map[[2]int]*LeftoverGroup{}
	deletes := 0
	ix := &planIndex{plan: plan, obs: obs}
	for i := range obs.Reports {
		r := &obs.Reports[i]
		for k := range r.Leftovers {
			l := &r.Leftovers[k]
			cause := ClassifyLeftover(obs.View, r.Broker, l)
			if cause == CauseNone {
				continue
			}
			ref := CopyRef{l.Segment, r.Broker}
			m := LeftoverMemo{Copy: ref, Cause: cause, Since: obs.Now}
			if j, ok := slices.BinarySearchFunc(memo, ref, cmpMemo); ok {
				m = memo[j]
				if m.Cause != cause && cause != FailedDelete && m.Cause != FailedDelete {
					m.Cause, m.Since = cause, obs.Now
				}
			}
			next = append(next, m)
			addGroup(groups, r.Broker, cause, l)
			if deletes < leftoverBatch && obs.Now.Sub(m.Since) >= obs.Policy.leftoverDelay() && pass >= m.Retry &&
				safeToCollect(plan, obs, up, ix, l.Segment) {
				seg, _ := obs.View.Segment(l.Segment)
				a := Action{Op: DeleteLeftoverCopy, Segment: meta.Segment{ID: l.Segment}, Target: r.Broker}
				if seg != nil {
					a.Segment = *seg
				}
				plan.Actions = append(plan.Actions, a)
				ix.add(&a)
				deletes++
			}
		}
	}
	rep.Leftovers = sortedGroups(groups)
	for _, g := range rep.Leftovers {
		rep.LeftoverCopies += g.Copies
		rep.LeftoverBytes += g.Bytes
	}
	rescue(plan, obs, up, ix, refused)
	slices.SortFunc(next, func(a, b LeftoverMemo) int { return cmpMemo(a, b.Copy) })
	return slices.CompactFunc(next, func(a, b LeftoverMemo) bool { return a.Copy == b.Copy }), leftoverRefusals(obs.View, refused)
}

// leftoverRefusals returns the refusals of refused whose source is
// outside its segment's set (a leftover that refused as a rescue source)
// while the segment's version is unchanged: the planner drops them, this
// term keeps them.
func leftoverRefusals(view *meta.View, refused []Refusal) []Refusal {
	var out []Refusal
	kept := map[Refusal]bool{}
	for _, rf := range refused {
		if seg, ok := view.Segment(rf.Segment); ok && seg.Version == rf.Version && !slices.Contains(seg.Replicas, rf.Source) &&
			!kept[rf] {
			kept[rf] = true
			out = append(out, rf)
		}
	}
	return out
}

func cmpMemo(m LeftoverMemo, c CopyRef) int {
	if c := cmp.Compare(m.Copy.Segment, c.Segment); c != 0 {
		return c
	}
	return cmp.Compare(m.Copy.Broker, c.Broker)
}

func addGroup(groups map[[2]int]*LeftoverGroup, b meta.BrokerID, cause Cause, l *Leftover) {
	key := [2]int{int(b), int(cause)}
	g := groups[key]
	if g == nil {
		g = &LeftoverGroup{Broker: b, Cause: cause}
		groups[key] = g
	}
	g.Copies++
	g.Bytes += l.Size
	g.Segments = append(g.Segments, l.Segment)
	if l.DeleteErr != "" && (g.Err == "" || l.Segment == slices.Min(g.Segments)) {
		g.Err = l.DeleteErr
	}
}

func sortedGroups(groups map[[2]int]*LeftoverGroup) []LeftoverGroup {
	var out []LeftoverGroup
	for _, g := range groups {
		slices.Sort(g.Segments)
		if len(g.Segments) > MaxLeftoverNames {
			g.Segments = g.Segments[:MaxLeftoverNames]
		}
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b LeftoverGroup) int {
		if c := cmp.Compare(a.Broker, b.Broker); c != 0 {
			return c
		}
		return cmp.Compare(a.Cause, b.Cause)
	})
	return out
}

// safeToCollect reports whether a leftover of id may be deleted this
// pass: no hold; a segment unknown to the metadata still unknown; else a
// sealed segment with at least the replication factor of replicas, each
// on a broker that answered this pass and reported nothing about it (its
// copy intact and confirmed: not short, missing, overrun, latched, timed
// out, corrupt), no conflict in force, and nothing else planned for it
// (not failed, lost, under-replicated, backfilled or settled).
func safeToCollect(plan *Plan, obs *Observation, up map[meta.BrokerID]*ProbeReport, ix *planIndex, id meta.SegmentID) bool {
	if plan.Report.HoldReason != "" {
		return false
	}
	seg, ok := obs.View.Segment(id)
	if !ok {
		return true
	}
	if !seg.Sealed || len(seg.Replicas) < obs.View.ReplicationFactor() {
		return false
	}
	for _, b := range seg.Replicas {
		if up[b] == nil || ix.fact(id, b) != nil {
			return false
		}
	}
	if ix.conflicted(id) {
		return false
	}
	return !ix.planned(id, DeleteLeftoverCopy)
}

// planIndex answers, per segment, what safeToCollect and rescue ask of
// the plan and the probe reports, each built once on first use: one pass
// over them instead of one per leftover or lost segment
// (O(leftovers x actions) at 20,000 actions).
type planIndex struct {
	plan      *Plan
	obs       *Observation
	ops       map[meta.SegmentID]uint64 // the ops planned for a segment, as bits 1<<Op
	facts     map[CopyRef]*Fact         // each copy's first fact
	conflicts map[meta.SegmentID]bool
	leftovers map[meta.SegmentID][]leftoverAt // the live brokers' leftovers, in report order
}

// leftoverAt is a leftover and the broker that reported it.
type leftoverAt struct {
	broker meta.BrokerID
	l      *Leftover
}

// planned reports whether the plan has an action on id of another op than
// except.
func (ix *planIndex) planned(id meta.SegmentID, except Op) bool {
	if ix.ops == nil {
		ix.ops = map[meta.SegmentID]uint64{}
		for i := range ix.plan.Actions {
			ix.add(&ix.plan.Actions[i])
		}
	}
	return ix.ops[id]&^(1<<except) != 0
}

// add records an action appended to the plan.
func (ix *planIndex) add(a *Action) {
	if ix.ops != nil {
		ix.ops[a.Segment.ID] |= 1 << a.Op
	}
}

// fact returns broker b's first fact about segment id, or nil.
func (ix *planIndex) fact(id meta.SegmentID, b meta.BrokerID) *Fact {
	if ix.facts == nil {
		ix.facts = map[CopyRef]*Fact{}
		for i := range ix.obs.Reports {
			r := &ix.obs.Reports[i]
			for k := range r.Facts {
				ref := CopyRef{r.Facts[k].Segment, r.Broker}
				if _, ok := ix.facts[ref]; !ok {
					ix.facts[ref] = &r.Facts[k]
				}
			}
		}
	}
	return ix.facts[CopyRef{id, b}]
}

func (ix *planIndex) conflicted(id meta.SegmentID) bool {
	if ix.conflicts == nil {
		ix.conflicts = map[meta.SegmentID]bool{}
		for _, c := range ix.plan.Conflicts {
			ix.conflicts[c.Segment] = true
		}
	}
	return ix.conflicts[id]
}

// leftoversOf returns the leftovers of id the live brokers reported.
func (ix *planIndex) leftoversOf(id meta.SegmentID) []leftoverAt {
	if ix.leftovers == nil {
		ix.leftovers = map[meta.SegmentID][]leftoverAt{}
		for i := range ix.obs.Reports {
			r := &ix.obs.Reports[i]
			for k := range r.Leftovers {
				l := &r.Leftovers[k]
				ix.leftovers[l.Segment] = append(ix.leftovers[l.Segment], leftoverAt{r.Broker, l})
			}
		}
	}
	return ix.leftovers[id]
}

// rescue plans, for each lost segment with a usable leftover on a live
// broker (the first by broker id) that has not refused for it this term,
// a ResumeShortCopy from the leftover of each short or missing replica on
// a live broker, or, with none, adopts the leftover in the place of a dead
// replica (adopt):
// the leftover may be the last intact copy. The segment stays reported
// lost this pass. A segment the planner already plans for (a lost one whose
// refused source is tried again) is left to it.
func rescue(plan *Plan, obs *Observation, up map[meta.BrokerID]*ProbeReport, ix *planIndex, refused []Refusal) {
	if plan.Report.HoldReason != "" && !plan.Report.HoldReleased || len(plan.Report.Lost) == 0 {
		return
	}
	refusedBy := map[CopyRef]bool{}
	for _, rf := range refused {
		refusedBy[CopyRef{rf.Segment, rf.Source}] = true
	}
	for _, lost := range plan.Report.Lost {
		seg, ok := obs.View.Segment(lost.Segment)
		if !ok || ix.planned(seg.ID, ReportFailed) {
			continue // the planner reads a replica again: no rescue beside it
		}
		src := leftoverSource(obs, seg, ix, refusedBy)
		if src == 0 {
			continue
		}
		resumed, n := false, len(plan.Actions)
		for _, b := range seg.Replicas {
			if up[b] == nil {
				continue
			}
			if f := ix.fact(seg.ID, b); f != nil {
				if a := Classify(seg, f); a.Kind == Short || a.Kind == Missing {
					plan.Actions = append(plan.Actions, Action{Op: ResumeShortCopy, Segment: *seg, Target: b, Source: src, From: a.Size})
					plan.Report.Backfills++
					resumed = true
				}
			}
		}
		if !resumed {
			adopt(plan, seg, src)
		}
		for i := n; i < len(plan.Actions); i++ {
			ix.add(&plan.Actions[i])
		}
	}
}

// adopt records src, a broker holding a usable leftover of the lost seg,
// in the place of a dead broker's replica: no backfill has a target then,
// and the leftover may be the last intact copy. A live broker's copy, even
// latched or corrupt, is never swapped out (it would become a leftover, and
// a later backfill placed on its broker would cut its damaged bytes, which
// an operator may still want). Nothing is deleted: the
// copy left out becomes a leftover itself, collected only once the
// segment is healthy; the next pass probes src's copy as a replica (a bad
// one is short, overrun or corrupt as any other). A set of one is left
// alone (it would keep no replica).
func adopt(plan *Plan, seg *meta.Segment, src meta.BrokerID) {
	if len(seg.Replicas) < 2 {
		return
	}
	out := -1
	for i, b := range seg.Replicas {
		if slices.Contains(plan.Report.Dead, b) {
			out = i
			break
		}
	}
	if out < 0 {
		return
	}
	set := slices.Clone(seg.Replicas)
	set[out] = src
	cmd := meta.SetSegmentReplicas{ID: seg.ID, Expected: slices.Clone(seg.Replicas), Replicas: set}
	plan.Actions = append(plan.Actions, Action{Op: SetReplicas, Segment: *seg, Command: cmd})
	plan.Commands = append(plan.Commands, cmd)
	plan.Report.Commands++
}

// leftoverSource returns the first live broker holding a usable leftover
// of seg that did not refuse as its source, or 0.
func leftoverSource(obs *Observation, seg *meta.Segment, ix *planIndex, refused map[CopyRef]bool) meta.BrokerID {
	var best meta.BrokerID
	for _, at := range ix.leftoversOf(seg.ID) {
		if !refused[CopyRef{seg.ID, at.broker}] && ClassifyLeftover(obs.View, at.broker, at.l) != CauseNone && usableSource(seg, at.l) &&
			(best == 0 || at.broker < best) {
			best = at.broker
		}
	}
	return best
}

// leftoverOutcome adds the outcome of a DeleteLeftoverCopy of ref to rep.
func leftoverOutcome(rep *Report, ref CopyRef, out Outcome) {
	switch out.Result {
	case Succeeded:
		rep.LeftoversDeleted = append(rep.LeftoversDeleted, ref)
	case Failed:
		rep.LeftoverErrors = append(rep.LeftoverErrors, Failure{Segment: ref.Segment, Copies: []meta.BrokerID{ref.Broker},
			Err: fmt.Sprintf("delete leftover copy on %d: %s", ref.Broker, out.Err)})
	}
}
