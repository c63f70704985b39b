package heal

import (
	"cmp"
	"slices"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// State is every piece of the heal core's memory that outlives a pass. It
// is a value: Planner.Step takes one and returns the next, the way a
// consensus core keeps all its protocol state to itself. The executor
// holds the current State and nothing else that decides anything.
type State struct {
	// Pass counts the passes of this State (Step increments it).
	Pass int `json:"pass"`
	// Cursor is where the next round-robin over unsettled copies starts.
	Cursor CopyRef `json:"cursor"`
	// Unconfirmed are the copies settled and not confirmed since, sorted
	// (see Input.Unconfirmed).
	Unconfirmed []CopyRef `json:"unconfirmed,omitempty"`
	// Seen are the brokers' last-seen times, sorted by broker.
	Seen []Seen `json:"seen,omitempty"`
	// Refused are the refusals in force (see Refusal).
	Refused []Refusal `json:"refused,omitempty"`
	// Fills count failed backfills per source and segment state, below
	// Policy.RefuseAfter.
	Fills []Fill `json:"fills,omitempty"`
	// Conflicts are the conflicts in force (see Conflict).
	Conflicts []Conflict `json:"conflicts,omitempty"`
	// Lost are the segments the last pass reported lost, sorted.
	Lost []meta.SegmentID `json:"lost,omitempty"`
	// Acknowledged are the lost segments an operator acknowledged, sorted.
	Acknowledged []meta.SegmentID `json:"acknowledged,omitempty"`
	// Avoid are the new-replica targets not to choose until a pass.
	Avoid []Avoidance `json:"avoid,omitempty"`
	// Release says an operator lifted the mass-failure hold (until its
	// condition clears); Held is the last pass's HoldReason.
	Release bool   `json:"release,omitempty"`
	Held    string `json:"held,omitempty"`
	// Leftovers remember the leftover copies seen (see LeftoverMemo),
	// sorted by copy.
	Leftovers []LeftoverMemo `json:"leftovers,omitempty"`
	// Drains mark where each decommission started (time, bytes left),
	// for its rate and ETA (lifecycle.go).
	Drains []DrainMark `json:"drains,omitempty"`
}

// Fill counts the failed backfills of one segment state from one source.
type Fill struct {
	Refusal
	Count int `json:"count"`
}

// Avoidance keeps Copy's broker from being chosen as a new replica of
// Copy's segment up to and including pass Until.
type Avoidance struct {
	Copy  CopyRef `json:"copy"`
	Until int     `json:"until"`
}

// NewTerm returns st as a new leadership term starts: the settle cursor,
// the unconfirmed copies, the refusals, the failure counts, the conflicts
// and the lost segments are forgotten (a new term tries each once more, as
// a new leader would); the last-seen times, the avoid list, the
// acknowledgements and a release are kept.
func (st State) NewTerm() State {
	st.Cursor, st.Unconfirmed = CopyRef{}, nil
	st.Refused, st.Fills, st.Conflicts, st.Lost = nil, nil, nil, nil
	return st
}

// Observation is what one tick saw, and what happened since the last
// pass: everything Step decides from besides the State.
type Observation struct {
	// View is the metadata of the pass.
	View *meta.View
	// Reports are this tick's valid probe reports.
	Reports []ProbeReport
	// AuthFailed are the brokers that answered but could not be
	// authenticated: seen, but with no report.
	AuthFailed []AuthFailure
	// Behind are the brokers that answered with metadata behind the
	// pass's index (ErrBehind): seen, but with no report.
	Behind []meta.BrokerID
	// Start is when probing started (a broker first watched is seen
	// then), Now when it ended (the time of the pass).
	Start, Now time.Time
	Policy     Policy
	// Executed is the previous pass's execution (nil: none); Step folds
	// it into the State before planning.
	Executed *Outcomes
	// Release and Acknowledge are what operators asked since the last
	// pass (pass.Coordinator.Release, pass.Coordinator.Acknowledge).
	Release     bool
	Acknowledge []meta.SegmentID
}

// Step is one pass of the core: it folds obs.Executed into st (refusals,
// failure counts, avoidances, conflicts, unconfirmed copies, brokers seen
// while executing),
// updates the last-seen times, plans, and returns the plan and the next
// State. st is not modified. The plan's Report.Events say what changed
// in the State (a hold started or lifted, a source refused, a conflict).
func (p *Planner) Step(st State, obs Observation) (Plan, State, error) {
	pol := obs.Policy
	next := st
	next.Pass = st.Pass + 1
	next.Seen = slices.Clone(st.Seen)
	var events []Event
	if obs.Executed != nil {
		answered := make(map[meta.BrokerID]bool, len(obs.Reports))
		for i := range obs.Reports {
			answered[obs.Reports[i].Broker] = true
		}
		next, events = next.Fold(obs.Executed, pol, answered)
	}
	for _, b := range obs.View.Brokers() {
		next.Seen = seenAt(next.Seen, b.ID, obs.Start, false)
	}
	for i := range obs.Reports {
		at := obs.Reports[i].At
		if at.IsZero() || at.After(obs.Now) {
			at = obs.Now
		}
		next.Seen = seenAt(next.Seen, obs.Reports[i].Broker, at, true)
	}
	for _, a := range obs.AuthFailed {
		next.Seen = seenAt(next.Seen, a.Broker, obs.Now, true)
	}
	for _, b := range obs.Behind {
		next.Seen = seenAt(next.Seen, b, obs.Now, true)
	}
	next.Release = next.Release || obs.Release
	acked := slices.Clone(next.Acknowledged)
	for _, id := range obs.Acknowledge {
		if _, ok := slices.BinarySearch(acked, id); !ok {
			acked = append(acked, id)
			slices.Sort(acked)
		}
	}
	in := Input{View: obs.View, Reports: obs.Reports, Start: obs.Start, Now: obs.Now, Policy: pol, SettleCursor: next.Cursor, Unconfirmed: next.Unconfirmed,
		Release: next.Release, Held: next.Held != "", Refused: next.Refused, Acknowledged: acked, Conflicts: next.Conflicts, Lost: next.Lost}
	for _, b := range obs.View.Brokers() {
		if i, ok := slices.BinarySearchFunc(next.Seen, b.ID, cmpSeen); ok {
			in.Seen = append(in.Seen, next.Seen[i])
		}
	}
	avoid := next.Avoid[:0:0]
	for _, a := range next.Avoid {
		if a.Until >= next.Pass {
			avoid = append(avoid, a)
			in.Avoid = append(in.Avoid, a.Copy)
		}
	}
	next.Avoid = avoid
	sortRefs(in.Avoid)
	plan, err := p.Plan(in)
	if err != nil {
		return Plan{}, st, err
	}
	held := plan.Report.HoldReason
	switch {
	case held != "" && next.Held == "":
		events = append(events, Event{Kind: EventHoldStarted, Detail: held})
	case held == "" && next.Held != "":
		events = append(events, Event{Kind: EventHoldLifted, Detail: next.Held})
	}
	if held == "" {
		next.Release = false // the hold cleared: a new one may arise
	}
	for _, b := range plan.Report.GraceRestarted {
		next.Seen = seenAt(next.Seen, b, obs.Now, true)
	}
	next.Held = held
	next.Drains = drainRates(next.Drains, &plan.Report, obs.Now)
	next.Cursor, next.Unconfirmed = plan.SettleCursor, plan.Unconfirmed
	next.Refused, next.Conflicts, next.Lost, next.Acknowledged = plan.Refused, plan.Conflicts, plan.Lost, plan.Acknowledged
	var refusedLeftovers []Refusal
	next.Leftovers, refusedLeftovers = leftovers(&plan, &obs, next.Leftovers, in.Refused, next.Pass)
	next.Refused = append(slices.Clip(next.Refused), refusedLeftovers...)
	plan.Report.AuthFailed = slices.Clone(obs.AuthFailed)
	plan.Report.Behind = slices.Clone(obs.Behind)
	plan.Report.Events = append(plan.Report.Events, events...)
	checkStep(&st, &obs, &plan, &next)
	return plan, next, nil
}

func cmpSeen(s Seen, b meta.BrokerID) int { return cmp.Compare(s.Broker, b) }

// seenAt records that b was seen at t in the sorted seen (only if b was
// never seen, unless always).
func seenAt(seen []Seen, b meta.BrokerID, t time.Time, always bool) []Seen {
	i, ok := slices.BinarySearchFunc(seen, b, cmpSeen)
	switch {
	case !ok:
		return slices.Insert(seen, i, Seen{Broker: b, At: t})
	case always:
		seen[i].At = t
	}
	return seen
}

// Fold applies the outcomes of the previous pass's execution to st: the
// decisions about what a failure means are made here, not by the
// executor. A source that refused (or failed RefuseAfter times in a row
// with the segment unchanged) is refused; the target of another failed
// new-replica backfill is avoided for AvoidPasses passes, unless its
// source did not answer this pass's probe (the failure is then the
// source's: a source killed mid-transfer must not take the only spare
// broker out of placement for AvoidPasses passes); a copy that answered
// ErrSealConflict is in conflict; a copy settled and not confirmed is
// unconfirmed. st's slices are not modified. answered are the brokers
// that answered this pass's probe. Step calls it first; a simulation calls
// it to read what a pass's outcomes mean for the next.
func (st State) Fold(out *Outcomes, pol Policy, answered map[meta.BrokerID]bool) (State, []Event) {
	var events []Event
	refuseAfter, avoidPasses := pol.refuseAfter(), pol.avoidPasses()
	st.Refused = slices.Clone(st.Refused)
	st.Conflicts = slices.Clone(st.Conflicts)
	st.Avoid = slices.Clone(st.Avoid)
	fills := map[Refusal]int{}
	for _, f := range st.Fills {
		fills[f.Refusal] = f.Count
	}
	executed := st.Pass - 1 // the pass whose outcomes these are
	// Sets of what st lists (and below, of what the plan backfilled),
	// built once: a scan per action was O(actions^2) when a pass's
	// 20,000 backfills all failed.
	conflicts, refused := map[Conflict]bool{}, map[Refusal]bool{}
	for _, cf := range st.Conflicts {
		conflicts[cf] = true
	}
	for _, rf := range st.Refused {
		refused[rf] = true
	}
	avoid := func(a *Action) {
		if a.Op.IsBackfill() && a.Op != ResumeShortCopy {
			st.Avoid = append(st.Avoid, Avoidance{Copy: CopyRef{a.Segment.ID, a.Target}, Until: executed + avoidPasses})
		}
	}
	for i := range out.Plan.Actions {
		a := &out.Plan.Actions[i]
		o := out.of(i)
		rf := refusal(*a)
		switch {
		case o.Result == SealConflicted:
			cf := Conflict{Segment: a.Segment.ID, Broker: a.Target, Version: a.Segment.Version, Seal: sealPrint(&a.Segment), State: a.TargetState}
			if !conflicts[cf] {
				conflicts[cf] = true
				st.Conflicts = append(st.Conflicts, cf)
				events = append(events, Event{Kind: EventSealConflict, Segment: a.Segment.ID, Broker: a.Target, Detail: a.Op.String() + ": " + o.Err})
			}
			avoid(a)
		case !a.Op.IsBackfill():
		case o.Result == Succeeded:
			delete(fills, rf)
		case o.Result == SourceRefused || o.Result == Failed && refuseAfter > 0 && fills[rf]+1 >= refuseAfter:
			delete(fills, rf)
			if !refused[rf] {
				refused[rf] = true
				st.Refused = append(st.Refused, rf)
				events = append(events, Event{Kind: EventSourceRefused, Segment: a.Segment.ID, Broker: a.Source, Detail: o.Err})
			}
		case o.Result == Failed:
			if refuseAfter > 0 {
				fills[rf]++
			}
			if answered[a.Source] {
				avoid(a)
			}
		case o.Result == NoDurableEnd:
			avoid(a)
		}
	}
	// Forget the counts of segments the plan did not backfill (healed,
	// lost, or changed).
	st.Fills = st.Fills[:0:0]
	backfilled := map[Refusal]bool{}
	if len(fills) > 0 {
		for i := range out.Plan.Actions {
			if a := &out.Plan.Actions[i]; a.Op.IsBackfill() {
				backfilled[refusal(*a)] = true
			}
		}
	}
	for rf, n := range fills {
		if backfilled[rf] {
			st.Fills = append(st.Fills, Fill{Refusal: rf, Count: n})
		}
	}
	slices.SortFunc(st.Fills, func(a, b Fill) int { return cmpRefusal(a.Refusal, b.Refusal) })
	for _, s := range out.Seen {
		st.Seen = seenAt(st.Seen, s.Broker, s.At, true)
	}
	st.Unconfirmed = unconfirmed(st.Unconfirmed, out)
	return st, events
}

// unconfirmed returns prev without the copies out confirmed and with
// those it settled but did not confirm, sorted; prev is not modified.
func unconfirmed(prev []CopyRef, out *Outcomes) []CopyRef {
	settled, confirmed := map[CopyRef]bool{}, map[CopyRef]bool{}
	for i := range out.Plan.Actions {
		a := &out.Plan.Actions[i]
		if out.of(i).Result != Succeeded {
			continue
		}
		switch a.Op {
		case SettleOverrun:
			settled[CopyRef{a.Segment.ID, a.Target}] = true
		case ConfirmCopy:
			confirmed[CopyRef{a.Segment.ID, a.Target}] = true
		}
	}
	if len(settled) == 0 && len(confirmed) == 0 {
		return prev
	}
	var next []CopyRef
	for _, r := range prev {
		if !confirmed[r] && !settled[r] {
			next = append(next, r)
		}
	}
	for r := range settled {
		if !confirmed[r] {
			next = append(next, r)
		}
	}
	sortRefs(next)
	return next
}

// refusal is the Refusal a failed backfill a would record.
func refusal(a Action) Refusal {
	return Refusal{Segment: a.Segment.ID, Source: a.Source, Version: a.Segment.Version, State: a.State}
}

// EventKind names a change of the core's State that a Report announces.
type EventKind uint8

const (
	// EventHoldStarted: the mass-failure brake holds; Detail is the reason.
	EventHoldStarted EventKind = iota + 1
	// EventHoldLifted: the hold's condition cleared; Detail was its reason.
	EventHoldLifted
	// EventSourceRefused: Broker refused as a backfill source for Segment
	// and is not read for it again until it changes; Detail is the error.
	EventSourceRefused
	// EventSealConflict: Broker's copy of Segment carries its own seal
	// disagreeing with the metadata; the segment is left alone until an
	// operator resolves it.
	EventSealConflict
)

var eventNames = [...]string{"unknown", "hold_started", "hold_lifted", "source_refused", "seal_conflict"}

// String returns the snake_case name of k.
func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "event"
}

// MarshalText implements encoding.TextMarshaler with the String form.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses the String form (a pass history read back); a name
// this build does not know reads as the zero EventKind ("unknown").
func (k *EventKind) UnmarshalText(b []byte) error {
	*k = EventKind(lenientName(eventNames[:], b, true, 0))
	return nil
}

// Event is one change of the core's State, reported (not logged) by the
// pass that made it.
type Event struct {
	Kind    EventKind      `json:"kind"`
	Segment meta.SegmentID `json:"segment,omitempty"`
	Broker  meta.BrokerID  `json:"broker,omitempty"`
	Detail  string         `json:"detail,omitempty"`
}
