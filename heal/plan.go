package heal

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// ErrInvalid marks bad input to the planner or the executor; nothing is
// changed on its account.
var ErrInvalid = errors.New("heal: invalid")

// ErrSourceRefused is what a pass.Backfiller wraps when the source's copy
// refused the transfer (latched, missing, short, unsealed, or failing its
// checksum or verification at the source), as opposed to a failure of the
// target or of the network. The next Step then records a Refusal: the
// source is not read for that segment again until something about the
// segment changes.
var ErrSourceRefused = errors.New("heal: backfill source refused")

// ErrNoDurableEnd is what a pass.Backfiller wraps when the target could not
// open its copy where the backfill resumes (its durable end: the copy is
// latched or unreadable), before the source was read. The failure is the
// target's: Step avoids the target for the segment and counts nothing
// against the source.
var ErrNoDurableEnd = errors.New("heal: backfill target has no durable end")

// ErrSealConflict is what a pass.Settler or pass.Backfiller wraps when the broker
// refused because its copy carries its own valid seal that disagrees with
// the segment metadata (the plugin maps store.ErrSealConflict to it). The
// broker changed nothing. The next Step records a Conflict: the segment
// is reported SealConflict and left alone (no settle, backfill, replacement
// or deletion) on every pass until the metadata or the copy changes.
var ErrSealConflict = errors.New("heal: seal conflict")

// ErrUnauthenticated is what a pass.Prober (or any of the pass.Brokers methods)
// wraps when the broker answered but one side could not authenticate the
// other (another CA, a certificate naming another broker, an expired
// one): the broker is up but unusable. The executor passes it to Step
// (Observation.AuthFailed), which reports it (Report.AuthFailed) and never counts it dead for that, so its replicas
// stay where they are while an operator fixes the certificates; it is
// neither a source nor a target meanwhile.
var ErrUnauthenticated = errors.New("heal: broker not authenticated")

// ErrBehind is what a pass.Prober wraps when the broker answered but its
// metadata had not reached the pass's index in time (its raft log lags,
// e.g. while its link flaps and the leader backs off replicating to it):
// the broker is up, its copies unknown this pass. Step reports it
// (Report.Behind) and counts it seen, never dead for it.
var ErrBehind = errors.New("heal: broker's metadata behind the pass")

// ErrNotLost is returned by pass.Coordinator.Acknowledge for a segment that the
// last pass did not report lost.
var ErrNotLost = errors.New("heal: segment not lost")

// Op names what an Action does: verb, condition, target. The zero value is
// reserved; an Action with OpUnknown is a bug.
type Op uint8

const (
	// OpUnknown is the reserved zero value.
	OpUnknown Op = iota
	// ReplaceDeadReplica backfills Target, a new replica, from Source,
	// because a replica's broker is dead.
	ReplaceDeadReplica
	// ReplaceLatchedCopy backfills Target, a new replica, from Source,
	// because a replica's copy is latched failed on a live broker.
	ReplaceLatchedCopy
	// AddMissingReplica backfills Target, a new replica, from Source,
	// because the set has fewer replicas than the replication factor.
	AddMissingReplica
	// ResumeShortCopy re-backfills Target's own short or missing copy
	// from Source, resuming at Target's durable end. The replica set does
	// not change.
	ResumeShortCopy
	// SetReplicas applies Command through the ControlPlane's
	// compare-and-set, only if every backfill of the same segment in this
	// plan succeeded.
	SetReplicas
	// SettleOverrun settles Target's overrun copy down to its sealed size.
	SettleOverrun
	// ConfirmCopy confirms Target's copy, only after the SettleOverrun of
	// the same copy in this plan succeeded.
	ConfirmCopy
	// DeleteDroppedCopy deletes Target's copy (a latched or corrupt copy
	// left out of the healed set), only after the SetReplicas of the same
	// segment in this plan was recorded.
	DeleteDroppedCopy
	// ReportFailed reports that the segment cannot be healed this pass,
	// with Reason and, for no_spare_broker, Copies.
	ReportFailed
	// ReplaceCorruptCopy backfills Target, a new replica, from Source,
	// because a replica's copy failed its checksum (Kind Corrupt) on a
	// live broker. The corrupt copy is deleted (DeleteDroppedCopy) only
	// after the set leaving it out is recorded.
	ReplaceCorruptCopy
	// DeleteLeftoverCopy deletes Target's copy of a segment whose set does
	// not name Target (a leftover, see Leftover), through a
	// pass.LeftoverDeleter that refuses if the set names Target at the plan's
	// index. Planned only after Policy.LeftoverDelay and only while the
	// segment is safe (see doc.go); Segment carries only the id when the
	// metadata does not know the segment.
	DeleteLeftoverCopy
	// MoveReplica backfills Target, a new replica, from Source, to take
	// the place of Replaces, a healthy replica on a decommissioning
	// broker (see lifecycle.go): add, verify, record (SetReplicas), then
	// drop (DeleteDroppedCopy).
	MoveReplica
	// RebalanceReplica is a MoveReplica made by the rebalancer (see
	// rebalance.go): Target, a new replica on a less loaded broker, is
	// backfilled from Source to take the place of Replaces, a healthy
	// replica on a more loaded one; then SetReplicas, then
	// DeleteDroppedCopy, as for a move.
	RebalanceReplica
)

var opNames = [...]string{"unknown", "replace_dead_replica", "replace_latched_copy", "add_missing_replica",
	"resume_short_copy", "set_replicas", "settle_overrun", "confirm_copy", "delete_dropped_copy", "report_failed", "replace_corrupt_copy", "delete_leftover_copy", "move_replica", "rebalance_replica"}

// String returns the snake_case name of o.
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// MarshalText implements encoding.TextMarshaler with the String form.
func (o Op) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText parses the String form; a name this build does not know
// reads as the zero Op ("unknown"), which no plan executes.
func (o *Op) UnmarshalText(b []byte) error {
	*o = Op(lenientName(opNames[:], b, true, 0))
	return nil
}

// IsBackfill reports whether o copies bytes to Target.
func (o Op) IsBackfill() bool {
	return o == ReplaceDeadReplica || o == ReplaceLatchedCopy || o == AddMissingReplica || o == ResumeShortCopy || o == ReplaceCorruptCopy || o == MoveReplica || o == RebalanceReplica
}

// Reason says why a segment could not be healed.
type Reason uint8

const (
	// ReasonNone is the zero value: no failure.
	ReasonNone Reason = iota
	// AllReplicasDead: every broker of the replica set is dead; no copy
	// can be read. Nothing is dropped from the set.
	AllReplicasDead
	// NoSpareBroker: a lost replica (dead broker or latched copy) has no
	// live broker without a copy to take its place; it stays in the set
	// behind the healthy replicas. Failure.Copies names the lost replicas
	// kept.
	NoSpareBroker
	// NoIntactSource: some replica is not dead but none is intact and
	// readable (all short, missing, latched, corrupt, or refused as a
	// source by an earlier attempt; see Refusal). The segment is lost
	// (Report.Lost).
	NoIntactSource
	// BackfillFailed: a backfill of this pass returned an error
	// (the executor); no command was applied for the segment.
	BackfillFailed
	// CommandFailed: SetReplicas failed for a reason other than a stale
	// expected set (the executor).
	CommandFailed
	// SealConflict: a replica's copy refused a settle or a backfill
	// because its own valid seal disagrees with the metadata (see
	// ErrSealConflict). Failure.Copies names those replicas. Nothing is
	// planned for the segment, and no copy of it is settled, replaced or
	// deleted, until the metadata or the copy changes (see Conflict).
	SealConflict
)

var reasonNames = [...]string{"none", "all_replicas_dead", "no_spare_broker", "no_intact_source", "backfill_failed", "command_failed", "seal_conflict"}

// String returns the snake_case name of r.
func (r Reason) String() string {
	if r == ReasonUnknown {
		return "unknown"
	}
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// MarshalText implements encoding.TextMarshaler with the String form.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// ReasonUnknown is a reason this build does not know (a newer broker's),
// as UnmarshalText reads it.
const ReasonUnknown Reason = math.MaxUint8

// UnmarshalText parses the String form; a name this build does not know
// reads as ReasonUnknown, so that a report from a newer broker decodes.
func (r *Reason) UnmarshalText(b []byte) error {
	*r = Reason(lenientName(reasonNames[:], b, false, uint8(ReasonUnknown)))
	return nil
}

// Action is one step of a Plan, a value. Which fields are meaningful
// depends on Op (see each Op's comment); the others are zero.
type Action struct {
	Op Op `json:"op"`
	// Segment is the segment as the snapshot records it (the backfill
	// verifies against it; do not modify its Replicas).
	Segment meta.Segment `json:"segment"`
	// Target is the broker acted on: the backfill target, the copy
	// settled, confirmed or deleted.
	Target meta.BrokerID `json:"target,omitempty"`
	// Source is the intact replica a backfill copies from.
	Source meta.BrokerID `json:"source,omitempty"`
	// Replaces is, for ReplaceDeadReplica, ReplaceLatchedCopy,
	// ReplaceCorruptCopy and MoveReplica, the replica Target takes the
	// place of.
	Replaces meta.BrokerID `json:"replaces,omitempty"`
	// From is, for ResumeShortCopy, the stored size the probe reported (a
	// hint; the target resumes at its exact durable end), 0 otherwise.
	From int64 `json:"from,omitempty"`
	// Command is the compare-and-set for SetReplicas. A SetReplicas of a
	// decommission's move names in Replaces the decommissioning replica
	// it leaves out (Report.Moved, not Healed).
	Command meta.SetSegmentReplicas `json:"command,omitzero"`
	// Reason and Copies explain ReportFailed.
	Reason Reason          `json:"reason,omitempty"`
	Copies []meta.BrokerID `json:"copies,omitempty"`
	// State is, for a backfill, the fingerprint of its segment's replica
	// states when planned; an executor records it in a Refusal when the
	// source refuses.
	State uint64 `json:"state,omitempty"`
	// TargetState is, for ResumeShortCopy and SettleOverrun, the
	// fingerprint of Target's copy as probed when planned; an executor
	// records it in a Conflict when the target answers ErrSealConflict.
	TargetState uint64 `json:"target_state,omitempty"`
}

// Plan is the outcome of one pass: what to do, in risk order (the segments
// with the fewest healthy copies first), and what was found.
//
// Execution contract (pass.Coordinator implements it; any other executor
// must too):
//  1. Backfills (Op.IsBackfill) and SettleOverrun may run concurrently.
//  2. A SetReplicas runs only after every backfill of the same segment in
//     this plan succeeded; otherwise (one failed, was cancelled, or never
//     ran) it is skipped, and a segment whose backfill failed is reported
//     BackfillFailed.
//  3. A ConfirmCopy runs only after the SettleOverrun of the same copy
//     succeeded.
//  4. A DeleteDroppedCopy runs only after the SetReplicas of the same
//     segment was recorded (returned nil).
//  5. ReportFailed needs no execution; it is in the Report too.
//  6. An executor may cancel a segment's backfills and skip its
//     SetReplicas (never the reverse) when a replica they replace turns out
//     to be alive after all; the next pass re-plans it.
type Plan struct {
	// Index is the snapshot index the plan was made from.
	Index uint64 `json:"index"`
	// Actions in execution-group order within each segment, segments in
	// risk order. Never nil.
	Actions []Action `json:"actions"`
	// Report is what the pass found, before execution.
	Report Report `json:"report"`
	// Commands are the plan's SetReplicas commands, in plan order: each is
	// handed to the control plane only if every backfill of its segment
	// succeeds (Outcomes.ReadyAt, Report.Ready).
	Commands []meta.SetSegmentReplicas `json:"commands,omitempty"`
	// SettleCursor is where the next pass's round-robin over unsettled
	// copies starts; feed it back as Input.SettleCursor (the Planner does).
	SettleCursor CopyRef `json:"settle_cursor"`
	// Unconfirmed are the Input.Unconfirmed copies still overrun, or
	// unknown this tick (a timed-out probe, a suspect broker), sorted;
	// feed them back, with the copies this plan's execution settled
	// without confirming, as the next Input.Unconfirmed (Step does).
	Unconfirmed []CopyRef `json:"unconfirmed,omitempty"`
	// Refused are the Input.Refused entries still in force (their segment's
	// version and replica states unchanged); feed them back, with the
	// refusals this plan's execution adds, as the next Input.Refused.
	Refused []Refusal `json:"refused,omitempty"`
	// Acknowledged are the Input.Acknowledged segments that are still not
	// healthy; feed them back as the next Input.Acknowledged. A segment
	// that became fully healthy (or left the metadata) is dropped, so a
	// later loss is reported unacknowledged.
	Acknowledged []meta.SegmentID `json:"acknowledged,omitempty"`
	// Lost are the segments of Report.Lost, sorted; feed them back as the
	// next Input.Lost.
	Lost []meta.SegmentID `json:"lost,omitempty"`
	// Conflicts are the Input.Conflicts entries still in force; feed them
	// back, with the conflicts this plan's execution adds, as the next
	// Input.Conflicts.
	Conflicts []Conflict `json:"conflicts,omitempty"`
}

// Conflict remembers that Broker's copy of Segment refused a settle or a
// backfill with ErrSealConflict while the segment was at Version with the
// seal fingerprinted by Seal, and the copy was probed as State
// (Action.TargetState). It is in force while Broker is a replica, the
// version and the seal are unchanged and the copy is either probed as
// State or not seen (dead, suspect, timed out): the copy then counts as
// neither healthy nor lost, and the segment is reported SealConflict with
// nothing else planned for it. Once the metadata is corrected or the copy
// changes (an operator replaced or removed it) it is dropped and the
// segment is planned afresh.
type Conflict struct {
	Segment meta.SegmentID `json:"segment"`
	Broker  meta.BrokerID  `json:"broker"`
	Version uint64         `json:"version"`
	Seal    uint64         `json:"seal"`
	State   uint64         `json:"state"`
}

// Refusal remembers that Source refused to be a backfill source for
// Segment while the segment was at Version with replica-state fingerprint
// State (Action.State). While both still hold, the planner plans no read
// from that copy; once either changes (a replica's report changes, a
// broker returns or leaves, the replica set is changed) it is dropped and
// the copy may be tried once more.
type Refusal struct {
	Segment meta.SegmentID `json:"segment"`
	Source  meta.BrokerID  `json:"source"`
	Version uint64         `json:"version"`
	State   uint64         `json:"state"`
}

// LostSegment is a sealed segment with no intact copy that can be read:
// every replica dead, latched, missing, short, corrupt, or refused as a
// source. It is reported on every pass until it heals.
type LostSegment struct {
	Segment     meta.SegmentID `json:"segment"`
	StartOffset uint64         `json:"start_offset"`
	// EndOffset is one past the last record.
	EndOffset uint64 `json:"end_offset"`
	ByteSize  int64  `json:"byte_size"`
	// Replicas is the replica set the metadata records: the last known
	// holders of a copy.
	Replicas []meta.BrokerID `json:"replicas"`
	// Reason is AllReplicasDead or NoIntactSource.
	Reason Reason `json:"reason"`
	// Acknowledged says an operator acknowledged the loss
	// (pass.Coordinator.Acknowledge); it is still reported.
	Acknowledged bool `json:"acknowledged,omitempty"`
}

// CopyRef names one copy: a segment on a broker.
type CopyRef struct {
	Segment meta.SegmentID `json:"segment"`
	Broker  meta.BrokerID  `json:"broker"`
}

// String returns "segment@broker".
func (c CopyRef) String() string { return fmt.Sprintf("%s@%d", c.Segment, c.Broker) }

// less orders copies by segment, then broker.
func (c CopyRef) less(d CopyRef) bool {
	if c.Segment != d.Segment {
		return c.Segment < d.Segment
	}
	return c.Broker < d.Broker
}

// cmpRefs orders copies as less does, for slices.SortFunc and
// BinarySearchFunc.
func cmpRefs(a, b CopyRef) int {
	if a.less(b) {
		return -1
	}
	if b.less(a) {
		return 1
	}
	return 0
}

// Failure is one segment that could not be healed.
type Failure struct {
	Segment meta.SegmentID `json:"segment"`
	Reason  Reason         `json:"reason"`
	// Copies are, for NoSpareBroker, the lost replicas kept in the set.
	Copies []meta.BrokerID `json:"copies,omitempty"`
	// Err is the error text, for failures found while executing.
	Err string `json:"err,omitempty"`
}

// Seen is the last time a broker answered a probe (or, for a fresh leader,
// when it started watching). The planner never reads the clock: Input.Now
// and these values decide liveness.
type Seen struct {
	Broker meta.BrokerID `json:"broker"`
	At     time.Time     `json:"at"`
}

// Policy bounds what one pass may do.
type Policy struct {
	// Grace is how long a broker may go unseen before it counts as dead
	// and its replicas are replaced. A broker unseen for less is
	// "suspect": not replaced, but neither a source nor a target.
	Grace time.Duration `json:"grace"`
	// SettleBatch bounds the SettleOverrun actions of one pass, chosen
	// round-robin over the unsettled copies.
	SettleBatch int `json:"settle_batch"`
	// MaxBackfillsPerBroker bounds the backfills one pass plans with a
	// given broker as source or target; segments beyond it wait for a
	// later pass (Report.Deferred). Zero means no bound.
	MaxBackfillsPerBroker int `json:"max_backfills_per_broker"`
	// MaxBackfills bounds the backfills of one pass; zero means no bound.
	MaxBackfills int `json:"max_backfills"`
	// HoldShare is the mass-failure brake: when more than this share of
	// the registered brokers go missing within one grace window, placement
	// of new replicas is held (Report.HoldReason). Zero means the default,
	// 1/4; a negative value disables the brake. See Hold.
	HoldShare float64 `json:"hold_share"`
	// RefuseAfter is how many failed backfills of one segment from one
	// source, in a row and with the segment unchanged, count as that
	// source refusing when the errors do not say so (zero: 3; negative:
	// only ErrSourceRefused counts). Step decides it (see State.Fills).
	RefuseAfter int `json:"refuse_after,omitempty"`
	// AvoidPasses is how many passes a broker whose backfill of a new
	// replica failed is not chosen again for that segment (zero: 5).
	AvoidPasses int `json:"avoid_passes,omitempty"`
	// LeftoverDelay is how long a leftover copy must have been seen before
	// it may be deleted (zero: 2 minutes).
	LeftoverDelay time.Duration `json:"leftover_delay,omitempty"`
	// MaxMaintenance bounds the brokers in maintenance at once (default
	// 1); the admin API puts it in each meta.SetBrokerMode, whose state
	// machine enforces it. The planner does not read it.
	MaxMaintenance int `json:"max_maintenance,omitempty"`
	// Rebalance turns on the rebalancer (rebalance.go): with nothing
	// more urgent planned, replicas move from the most to the least
	// loaded brokers until each is within 10% of the mean by count and
	// by bytes. RebalanceMoves bounds its moves per pass (zero: 8), within
	// MaxBackfills and MaxBackfillsPerBroker.
	Rebalance      bool `json:"rebalance,omitempty"`
	RebalanceMoves int  `json:"rebalance_moves,omitempty"`
}

func (p Policy) rebalanceMoves() int {
	if p.RebalanceMoves <= 0 {
		return DefaultRebalanceMoves
	}
	return p.RebalanceMoves
}

// DefaultRebalanceMoves is Policy.RebalanceMoves when zero.
const DefaultRebalanceMoves = 8

func (p Policy) refuseAfter() int {
	if p.RefuseAfter == 0 {
		return 3
	}
	return max(p.RefuseAfter, 0)
}

func (p Policy) avoidPasses() int {
	if p.AvoidPasses <= 0 {
		return 5
	}
	return p.AvoidPasses
}

// DefaultPolicy returns the policy an operator gets without configuring
// one.
func DefaultPolicy() Policy {
	return Policy{Grace: 10 * time.Second, SettleBatch: 64, MaxBackfillsPerBroker: 8, MaxBackfills: 256, MaxMaintenance: 1, Rebalance: true}
}

// Validate checks the policy; its errors name the field and the value.
func (p Policy) Validate() error {
	if p.Grace < 0 {
		return fmt.Errorf("%w: policy grace %v is negative", ErrInvalid, p.Grace)
	}
	if p.SettleBatch < 0 {
		return fmt.Errorf("%w: policy settle_batch %d is negative", ErrInvalid, p.SettleBatch)
	}
	if p.MaxBackfillsPerBroker < 0 {
		return fmt.Errorf("%w: policy max_backfills_per_broker %d is negative", ErrInvalid, p.MaxBackfillsPerBroker)
	}
	if p.HoldShare > 1 {
		return fmt.Errorf("%w: policy hold_share %v: want at most 1 (negative disables)", ErrInvalid, p.HoldShare)
	}
	if p.MaxBackfills < 0 {
		return fmt.Errorf("%w: policy max_backfills %d is negative", ErrInvalid, p.MaxBackfills)
	}
	if p.LeftoverDelay < 0 {
		return fmt.Errorf("%w: policy leftover_delay %v is negative", ErrInvalid, p.LeftoverDelay)
	}
	if p.MaxMaintenance < 0 {
		return fmt.Errorf("%w: policy max_maintenance %d is negative", ErrInvalid, p.MaxMaintenance)
	}
	if p.AvoidPasses < 0 {
		return fmt.Errorf("%w: policy avoid_passes %d is negative", ErrInvalid, p.AvoidPasses)
	}
	if p.RebalanceMoves < 0 {
		return fmt.Errorf("%w: policy rebalance_moves %d is negative", ErrInvalid, p.RebalanceMoves)
	}
	return nil
}

// Input is everything one pass decides from. The planner does not modify
// it and keeps no reference to it after returning.
type Input struct {
	// View is the metadata the pass decides from (immutable, shared).
	View *meta.View
	// Reports are this tick's probe reports, at most one per broker. A
	// registered broker without one is not up this tick.
	Reports []ProbeReport
	// Seen are the brokers' last-seen times; a broker without one has
	// never been seen and counts as dead.
	Seen []Seen
	// Start is when the pass began probing (zero: Now). A broker is
	// dead when it was last seen more than the grace delay before Start:
	// a probe that times out during the pass does not make its broker
	// dead on the same pass, so that brokers lost together (a split) are
	// both missing on the next one, where the mass-failure brake sees them.
	Start time.Time
	// Now is the time of the pass.
	Now    time.Time
	Policy Policy
	// SettleCursor is the previous Plan's SettleCursor (zero: start at
	// the first unsettled copy).
	SettleCursor CopyRef
	// Unconfirmed are the copies settled on an earlier pass and not
	// confirmed since, in any order (the previous Plan.Unconfirmed plus
	// the copies its execution settled without confirming): the seed's
	// exception (P6.5), listed unsettled only on a pass in which its
	// segment meets the seed's conditions.
	Unconfirmed []CopyRef
	// Avoid lists copies not to create this pass: a segment's broker that
	// is not to be chosen as a new replica (the executor fills it with
	// targets whose backfill failed recently, e.g. because a leftover copy
	// there is latched). Placement picks another broker.
	Avoid []CopyRef
	// Release lifts a mass-failure hold for this pass (the operator said
	// so); the Report still names the hold_reason it overrode.
	Release bool
	// Held says the previous pass was held by the mass-failure brake
	// (State.Held). When the hold lifts on its own this pass (enough of
	// the missing brokers answered) the brokers still missing count as
	// suspect, not dead: see Report.GraceRestarted.
	Held bool
	// Refused are the previous Plan.Refused plus the refusals its
	// execution recorded, in any order: copies not to read from while
	// their segment is unchanged (see Refusal).
	Refused []Refusal
	// Acknowledged are the segments whose loss an operator acknowledged,
	// in any order (the previous Plan.Acknowledged plus new ones).
	Acknowledged []meta.SegmentID
	// Conflicts are the previous Plan.Conflicts plus the conflicts its
	// execution recorded, in any order (see Conflict).
	Conflicts []Conflict
	// Lost is the previous Plan.Lost. A segment lost on the previous pass
	// stays lost (reported, not merely deferred) while none of its copies
	// is known intact, even if some copy's state is unknown this pass (a
	// timed-out probe, a broker within its grace delay).
	Lost []meta.SegmentID
}

func sortRefs(rs []CopyRef) { slices.SortFunc(rs, cmpRefs) }
