package heal

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// Report is what one pass found and, once the executor has executed the
// plan, what it did. It is a value for metrics, logs and the CLI.
type Report struct {
	// Index is the snapshot index of the pass.
	Index uint64 `json:"index"`
	// Segments counts every segment in the snapshot; Sealed and Active
	// split it. Active segments are left alone.
	Segments int `json:"segments"`
	Sealed   int `json:"sealed"`
	Active   int `json:"active"`
	// UnderReplicated counts sealed segments with fewer healthy copies
	// than the replication factor (dead, suspect, latched, corrupt, short
	// or missing copies, copies refused as a source or in conflict, or a
	// short set). A copy whose own probe timed out is unknown this tick,
	// not lost: it counts as neither.
	UnderReplicated int `json:"under_replicated"`
	// Anomalies counts the probe anomalies that matched an assigned copy.
	Anomalies int `json:"anomalies"`
	// Dead and Suspect are the registered brokers that are not up this
	// tick, past and within the grace delay.
	Dead    []meta.BrokerID `json:"dead,omitempty"`
	Suspect []meta.BrokerID `json:"suspect,omitempty"`
	// Backfills and Commands count the planned actions.
	Backfills int `json:"backfills"`
	Commands  int `json:"commands"`
	// Deferred counts segments whose repair waits for a later pass: caps
	// reached, or a replica within its grace delay.
	Deferred int `json:"deferred"`
	// Failed lists every segment that could not be healed, on every pass
	// until it is: planning failures first, then execution failures.
	Failed []Failure `json:"failed,omitempty"`
	// Lost lists, once per pass and on every pass until it heals, each
	// sealed segment with no intact copy that can be read (its Failed
	// entry says AllReplicasDead or NoIntactSource), in risk order.
	// LostBytes sums their ByteSize; LostAcknowledged counts those an
	// operator acknowledged (they stay listed). len(Lost) and LostBytes are
	// the lost-segments and lost-bytes gauges.
	Lost             []LostSegment `json:"lost,omitempty"`
	LostBytes        int64         `json:"lost_bytes,omitempty"`
	LostAcknowledged int           `json:"lost_acknowledged,omitempty"`
	// Refused counts the copies not read from this pass because they
	// refused as a backfill source on an earlier attempt and nothing about
	// their segment changed since (see Refusal).
	Refused int `json:"refused,omitempty"`
	// Unsettled is the seed's unsettled list: every overrun copy not yet
	// confirmed, but a copy settled on an earlier pass (State.Unconfirmed)
	// on a pass failing the seed's conditions for its segment (see
	// doc.go). Settling are the ones this pass selected: round-robin,
	// bounded by the settle batch, among those whose segment meets the
	// conditions.
	Unsettled []CopyRef `json:"unsettled,omitempty"`
	Settling  []CopyRef `json:"settling,omitempty"`
	// HoldReason is set when the mass-failure brake holds this pass's
	// backfills and placements of new replicas; empty otherwise.
	HoldReason string `json:"hold_reason,omitempty"`
	// AuthFailed are the brokers whose probe this pass failed on
	// credentials (ErrUnauthenticated: another CA, a certificate naming
	// another broker, an expired one, on either side). They are not
	// counted dead for it, and are neither sources nor targets.
	AuthFailed []AuthFailure `json:"auth_failed,omitempty"`
	// Behind are the brokers that answered this pass's probe with
	// metadata behind its index (ErrBehind): seen, not dead, their copies
	// unknown this pass (suspect), neither sources nor targets.
	Behind []meta.BrokerID `json:"behind,omitempty"`
	// HoldReleased says an operator lifted the hold named by HoldReason
	// for this pass: backfills and placement went ahead.
	HoldReleased bool `json:"hold_released,omitempty"`
	// GraceRestarted are the brokers still missing on the pass where a
	// hold lifted on its own (some of its missing brokers answered, as
	// when a network split heals and its brokers come back over a few
	// passes): they count as suspect on this pass and their grace delay
	// starts again from it, so that one failure is not healed twice (the
	// brokers that return a little later keep their replicas).
	GraceRestarted []meta.BrokerID `json:"grace_restarted,omitempty"`

	// Execution results, filled by the executor.

	// Healed lists the segments whose new replica set was recorded, or
	// whose short copies were all resumed, and that the plan did not also
	// report failed (a set that merely moves a kept lost replica behind
	// the others is recorded, not healed).
	Healed []meta.SegmentID `json:"healed,omitempty"`
	// Resumed lists the short or missing copies backfilled in place.
	Resumed []CopyRef `json:"resumed,omitempty"`
	// Settled, Confirmed and Deleted list the copies acted on.
	Settled   []CopyRef `json:"settled,omitempty"`
	Confirmed []CopyRef `json:"confirmed,omitempty"`
	Deleted   []CopyRef `json:"deleted,omitempty"`
	// Stale lists the segments whose command found a different replica
	// set; they are planned again next pass.
	Stale []meta.SegmentID `json:"stale,omitempty"`
	// BytesCopied sums the bytes the backfills transferred.
	BytesCopied int64 `json:"bytes_copied"`
	// Returned lists the segments whose backfills were cancelled because a
	// dead replica they replaced came back with an intact copy; their
	// replica set was left as it was. BytesSaved estimates the transfer
	// avoided (the cancelled backfills' sizes less what they had copied).
	Returned   []meta.SegmentID `json:"returned,omitempty"`
	BytesSaved int64            `json:"bytes_saved,omitempty"`
	// Ready are the commands whose backfills all Succeeded, in plan
	// order (on an aborted pass, only those): what pass.Coordinator.HealSealed
	// returned for the caller to apply (pass.Healing.Commands, the
	// seed's :set_segment_replicas commands). Healed, Stale and Failed say
	// what the control plane made of them.
	Ready []meta.SetSegmentReplicas `json:"ready,omitempty"`
	// Moved lists the segments whose replica set was recorded by a
	// decommission's move (MoveReplica) or the rebalancer's
	// (RebalanceReplica): moved, not healed.
	Moved []meta.SegmentID `json:"moved,omitempty"`
	// Decommission is the progress of each decommissioning broker, by
	// id; Maintenance the brokers in a maintenance window, and
	// MaintenanceFloor the segments healed in spite of one (lifecycle.go).
	Decommission     []Drain            `json:"decommission,omitempty"`
	Maintenance      []Maintenance      `json:"maintenance,omitempty"`
	MaintenanceFloor []MaintenanceFloor `json:"maintenance_floor,omitempty"`
	// Rebalance is what the rebalancer saw and planned (rebalance.go);
	// nil when Policy.Rebalance is off. Its moves, once recorded, are in
	// Moved.
	Rebalance *Rebalance `json:"rebalance,omitempty"`
	// Events are the changes of the core's memory this pass made (see
	// Event), in the order made.
	Events []Event `json:"events,omitempty"`
	// Leftovers count, per broker and cause, the copies brokers hold
	// outside their segment's replica set (never counted as replicas);
	// LeftoverCopies and LeftoverBytes sum them. LeftoversDeleted lists
	// those this pass deleted, LeftoverErrors the deletes that failed.
	Leftovers        []LeftoverGroup `json:"leftovers,omitempty"`
	LeftoverCopies   int             `json:"leftover_copies,omitempty"`
	LeftoverBytes    int64           `json:"leftover_bytes,omitempty"`
	LeftoversDeleted []CopyRef       `json:"leftovers_deleted,omitempty"`
	LeftoverErrors   []Failure       `json:"leftover_errors,omitempty"`
	// Took is how long the pass took, on the executor's clock.
	Took time.Duration `json:"took,omitempty"`
	// Aborted says the pass stopped early (leadership lost): what it
	// lists was done, the rest was not started.
	Aborted bool `json:"aborted,omitempty"`
}

// IsLost reports whether seg is in r.Lost.
func (r *Report) IsLost(seg meta.SegmentID) bool {
	for i := range r.Lost {
		if r.Lost[i].Segment == seg {
			return true
		}
	}
	return false
}

// DrainOf returns broker b's decommission progress this pass, or nil
// when b is not decommissioning.
func (r *Report) DrainOf(b meta.BrokerID) *Drain {
	for i := range r.Decommission {
		if r.Decommission[i].Broker == b {
			return &r.Decommission[i]
		}
	}
	return nil
}

// FailedReason returns the reason seg failed this pass, or ReasonNone.
func (r *Report) FailedReason(seg meta.SegmentID) Reason {
	for _, f := range r.Failed {
		if f.Segment == seg {
			return f.Reason
		}
	}
	return ReasonNone
}

// String is a one-line summary for logs.
func (r Report) String() string {
	s := fmt.Sprintf("index=%d segments=%d sealed=%d active=%d under_replicated=%d anomalies=%d backfills=%d commands=%d deferred=%d failed=%d unsettled=%d settling=%d healed=%d resumed=%d settled=%d confirmed=%d deleted=%d stale=%d bytes_copied=%d",
		r.Index, r.Segments, r.Sealed, r.Active, r.UnderReplicated, r.Anomalies, r.Backfills, r.Commands, r.Deferred,
		len(r.Failed), len(r.Unsettled), len(r.Settling), len(r.Healed), len(r.Resumed), len(r.Settled), len(r.Confirmed), len(r.Deleted), len(r.Stale), r.BytesCopied)
	if len(r.Lost) > 0 {
		s += fmt.Sprintf(" lost=%d lost_bytes=%d lost_acknowledged=%d", len(r.Lost), r.LostBytes, r.LostAcknowledged)
	}
	if r.Refused > 0 {
		s += fmt.Sprintf(" refused=%d", r.Refused)
	}
	if r.LeftoverCopies > 0 || len(r.LeftoversDeleted) > 0 {
		s += fmt.Sprintf(" leftovers=%d leftover_bytes=%d leftovers_deleted=%d", r.LeftoverCopies, r.LeftoverBytes, len(r.LeftoversDeleted))
	}
	s += lifecycleString(&r)
	if r.HoldReason != "" {
		s += " hold_reason=" + r.HoldReason
	}
	if len(r.GraceRestarted) > 0 {
		s += fmt.Sprintf(" grace_restarted=%v", r.GraceRestarted)
	}
	if r.Aborted {
		s += " aborted"
	}
	return s
}

// String formats one action as a dry-run line.
func (a Action) String() string {
	var b strings.Builder
	b.WriteString(a.Op.String())
	b.WriteByte(' ')
	b.WriteString(string(a.Segment.ID))
	switch {
	case a.Op.IsBackfill():
		fmt.Fprintf(&b, " target=%d source=%d", a.Target, a.Source)
		if a.Replaces != 0 {
			fmt.Fprintf(&b, " replaces=%d", a.Replaces)
		}
		if a.Op == ResumeShortCopy {
			fmt.Fprintf(&b, " stored=%d of %d", a.From, a.Segment.ByteSize)
		}
	case a.Op == SetReplicas:
		fmt.Fprintf(&b, " %v -> %v", a.Command.Expected, a.Command.Replicas)
	case a.Op == ReportFailed:
		fmt.Fprintf(&b, " reason=%s", a.Reason)
		if len(a.Copies) > 0 {
			fmt.Fprintf(&b, " copies=%v", a.Copies)
		}
	default:
		fmt.Fprintf(&b, " broker=%d", a.Target)
	}
	return b.String()
}

// String formats the plan as a dry run: a header, one line per action, and
// the report summary. Nothing is executed.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan at index %d: %d actions\n", p.Index, len(p.Actions))
	for _, a := range p.Actions {
		b.WriteString("  ")
		b.WriteString(a.String())
		b.WriteByte('\n')
	}
	b.WriteString("report: ")
	b.WriteString(p.Report.String())
	b.WriteByte('\n')
	return b.String()
}

// AuthFailure is a broker the coordinator could not authenticate, or that
// refused the coordinator's credentials, and why.
type AuthFailure struct {
	Broker meta.BrokerID `json:"broker"`
	Reason string        `json:"reason"`
}

// Report is the pass's Report: the plan's, with what execution did. It
// is a pure function of the plan and its outcomes.
func (o *Outcomes) Report() Report {
	plan := &o.Plan
	rep := plan.Report
	failed := map[meta.SegmentID]string{} // a backfill of the segment failed
	conflicts := map[meta.SegmentID]*Failure{}
	var returnedBytes int64
	for i := range plan.Actions {
		a, out := &plan.Actions[i], o.of(i)
		if a.Op.IsBackfill() {
			rep.BytesCopied += out.Bytes
			if o.returned(a.Segment.ID) {
				returnedBytes += out.Bytes
			}
		}
		switch r := out.Result; {
		case r == SealConflicted:
			conflictFailure(conflicts, a, out.Err)
			if a.Op.IsBackfill() {
				failed[a.Segment.ID] = out.Err
			}
		case !a.Op.IsBackfill() || r == NotRun || r == Succeeded || r == Cancelled:
		case failed[a.Segment.ID] != "":
		case r == SourceRefused:
			failed[a.Segment.ID] = fmt.Sprintf("%s to %d from %d: source refused: %s", a.Op, a.Target, a.Source, out.Err)
		default:
			failed[a.Segment.ID] = fmt.Sprintf("%s to %d from %d: %s", a.Op, a.Target, a.Source, out.Err)
		}
	}
	listed := idSet(rep.Returned)
	for i := range plan.Actions {
		if a := &plan.Actions[i]; a.Op.IsBackfill() && o.returned(a.Segment.ID) {
			if !listed[a.Segment.ID] {
				listed[a.Segment.ID] = true
				rep.Returned = append(rep.Returned, a.Segment.ID)
			}
			rep.BytesSaved += a.Segment.ByteSize
		}
	}
	rep.BytesSaved = max(0, rep.BytesSaved-returnedBytes)
	commanded := map[meta.SegmentID]bool{}
	backfillFailed := map[meta.SegmentID]bool{} // listed in rep.Failed as BackfillFailed
	for _, f := range rep.Failed {
		if f.Reason == BackfillFailed {
			backfillFailed[f.Segment] = true
		}
	}
	for i := range plan.Actions {
		a := &plan.Actions[i]
		if a.Op == SetReplicas {
			commanded[a.Segment.ID] = true
		}
		if f, ok := conflicts[a.Segment.ID]; ok {
			if f.Reason != ReasonNone {
				rep.Failed = append(rep.Failed, *f)
				f.Reason = ReasonNone // reported once
			}
			continue
		}
		if msg, ok := failed[a.Segment.ID]; ok && a.Op.IsBackfill() && !backfillFailed[a.Segment.ID] {
			backfillFailed[a.Segment.ID] = true
			rep.Failed = append(rep.Failed, Failure{Segment: a.Segment.ID, Reason: BackfillFailed, Err: msg})
		}
	}
	o.executed(&rep, failed, commanded)
	return rep
}

// executed adds the commands', resumes', settles', confirmations' and
// deletions' results to rep.
func (o *Outcomes) executed(rep *Report, failed map[meta.SegmentID]string, commanded map[meta.SegmentID]bool) {
	plan := &o.Plan
	rep.Ready = o.Ready()
	planFailed := failedReasons(plan.Report.Failed)
	for i := range plan.Actions {
		a, out := &plan.Actions[i], o.of(i)
		ref := CopyRef{a.Segment.ID, a.Target}
		switch {
		case a.Op == ResumeShortCopy && out.Result == Succeeded:
			rep.Resumed = append(rep.Resumed, ref)
		case a.Op == SetReplicas && out.Result == Succeeded && a.Replaces != 0: // a decommission's or the rebalancer's move
			rep.Moved = append(rep.Moved, a.Segment.ID)
		case a.Op == SetReplicas && out.Result == Succeeded:
			if planFailed[a.Segment.ID] == ReasonNone {
				// A set that only moved kept lost replicas behind is
				// recorded but not healed.
				rep.Healed = append(rep.Healed, a.Segment.ID)
			}
		case a.Op == SetReplicas && out.Result == StaleSet:
			rep.Stale = append(rep.Stale, a.Segment.ID)
		case a.Op == SetReplicas && out.Result == Failed:
			rep.Failed = append(rep.Failed, Failure{Segment: a.Segment.ID, Reason: CommandFailed, Err: out.Err})
		case a.Op == SettleOverrun && out.Result == Succeeded:
			rep.Settled = append(rep.Settled, ref)
		case a.Op == ConfirmCopy && out.Result == Succeeded:
			rep.Confirmed = append(rep.Confirmed, ref)
		case a.Op == DeleteDroppedCopy && out.Result == Succeeded:
			rep.Deleted = append(rep.Deleted, ref)
		case a.Op == DeleteLeftoverCopy:
			leftoverOutcome(rep, ref, out)
		}
	}
	sortRefs(rep.Resumed)
	sortRefs(rep.Settled)
	sortRefs(rep.Confirmed)
	sortRefs(rep.Deleted)
	if o.Aborted {
		rep.Aborted = true
		return
	}
	// Segments healed by in-place resumes alone.
	var healed map[meta.SegmentID]bool
	for _, r := range rep.Resumed {
		if _, bad := failed[r.Segment]; bad || commanded[r.Segment] {
			continue
		}
		if healed == nil {
			healed = idSet(rep.Healed)
		}
		if !healed[r.Segment] {
			healed[r.Segment] = true
			rep.Healed = append(rep.Healed, r.Segment)
		}
	}
}

// idSet returns the set of ids (never nil).
func idSet(ids []meta.SegmentID) map[meta.SegmentID]bool {
	out := make(map[meta.SegmentID]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// failedReasons maps each segment of fs to the reason of its first
// failure, as Report.FailedReason answers for one (nil when fs is empty).
func failedReasons(fs []Failure) map[meta.SegmentID]Reason {
	if len(fs) == 0 {
		return nil
	}
	out := make(map[meta.SegmentID]Reason, len(fs))
	for _, f := range fs {
		if _, ok := out[f.Segment]; !ok {
			out[f.Segment] = f.Reason
		}
	}
	return out
}

// conflictFailure adds a's target to its segment's SealConflict failure.
func conflictFailure(byID map[meta.SegmentID]*Failure, a *Action, err string) {
	f := byID[a.Segment.ID]
	if f == nil {
		f = &Failure{Segment: a.Segment.ID, Reason: SealConflict, Err: fmt.Sprintf("%s on %d: %s", a.Op, a.Target, err)}
		byID[a.Segment.ID] = f
	}
	if !slices.Contains(f.Copies, a.Target) {
		f.Copies = append(f.Copies, a.Target)
		slices.Sort(f.Copies)
	}
}
