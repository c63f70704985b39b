package nemesis

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
)

// The nemesis's checker is pure: its inputs are what the nemesis observed
// (Observations), its output the violations found. Each property is one
// function, so that a test can make each fire on a crafted violation.

// Injected is one fault as it was really injected (a scheduled fault that
// could not be is not here: it is counted as not injected).
type Injected struct {
	Kind    FaultKind       `json:"kind"`
	Brokers []meta.BrokerID `json:"brokers"`
	// Copies are the copies a file fault damaged (segment on broker).
	Copies []heal.CopyRef `json:"copies,omitempty"`
	Start  time.Time      `json:"start"`
	End    time.Time      `json:"end"` // its undo began (zero: never)
	// DuringWrite names the segment whose write was in flight (begun and
	// not answered) when a kill was sent: the kill struck mid-write.
	DuringWrite meta.SegmentID `json:"during_write,omitempty"`
}

// PassObs is one heal pass read from a broker's pass history.
type PassObs struct {
	Leader meta.BrokerID `json:"leader"`
	Number uint64        `json:"number"` // the leader's pass counter
	// Started is a lower bound of the pass's start, when it sampled which
	// brokers report: the end of the leader's previous pass (zero: not
	// known, the pass is not judged by time). Ended is when it was
	// published (last_pass_at). A pass that backfills can run for seconds
	// after its sample, so neither alone says what it saw.
	Started time.Time   `json:"started"`
	Ended   time.Time   `json:"ended"`
	Report  heal.Report `json:"report"`
	// Unseen counts the passes of this leader between the previous
	// observed one and this that its history's bound dropped before they
	// were read (0 unless the reader fell that far behind).
	Unseen uint64 `json:"unseen"`
}

// SetObs is a segment's replica set as seen by a metadata poll.
type SetObs struct {
	At       time.Time       `json:"at"`
	Version  uint64          `json:"version"`
	Replicas []meta.BrokerID `json:"replicas"`
}

// QuiescentObs is one check at a quiescent point: every fault undone and
// the heal waited for. Healed false means the bound expired (Why says
// what was still wrong). Segments is the metadata then; Verified the
// result of reading every replica copy of the acknowledged segments
// ("" when its bytes matched the frames' CRCs and the segment checksum).
type QuiescentObs struct {
	Label    string                                      `json:"label"`
	Acked    []meta.SegmentID                            `json:"-"` // acknowledged by then
	At       time.Time                                   `json:"at"`
	Healed   bool                                        `json:"healed"`
	Why      string                                      `json:"why,omitempty"`
	Segments map[meta.SegmentID]meta.Segment             `json:"-"`
	Verified map[meta.SegmentID]map[meta.BrokerID]string `json:"-"`
	Running  map[meta.BrokerID]bool                      `json:"-"`
}

// Observations are everything the checker is given.
type Observations struct {
	RF        int
	Brokers   int
	Grace     time.Duration
	Tick      time.Duration
	HoldShare float64 // 0: heal.DefaultHoldShare (0.25)
	Acked     []meta.SegmentID
	Faults    []Injected
	Passes    []PassObs
	Sets      map[meta.SegmentID][]SetObs
	Checks    []QuiescentObs
	// Settle is added to grace and two ticks before a down broker must be
	// listed dead (a new leader's election, a poll's lag); 0: one second.
	Settle time.Duration
	// StepDown bounds how long after a partition is in force a broker cut
	// off from the majority may still publish a heal pass: its leader
	// lease runs out, its plugin steps down and aborts a pass in flight;
	// 0: Settle.
	StepDown time.Duration
}

func (o Observations) settle() time.Duration {
	if o.Settle == 0 {
		return time.Second
	}
	return o.Settle
}

func (o Observations) stepDown() time.Duration {
	if o.StepDown == 0 {
		return o.settle()
	}
	return o.StepDown
}

func (o Observations) slack() time.Duration {
	return o.Grace + 2*o.Tick + o.settle()
}

// Violation is one property broken.
type Violation struct {
	Property string `json:"property"`
	What     string `json:"what"`
}

func (v Violation) String() string { return v.Property + ": " + v.What }

// Check runs every property over o.
func Check(o Observations) []Violation {
	var out []Violation
	out = append(out, checkDurable(o)...)
	out = append(out, checkLastCopy(o)...)
	out = append(out, checkDeadReported(o)...)
	out = append(out, checkSetChanges(o)...)
	out = append(out, checkHold(o)...)
	out = append(out, checkMinority(o)...)
	out = append(out, checkFailuresReported(o)...)
	return out
}

// checkDurable: at every quiescent point the heal finished within its
// bound, and every acknowledged segment is in the metadata, sealed, with
// exactly RF replicas on running brokers, each copy read and verified.
func checkDurable(o Observations) []Violation {
	var out []Violation
	for _, q := range o.Checks {
		if !q.Healed {
			out = append(out, Violation{"healed", fmt.Sprintf("%s: not healthy within the bound: %s", q.Label, q.Why)})
		}
		for _, id := range q.Acked {
			seg, ok := q.Segments[id]
			switch {
			case !ok:
				out = append(out, Violation{"durable", fmt.Sprintf("%s: acknowledged segment %s is not in the metadata", q.Label, id)})
				continue
			case !seg.Sealed:
				out = append(out, Violation{"durable", fmt.Sprintf("%s: acknowledged segment %s is not sealed", q.Label, id)})
				continue
			case len(seg.Replicas) != o.RF:
				out = append(out, Violation{"durable", fmt.Sprintf("%s: acknowledged segment %s has %d replicas %v, want %d", q.Label, id, len(seg.Replicas), seg.Replicas, o.RF)})
			}
			for _, b := range seg.Replicas {
				why, read := q.Verified[id][b]
				switch {
				case q.Running != nil && !q.Running[b]:
					out = append(out, Violation{"durable", fmt.Sprintf("%s: segment %s's replica on broker %d, which is not running", q.Label, id, b)})
				case !read:
					out = append(out, Violation{"durable", fmt.Sprintf("%s: segment %s's copy on broker %d was not read", q.Label, id, b)})
				case why != "":
					out = append(out, Violation{"durable", fmt.Sprintf("%s: segment %s's copy on broker %d: %s", q.Label, id, b, why)})
				}
			}
		}
	}
	return out
}

// setAt is the last replica set of seg seen at or before t (nil: none).
func setAt(sets []SetObs, t time.Time) []meta.BrokerID {
	var cur []meta.BrokerID
	for _, s := range sets {
		if s.At.After(t) {
			break
		}
		cur = s.Replicas
	}
	return cur
}

// damagedAt: the copies the nemesis had damaged and the cluster had not
// yet replaced by t: a copy is damaged from its fault until the segment's
// replica set is seen without that broker, or a quiescent point passes
// (where every copy was verified).
func damagedAt(o Observations, seg meta.SegmentID, t time.Time) map[meta.BrokerID]bool {
	out := map[meta.BrokerID]bool{}
	for _, f := range o.Faults {
		if f.Start.After(t) {
			continue
		}
		var hit []meta.BrokerID
		for _, c := range f.Copies {
			if c.Segment == seg {
				hit = append(hit, c.Broker)
			}
		}
		if f.Kind == harness.KindSwap {
			hit = append(hit, f.Brokers...)
		}
		for _, b := range hit {
			healed := resumedAfter(o, heal.CopyRef{Segment: seg, Broker: b}, f.Start, t)
			for _, q := range o.Checks {
				if q.At.After(f.Start) && !q.At.After(t) && q.Healed {
					healed = true
				}
			}
			for _, s := range o.Sets[seg] {
				if s.At.After(f.Start) && !s.At.After(t) && !slices.Contains(s.Replicas, b) {
					healed = true
				}
			}
			if !healed {
				out[b] = true
			}
		}
	}
	return out
}

// resumedAfter says whether a pass that started after from and ended by
// to backfilled copy c in place (heal.Report.Resumed): its commit verified
// it against the sealed segment, so a fault before it no longer counts.
func resumedAfter(o Observations, c heal.CopyRef, from, to time.Time) bool {
	for _, p := range o.Passes {
		if p.Started.After(from) && !p.Ended.After(to) && slices.Contains(p.Report.Resumed, c) {
			return true
		}
	}
	return false
}

// checkLastCopy: no pass deleted a copy of a segment while it was its
// last intact one: the same pass reports the segment lost without
// recording a new set for it, or every other broker of its replica set
// then held a copy the nemesis had damaged and heal had not backfilled
// since. A lost segment's copy deleted by the pass that recorded its new
// set is heal's invariant 6 at work: a segment lost at the plan (no copy
// known intact) is still read from, and a verified replacement recorded
// lets the latched or corrupt copy go.
func checkLastCopy(o Observations) []Violation {
	var out []Violation
	for _, p := range o.Passes {
		for _, del := range p.Report.Deleted {
			recorded := slices.ContainsFunc(p.Report.Ready, func(r meta.SetSegmentReplicas) bool { return r.ID == del.Segment })
			for _, l := range p.Report.Lost {
				if l.Segment == del.Segment && !recorded {
					out = append(out, Violation{"last-copy", fmt.Sprintf("pass %d of leader %d deleted %s's copy on broker %d while reporting it lost", p.Number, p.Leader, del.Segment, del.Broker)})
				}
			}
			set := setAt(o.Sets[del.Segment], p.Ended)
			if set == nil {
				continue // never seen: nothing to judge by
			}
			bad := damagedAt(o, del.Segment, p.Ended)
			intact := 0
			for _, b := range set {
				if b != del.Broker && !bad[b] {
					intact++
				}
			}
			if intact == 0 {
				out = append(out, Violation{"last-copy", fmt.Sprintf("pass %d of leader %d (ended %s) deleted %s's copy on broker %d while its replica set %v held no other intact copy",
					p.Number, p.Leader, p.Ended.Format(time.RFC3339Nano), del.Segment, del.Broker, set)})
			}
		}
	}
	return out
}

// within says whether pass p surely sampled the brokers while fault f
// held: it started (at the earliest) slack after f began and was
// published before f's undo began.
func within(p PassObs, f Injected, slack time.Duration) bool {
	if p.Started.IsZero() || p.Started.Before(f.Start.Add(slack)) {
		return false
	}
	return f.End.IsZero() || !p.Ended.After(f.End)
}

// checkDeadReported: every broker the nemesis kept down is listed dead
// on every pass that started more than grace + two ticks (and the settle
// slack) after it went down and was published before it came back. A pass
// of a leader that was itself down is not judged. A mass-failure hold
// that lifts on its own restarts the grace of the brokers still missing
// (heal.Report.GraceRestarted): that pass and the leader's next are judged
// from the pass that restarted it, as heal counts.
func checkDeadReported(o Observations) []Violation {
	var out []Violation
	slack := o.slack()
	for _, p := range o.Passes {
		for _, f := range o.Faults {
			if !f.Kind.Down() || f.Kind == harness.KindQuorumLoss {
				continue
			}
			if !within(p, f, slack) {
				continue
			}
			for _, b := range f.Brokers {
				if b == p.Leader || slices.Contains(p.Report.Dead, b) {
					continue
				}
				if r, ok := graceRestarted(o, p, b); ok && p.Started.Before(r.Add(slack)) {
					continue
				}
				out = append(out, Violation{"reported", fmt.Sprintf("pass %d of leader %d (started %s) does not list broker %d dead, down by %s since %s",
					p.Number, p.Leader, p.Started.Format(time.RFC3339Nano), b, f.Kind, f.Start.Format(time.RFC3339Nano))})
			}
		}
	}
	return out
}

// graceRestarted is when the latest pass of p's leader up to p that
// restarted b's grace delay began.
func graceRestarted(o Observations, p PassObs, b meta.BrokerID) (time.Time, bool) {
	var at time.Time
	found := false
	for _, q := range o.Passes {
		if q.Leader == p.Leader && q.Number <= p.Number && slices.Contains(q.Report.GraceRestarted, b) && !q.Started.Before(at) {
			at, found = q.Started, true
		}
	}
	return at, found
}

// losses counts the faults that hit a replica of seg: a fault on a broker
// while its replica set (as seen) named it, or on the copy itself. A
// restart counts: its broker may be gone longer than the grace delay. A
// segment first seen with fewer than RF replicas counts each missing one.
// A fault that keeps its broker down lasts, for heal, until a pass lists
// the broker neither dead nor suspect (backAt), not until its undo: a
// broker restarted on an empty data directory answers no probe until its
// metadata has caught up, and a segment placed on it meanwhile loses that
// replica as surely as one placed before the fault.
func losses(o Observations, seg meta.SegmentID) int {
	n := 0
	sets := o.Sets[seg]
	if len(sets) > 0 {
		// Born short: the write sealed it on the replicas that took it
		// (the others were down); each missing one is a loss.
		n += max(0, o.RF-len(sets[0].Replicas))
	}
	for _, f := range o.Faults {
		for _, c := range f.Copies {
			if c.Segment == seg {
				n++
			}
		}
		if len(f.Copies) > 0 {
			continue
		}
		for _, b := range f.Brokers {
			end := f.End
			if f.Kind.Down() {
				end = backAt(o, b, f.End)
			}
			if end.IsZero() {
				end = time.Now()
			}
			hit := slices.Contains(setAt(sets, f.Start), b)
			for _, s := range sets {
				if s.At.After(f.Start) && s.At.Before(end.Add(o.Grace)) && slices.Contains(s.Replicas, b) {
					hit = true
				}
			}
			if hit {
				n++
			}
		}
	}
	return n
}

// backAt is when heal saw broker b back after a fault that kept it down
// was undone at undo: the end of the first pass started after undo that
// lists b neither dead nor suspect (b's own passes count: it leads). Zero
// while no such pass was seen (or the fault was never undone).
func backAt(o Observations, b meta.BrokerID, undo time.Time) time.Time {
	if undo.IsZero() {
		return time.Time{}
	}
	for _, p := range o.Passes {
		if p.Started.Before(undo) {
			continue
		}
		if p.Leader == b || !slices.Contains(p.Report.Dead, b) && !slices.Contains(p.Report.Suspect, b) {
			return p.Ended
		}
	}
	return time.Time{}
}

// checkSetChanges: no segment's replica set changed (as a set) more often
// than its losses require: each loss allows two changes (a replica added,
// the lost one dropped). The polls may merge changes, so the count seen
// is a lower bound.
func checkSetChanges(o Observations) []Violation {
	var out []Violation
	ids := make([]meta.SegmentID, 0, len(o.Sets))
	for id := range o.Sets {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		changes := 0
		sets := o.Sets[id]
		for i := 1; i < len(sets); i++ {
			if !harness.SameSet(sets[i-1].Replicas, sets[i].Replicas) {
				changes++
			}
		}
		if l := losses(o, id); changes > 2*l {
			out = append(out, Violation{"set-changes", fmt.Sprintf("segment %s's replica set changed %d times for %d losses (at most %d): %s", id, changes, l, 2*l, fmtSets(sets))})
		}
	}
	return out
}

func fmtSets(sets []SetObs) string {
	s := ""
	for i, o := range sets {
		if i > 0 && harness.SameSet(sets[i-1].Replicas, o.Replicas) {
			continue
		}
		s += fmt.Sprintf(" v%d%v", o.Version, o.Replicas)
	}
	return s
}

// checkHold: a pass that started while more than hold_share of the
// brokers (and at least two) had been down together — their faults began
// within half a grace window of each other, at least grace + two ticks and
// a second before the pass — reports a hold (or a released one).
func checkHold(o Observations) []Violation {
	var out []Violation
	share := o.HoldShare
	if share == 0 {
		share = 0.25
	}
	if share < 0 || o.Brokers == 0 {
		return nil
	}
	slack := o.slack()
	for _, p := range o.Passes {
		type down struct {
			b  meta.BrokerID
			at time.Time
		}
		var ds []down
		for _, f := range o.Faults {
			if !f.Kind.Down() || !within(p, f, slack) {
				continue
			}
			for _, b := range f.Brokers {
				ds = append(ds, down{b, f.Start})
			}
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i].at.Before(ds[j].at) })
		// The largest group within grace/2 of each other.
		best := 0
		for i := range ds {
			n := 0
			for j := i; j < len(ds) && ds[j].at.Sub(ds[i].at) <= o.Grace/2; j++ {
				n++
			}
			best = max(best, n)
		}
		if best >= 2 && float64(best) > share*float64(o.Brokers) && p.Report.HoldReason == "" && !p.Report.HoldReleased {
			out = append(out, Violation{"hold", fmt.Sprintf("pass %d of leader %d (started %s): %d of %d brokers down together (more than hold_share %.2f) and no hold reported",
				p.Number, p.Leader, p.Started.Format(time.RFC3339Nano), best, o.Brokers, share)})
		}
	}
	return out
}

// majorityWindow is how long a cut must last past the step-down bound for
// the majority side to be required to publish a pass meanwhile.
const majorityWindow = 2 * time.Second

// checkMinority: a broker cut off from the majority (isolated, or on a
// partition's minority side) stops coordinating: it publishes no heal
// pass later than StepDown after the cut and before its undo began.
// The majority side coordinates: when the cut lasted StepDown plus
// majorityWindow and the majority kept a quorum (no other fault keeping
// brokers down overlapped it), a broker of the majority published a pass
// after StepDown and at most slack after the undo (its heal, that the
// cut-off brokers are listed dead, is checkDeadReported's).
func checkMinority(o Observations) []Violation {
	var out []Violation
	bound := o.stepDown()
	for _, f := range o.Faults {
		if !f.Kind.CutOff() {
			continue
		}
		from := f.Start.Add(bound)
		majority := false
		for _, p := range o.Passes {
			if !p.Ended.After(from) {
				continue
			}
			if slices.Contains(f.Brokers, p.Leader) {
				if f.End.IsZero() || !p.Ended.After(f.End) {
					out = append(out, Violation{"minority", fmt.Sprintf("broker %d, cut off by %s %v since %s, published pass %d at %s (more than %v after the cut)",
						p.Leader, f.Kind, f.Brokers, f.Start.Format(time.RFC3339Nano), p.Number, p.Ended.Format(time.RFC3339Nano), bound)})
				}
				continue
			}
			if !f.End.IsZero() && !p.Ended.After(f.End.Add(o.slack())) {
				majority = true
			}
		}
		if !majority && !f.End.IsZero() && f.End.Sub(f.Start) >= bound+majorityWindow && keepsQuorum(o, f) {
			out = append(out, Violation{"majority", fmt.Sprintf("no broker outside %v published a heal pass while %s cut them off (%s to %s, the leader's step-down bound %v)",
				f.Brokers, f.Kind, f.Start.Format(time.RFC3339Nano), f.End.Format(time.RFC3339Nano), bound)})
		}
	}
	return out
}

// keepsQuorum says whether the brokers outside cut's minority, less those
// other faults kept down while it held, are a majority of o.Brokers.
func keepsQuorum(o Observations, cut Injected) bool {
	gone := map[meta.BrokerID]bool{}
	for _, b := range cut.Brokers {
		gone[b] = true
	}
	for _, f := range o.Faults {
		overlaps := f.Start.Before(cut.End) && (f.End.IsZero() || f.End.After(cut.Start))
		if !overlaps || len(f.Copies) > 0 || f.Kind == harness.KindDiskFull {
			continue
		}
		for _, b := range f.Brokers {
			gone[b] = true
		}
	}
	return o.Brokers-len(gone) > o.Brokers/2
}

// persistentReasons are the failures that last while their cause does
// (planning failures); backfill_failed and command_failed are one
// attempt's outcome, reported once (the next pass plans it again).
var persistentReasons = []heal.Reason{heal.AllReplicasDead, heal.NoSpareBroker, heal.NoIntactSource, heal.SealConflict}

// failures are what pass p reports failed (persistent reasons) or lost,
// as "segment reason" keys ("lost" for Report.Lost).
func failures(p PassObs) map[string]meta.SegmentID {
	out := map[string]meta.SegmentID{}
	for _, f := range p.Report.Failed {
		if slices.Contains(persistentReasons, f.Reason) {
			out[string(f.Segment)+" "+f.Reason.String()] = f.Segment
		}
	}
	for _, l := range p.Report.Lost {
		out[string(l.Segment)+" lost"] = l.Segment
	}
	return out
}

// actedOn says whether p's report did anything to seg (a change that may
// end a failure).
func actedOn(p PassObs, seg meta.SegmentID) bool {
	r := p.Report
	if slices.Contains(r.Healed, seg) || slices.Contains(r.Stale, seg) {
		return true
	}
	for _, l := range [][]heal.CopyRef{r.Resumed, r.Settled, r.Confirmed, r.Deleted} {
		if slices.ContainsFunc(l, func(c heal.CopyRef) bool { return c.Segment == seg }) {
			return true
		}
	}
	return slices.ContainsFunc(r.Failed, func(f heal.Failure) bool { return f.Segment == seg })
}

// quietBetween says whether nothing that may change a failure happened
// from a to b: no fault began or was undone, and seg's replica set was
// not seen to change.
func quietBetween(o Observations, seg meta.SegmentID, a, b time.Time) bool {
	in := func(t time.Time) bool { return !t.IsZero() && !t.Before(a) && !t.After(b) }
	for _, f := range o.Faults {
		if in(f.Start) || in(f.End) {
			return false
		}
	}
	return harness.SameSet(setAt(o.Sets[seg], a), setAt(o.Sets[seg], b))
}

// checkFailuresReported: a failure (a segment failed for a persistent
// reason) or a loss is reported on every pass while it is present. The
// checker cannot see a failure's cause, so it judges what it can: a
// failure a leader reports on two of its passes, with nothing between
// them that could have ended and renewed it (no fault began or was
// undone, the replica set unchanged, no pass between acted on the
// segment), was present throughout, and every pass of that leader between
// them must report it too.
func checkFailuresReported(o Observations) []Violation {
	var out []Violation
	byLeader := map[meta.BrokerID][]PassObs{}
	for _, p := range o.Passes {
		byLeader[p.Leader] = append(byLeader[p.Leader], p)
	}
	for _, leader := range slices.Sorted(maps.Keys(byLeader)) {
		ps := byLeader[leader]
		for i := 0; i < len(ps); i++ {
			fs := failures(ps[i])
			for _, key := range slices.Sorted(maps.Keys(fs)) {
				seg := fs[key]
				// The next pass that reports it again, and the ones between.
				for j := i + 1; j < len(ps); j++ {
					if _, again := failures(ps[j])[key]; !again {
						continue
					}
					if j > i+1 && quietBetween(o, seg, ps[i].Ended, ps[j].Ended) && !slices.ContainsFunc(ps[i+1:j], func(q PassObs) bool { return actedOn(q, seg) }) {
						out = append(out, Violation{"failure-reported", fmt.Sprintf("leader %d reported %s on passes %d and %d but not on pass %d between them (nothing changed that could end it)",
							leader, key, ps[i].Number, ps[j].Number, ps[i+1].Number)})
					}
					break
				}
			}
		}
	}
	return out
}
