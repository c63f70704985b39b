package heal

import (
	"fmt"
	"strings"

	"github.com/malachi-log/malachi/meta"
)

// Report is what one pass found and, once the Coordinator has executed the
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
	// than the replication factor (dead, latched, short or missing copies,
	// or a short set).
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
	// Unsettled lists every overrun copy not yet confirmed; Settling the
	// ones this pass selected (round-robin, bounded by the settle batch).
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
	// HoldReleased says an operator lifted the hold named by HoldReason
	// for this pass: backfills and placement went ahead.
	HoldReleased bool `json:"hold_released,omitempty"`

	// Execution results, filled by the Coordinator.

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
	if r.HoldReason != "" {
		s += " hold_reason=" + r.HoldReason
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
