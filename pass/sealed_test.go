package pass

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// commandIDs are the segments of cmds, in order.
func commandIDs(cmds []meta.SetSegmentReplicas) []meta.SegmentID {
	var out []meta.SegmentID
	for _, c := range cmds {
		out = append(out, c.ID)
	}
	return out
}

// Outcomes.Ready returns a command only when every backfill of its
// segment Succeeded: one that was not run, cancelled or interrupted is no
// copy on its target. (Catches ready treating NotRun or Cancelled as
// success.)
func TestOutcomesReadyOnlySucceeded(t *testing.T) {
	results := map[meta.SegmentID]heal.Result{"a": heal.Succeeded, "b": heal.NotRun, "c": heal.Cancelled, "d": heal.Interrupted, "e": heal.Failed, "f": heal.Succeeded}
	var plan heal.Plan
	for _, id := range []meta.SegmentID{"a", "b", "c", "d", "e", "f"} {
		s := seg(string(id), 1, 2, 3)
		cmd := meta.SetSegmentReplicas{ID: id, Expected: []meta.BrokerID{1, 2, 3}, Replicas: []meta.BrokerID{2, 3, 4}}
		plan.Actions = append(plan.Actions,
			heal.Action{Op: heal.ReplaceDeadReplica, Segment: s, Target: 4, Source: 2, Replaces: 1},
			heal.Action{Op: heal.SetReplicas, Segment: s, Command: cmd})
	}
	// f has a second backfill, not run: f's command is not ready either.
	f := seg("f", 1, 2, 3)
	plan.Actions = slices.Insert(plan.Actions, len(plan.Actions)-1, heal.Action{Op: heal.ResumeShortCopy, Segment: f, Target: 3, Source: 2})
	out := &heal.Outcomes{Plan: plan, Of: make([]heal.Outcome, len(plan.Actions)), Aborted: true}
	for i, a := range plan.Actions {
		if a.Op == heal.ReplaceDeadReplica {
			out.Of[i] = heal.Outcome{Result: results[a.Segment.ID]}
		}
	}
	want := []meta.SegmentID{"a"}
	if got := commandIDs(out.Ready()); !slices.Equal(got, want) {
		t.Errorf("Ready %v, want %v", got, want)
	}
	if got := commandIDs(out.Report().Ready); !slices.Equal(got, want) {
		t.Errorf("Report.Ready %v, want %v", got, want)
	}
}

// HealSealed runs the backfills and settles and applies nothing: no
// command, confirmation or deletion. It returns the commands whose
// backfills succeeded, the segments it could not heal, the unsettled
// copies, the settled copies to confirm and the dropped copies to delete.
func TestHealSealedAppliesNothing(t *testing.T) {
	w := newWorld(5, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3), seg("c", 2, 3, 4)).dead(1)
	w.anomaly(2, "b", heal.Latched, 0, false).anomaly(4, "c", heal.Overrun, 1040, false)
	f := newFake(w)
	f.failFill = func(target meta.BrokerID, s meta.SegmentID) bool { return s == "a" }
	c := coordinator(t, f, w.in.Now)
	seeAll(c, w.in.Seen)
	ctx := context.Background()
	view, live, err := c.observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.HealSealed(ctx, view, live, 3)
	if err != nil {
		t.Fatal(err)
	}
	got := calls(f)
	for _, applied := range []string{"set ", "confirm ", "delete "} {
		if strings.Contains(got, applied) {
			t.Errorf("HealSealed applied %q:\n%s", applied, got)
		}
	}
	if !strings.Contains(got, "backfill b") || !strings.Contains(got, "settle c@4") {
		t.Errorf("HealSealed did not run the backfills and settles:\n%s", got)
	}
	if ids := commandIDs(h.Commands); !slices.Equal(ids, []meta.SegmentID{"b"}) {
		t.Errorf("commands %v, want b's only (a's backfill failed)", ids)
	}
	if len(h.Failed) != 1 || h.Failed[0].Segment != "a" || h.Failed[0].Reason != heal.BackfillFailed {
		t.Errorf("failed %+v, want a backfill_failed", h.Failed)
	}
	if !slices.Equal(h.Unsettled, []heal.CopyRef{{Segment: "c", Broker: 4}}) || !slices.Equal(h.Settled, []heal.CopyRef{{Segment: "c", Broker: 4}}) {
		t.Errorf("unsettled %v settled %v, want c@4 in both", h.Unsettled, h.Settled)
	}
	if !slices.Equal(h.Dropped, []heal.CopyRef{{Segment: "b", Broker: 2}}) {
		t.Errorf("dropped %v, want b@2 (latched, left out of b's command)", h.Dropped)
	}
}

// HealSealed checks what its caller hands it: the replication factor the
// metadata records and valid reports; nothing runs otherwise.
func TestHealSealedChecksItsInput(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3)).dead(1)
	f := newFake(w)
	c := coordinator(t, f, w.in.Now)
	ctx := context.Background()
	view, live, err := c.observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.HealSealed(ctx, view, live, 2); !errors.Is(err, heal.ErrInvalid) || !strings.Contains(err.Error(), "replication factor 2") {
		t.Errorf("rf 2 against a view recording 3: %v, want ErrInvalid naming both", err)
	}
	bad := live
	bad.Reports = append(slices.Clone(live.Reports), heal.ProbeReport{Broker: 2, Facts: []heal.Fact{{Segment: "a", Flags: 99}}})
	if _, err := c.HealSealed(ctx, view, bad, 3); !errors.Is(err, heal.ErrInvalid) {
		t.Errorf("an invalid report: %v, want ErrInvalid", err)
	}
	if len(f.calls) != 0 || c.State().Pass != 0 {
		t.Errorf("calls %v and pass %d after refused input, want none", f.calls, c.State().Pass)
	}
}
