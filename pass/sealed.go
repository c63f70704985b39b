package pass

import (
	"context"
	"fmt"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// Live is the set of live brokers of one tick, as the caller observed it
// (membership is the caller's concern, per the seed): the reports of the
// brokers that answered its probe, the brokers that answered but could
// not be authenticated (seen, but with no report), and when the probing
// started and ended. A broker of the view in neither list did not answer
// this tick; the grace delay (heal.Policy.Grace) decides whether it is dead.
// Coordinator.Pass fills it by probing every broker of the view.
type Live struct {
	Reports    []heal.ProbeReport
	AuthFailed []heal.AuthFailure
	// Behind are the brokers that answered with metadata behind the
	// pass's index (heal.ErrBehind): seen, but with no report.
	Behind []meta.BrokerID
	// Start is when probing started (a broker first watched is seen
	// then), Now when it ended (the time of the pass).
	Start, Now time.Time
}

// Healing is what HealSealed returns. Nothing in it has been applied:
// applying it is the caller's (Coordinator.Pass does, see HealSealed).
type Healing struct {
	// Index is the metadata index the pass planned at.
	Index uint64
	// Commands are the plan's SetReplicas commands every backfill of
	// whose segment Succeeded, in plan order (heal.Outcomes.ReadyAt; the pass's
	// heal.Report.Ready is the same list): for the caller to apply through its
	// control plane. On an aborted pass they are only those whose
	// backfills had all succeeded before it stopped.
	Commands []meta.SetSegmentReplicas
	// Failed are the segments it could not heal and why: the plan's
	// failures, then the backfills' and settles' (BackfillFailed,
	// SealConflict).
	Failed []heal.Failure
	// Unsettled is the seed's unsettled list (heal.Report.Unsettled). Settled
	// are those of its copies this pass settled: the caller confirms them
	// (Settler.Confirm), and no other copy.
	Unsettled []heal.CopyRef
	Settled   []heal.CopyRef
	// Dropped are the latched or corrupt copies that a command of
	// Commands leaves out of its set: the caller deletes each once that
	// command is recorded, never before (heal's invariant 6).
	Dropped []heal.CopyRef
	// Leftovers are the copies outside their segment's set that the plan
	// deletes (DeleteLeftoverCopy): the caller deletes each through a
	// LeftoverDeleter, which refuses if the broker's set names it.
	Leftovers []heal.CopyRef

	// commandAt, droppedAt and leftoverAt give the index in out.Plan.Actions
	// of each entry of Commands, Dropped and Leftovers: where apply
	// records its outcome.
	commandAt, droppedAt, leftoverAt []int

	out *heal.Outcomes // what ran; apply adds what it runs
}

// HealSealed is the seed's heal_sealed/4: "Given the current
// Malachi.Metadata, the set of live brokers, and the replication factor,
// heal_sealed/4 finds the sealed segments that are under-replicated (a
// replica left), picks the healed replica set with Placement.place/3, and
// backfills each newly added replica with the segment's records (copied
// from a surviving replica via Catchup.run/6). It returns the
// :set_segment_replicas commands whose backfill succeeded, for the caller
// to apply through the control plane (Malachi.Metadata / the replicated
// DS-RSM), plus any segments it could not heal."
//
// Given view, live and rf it steps the core (heal.Planner.Step over the
// Coordinator's State), runs the plan's backfills (Backfiller) and
// settles (Settler.Settle), and returns the commands whose backfills all
// Succeeded, the segments it could not heal, the unsettled copies, and
// the settled, dropped and leftover copies the caller confirms and
// deletes. It applies no command, confirms nothing and deletes nothing.
// The Coordinator is its caller: Pass probes (live), calls it, then
// applies exactly what it returned: the commands through
// Config.Metadata, the confirmations of the settled copies, the
// deletions of the dropped copies whose command was recorded and of the
// leftovers.
//
// rf must be the replication factor the metadata records
// (view.ReplicationFactor()), and every report of live valid
// (heal.ProbeReport.Validate); otherwise it returns an error wrapping
// heal.ErrInvalid and nothing runs. When ctx is cancelled mid-way it stops
// starting backfills and settles, waits for those in flight, and returns
// what succeeded before. HealSealed serialises with Pass, Run and DryRun;
// a caller that applies the commands itself should not also Run.
func (c *Coordinator) HealSealed(ctx context.Context, view *meta.View, live Live, rf int) (Healing, error) {
	if view == nil {
		return Healing{}, fmt.Errorf("%w: heal sealed: no metadata view", heal.ErrInvalid)
	}
	for i := range live.Reports {
		if err := live.Reports[i].Validate(); err != nil {
			return Healing{}, fmt.Errorf("heal sealed at index %d: %w", view.Index(), err)
		}
	}
	c.passMu.Lock()
	defer c.passMu.Unlock()
	return c.healSealed(ctx, view, live, rf)
}

// healSealed is HealSealed once its input is checked; the caller holds
// passMu.
func (c *Coordinator) healSealed(ctx context.Context, view *meta.View, live Live, rf int) (Healing, error) {
	if got := view.ReplicationFactor(); rf != got {
		return Healing{}, fmt.Errorf("%w: heal sealed: replication factor %d, the metadata at index %d records %d", heal.ErrInvalid, rf, view.Index(), got)
	}
	plan, next, err := c.planner.Step(c.state, c.observation(view, live, true))
	if err != nil {
		return Healing{}, err
	}
	c.state, c.pending = next, nil
	out := c.backfillAndSettle(ctx, plan)
	c.pending = out
	return healing(out), nil
}

// healing is what a plan's backfills and settles came to, as HealSealed
// returns it.
func healing(out *heal.Outcomes) Healing {
	plan := &out.Plan
	h := Healing{Index: plan.Index, Failed: out.Report().Failed, Unsettled: plan.Report.Unsettled, out: out}
	ready := map[meta.SegmentID]bool{}
	for _, i := range out.ReadyAt() {
		h.Commands = append(h.Commands, plan.Actions[i].Command)
		h.commandAt = append(h.commandAt, i)
		ready[plan.Actions[i].Segment.ID] = true
	}
	for i := range plan.Actions {
		a := &plan.Actions[i]
		ref := heal.CopyRef{Segment: a.Segment.ID, Broker: a.Target}
		switch {
		case a.Op == heal.SettleOverrun && out.Of[i].Result == heal.Succeeded:
			h.Settled = append(h.Settled, ref)
		case a.Op == heal.DeleteDroppedCopy && ready[a.Segment.ID]:
			h.Dropped, h.droppedAt = append(h.Dropped, ref), append(h.droppedAt, i)
		case a.Op == heal.DeleteLeftoverCopy:
			h.Leftovers, h.leftoverAt = append(h.Leftovers, ref), append(h.leftoverAt, i)
		}
	}
	return h
}
