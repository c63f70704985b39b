package demo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/internal/harness"
	"github.com/malachi-log/malachi/meta"
)

// The operator's lifecycle stages: decommission (a follower drained to
// nothing while every metadata read between two pass ends is checked for
// a set below the replication factor, then made active again, empty) and
// maintenance (a follower in a maintenance window stopped for passes past
// the grace delay: no set changes and no bytes move; then it starts again
// and the window is ended).

// LifecycleFigures are a lifecycle stage's own figures (FaultReport).
type LifecycleFigures struct {
	Broker meta.BrokerID `json:"broker"`
	// SegmentsMoved and BytesMoved: the sealed replicas (and their
	// bytes) the decommissioned broker held when it started; all of them
	// moved when Drained.
	SegmentsMoved int   `json:"segments_moved,omitempty"`
	BytesMoved    int64 `json:"bytes_moved,omitempty"`
	Drained       bool  `json:"drained,omitempty"`
	// SecondsToDrain: from the decommission command to the first read of
	// a pass report saying drained; Rate is BytesMoved over it.
	SecondsToDrain *float64 `json:"seconds_to_drain,omitempty"`
	Rate           float64  `json:"rate_bytes_per_sec,omitempty"`
	// BelowFactor counts the metadata reads that found a set with fewer
	// members than the replication factor (must be 0).
	BelowFactor int `json:"below_factor"`
	// PassesSampled counts the passes after whose end (and before the
	// next one's) the metadata was read; PassesMissed those between the
	// first and the last sampled with no such read.
	PassesSampled int `json:"passes_sampled"`
	PassesMissed  int `json:"passes_missed"`
	// Maintenance: PassesInWindow counts the sampled passes that ran with
	// the broker absent in its window, PassesPastGrace those of them that
	// started more than the grace delay after it stopped (each would have
	// counted it dead without the window); SetsChanged the metadata reads
	// that found a replica set changed.
	PassesInWindow  int `json:"passes_in_window,omitempty"`
	PassesPastGrace int `json:"passes_past_grace,omitempty"`
	SetsChanged     int `json:"sets_changed"`
}

// lifeSample is the leader's metadata read while its pass counter stood
// at pass: after that pass ended and before the next one did.
type lifeSample struct {
	pass  uint64
	rep   admin.HealReport
	life  admin.Lifecycle
	start time.Time
	snap  meta.Snapshot
}

// sampleLeader reads cl's status, its metadata and its status again; ok
// is false when a pass ended in between or a read failed.
func sampleLeader(ctx context.Context, cl *admin.Client) (lifeSample, bool) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw1, err := cl.Status(rctx)
	if err != nil {
		return lifeSample{}, false
	}
	snap, err := cl.Metadata(rctx)
	if err != nil {
		return lifeSample{}, false
	}
	raw2, err := cl.Status(rctx)
	if err != nil {
		return lifeSample{}, false
	}
	st1, ok1 := admin.DecodeStatus(raw1)
	st2, ok2 := admin.DecodeStatus(raw2)
	if !ok1 || !ok2 || st1.LastPass == nil || st1.Passes != st2.Passes {
		return lifeSample{}, false
	}
	life, _ := admin.FindLifecycle(raw1)
	start := st1.LastPassAt.Add(-time.Duration(st1.LastPassSeconds * float64(time.Second)))
	return lifeSample{pass: st1.Passes, rep: *st1.LastPass, life: life, start: start, snap: snap}, true
}

// passCover counts the sampled passes and the ones missed between them.
type passCover struct {
	seen  map[uint64]bool
	first uint64
	last  uint64
}

// add records s and says whether its pass is new.
func (c *passCover) add(s lifeSample) bool {
	if c.seen == nil {
		c.seen = map[uint64]bool{}
	}
	if c.seen[s.pass] {
		return false
	}
	c.seen[s.pass] = true
	if c.first == 0 || s.pass < c.first {
		c.first = s.pass
	}
	c.last = max(c.last, s.pass)
	return true
}

func (c *passCover) fill(f *LifecycleFigures) {
	f.PassesSampled = len(c.seen)
	if len(c.seen) > 0 {
		f.PassesMissed = int(c.last-c.first+1) - len(c.seen)
	}
}

func setsBelow(snap meta.Snapshot, rf int) int {
	n := 0
	for _, s := range snap.Segments {
		if len(s.Replicas) < rf {
			n++
		}
	}
	return n
}

// stageDecommission drains a follower, then makes it active again (empty:
// the later stages keep every broker).
func (d *demo) stageDecommission(ctx context.Context) (FaultReport, error) {
	fr := FaultReport{Stage: "decommission"}
	if err := d.reviveAll(ctx); err != nil {
		fr.Error = err.Error()
		return fr, err
	}
	b := d.drainableFollower()
	if b == nil {
		fr.notInjected("no running follower holds sealed replicas and no unsealed one (a decommission never moves an unsealed segment: it waits, blocked active)")
		return fr, nil
	}
	fr.Broker = b.ID
	targets := d.sealedOn(b.ID)
	lf := &LifecycleFigures{Broker: b.ID, SegmentsMoved: len(targets)}
	fr.Lifecycle = lf
	for _, id := range targets {
		if s, ok := d.last.Snap.Segment(id); ok {
			lf.BytesMoved += s.ByteSize
		}
	}
	fr.What = fmt.Sprintf("decommission broker %d (%d replicas)", b.ID, len(targets))
	d.logf("stage decommission: broker %d, which holds %d sealed replicas, drains to the others", b.ID, len(targets))
	cl := d.leaderClient(ctx)
	before := d.backfillBytes(ctx)
	start := time.Now()
	if _, err := cl.Decommission(ctx, b.ID); err != nil {
		fr.Error = err.Error()
		return fr, fatal(ctx, err, d)
	}
	fr.Injected = true
	var cover passCover
	p := newProgress(d.out, d.tty, "draining", max(len(targets), 1))
	why := "no pass sampled"
	for deadline := start.Add(d.o.StageTimeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			p.Finish("interrupted")
			return fr, err
		}
		s, ok := sampleLeader(ctx, cl)
		if !ok {
			continue
		}
		cover.add(s)
		if n := setsBelow(s.snap, d.o.RF); n > 0 {
			lf.BelowFactor++
			addNote(&fr, "after pass %d: %d sets below the replication factor", s.pass, n)
		}
		dr := drainOf(s.life, b.ID)
		if dr == nil {
			why = fmt.Sprintf("pass %d does not report the decommission", s.pass)
			continue
		}
		p.Set(max(len(targets)-dr.Segments, 0), max(len(targets), 1), fmt.Sprintf("%d left", dr.Segments))
		why = fmt.Sprintf("pass %d: %d segments left, blocked %v", s.pass, dr.Segments, dr.Blocked)
		if dr.Drained && s.rep.Index >= s.snap.Index {
			lf.Drained = true
			lf.SecondsToDrain = seconds(time.Since(start))
			break
		}
	}
	cover.fill(lf)
	fr.BytesRereplicated = d.backfillDelta(ctx, before)
	if !lf.Drained {
		p.Finish("timed out")
		fr.Error = fmt.Sprintf("broker %d not drained after %v: %s", b.ID, d.o.StageTimeout, why)
	} else {
		p.Finish(fmt.Sprintf("drained in %s", fmtSeconds(lf.SecondsToDrain)))
		lf.Rate = float64(lf.BytesMoved) / max(*lf.SecondsToDrain, 1e-3)
	}
	// Active again, empty, so that the later stages have every broker.
	if _, err := cl.CancelDecommission(ctx, b.ID); err != nil {
		fr.Error = joinErr(fr.Error, "making it active again: "+err.Error())
		return fr, fatal(ctx, err, d)
	}
	after := FaultReport{Stage: "decommission-after"}
	if err := d.waitHealed(ctx, &after, "active again", time.Now(), nil, d.o.StageTimeout); err != nil {
		fr.Error = joinErr(fr.Error, "after it was made active again: "+err.Error())
		return fr, fatal(ctx, err, d)
	}
	fr.Detected = lf.Drained
	fr.Healed = lf.Drained && lf.BelowFactor == 0
	fr.SecondsToHeal = lf.SecondsToDrain
	addNote(&fr, "drained %d segments (%d bytes) in %s, %.0f B/s; %d metadata reads below RF; %d passes sampled, %d missed; active again (empty)",
		lf.SegmentsMoved, lf.BytesMoved, fmtSeconds(lf.SecondsToDrain), lf.Rate, lf.BelowFactor, lf.PassesSampled, lf.PassesMissed)
	return fr, nil
}

// drainableFollower is a running follower that holds sealed replicas and
// no unsealed one (a failed load's segment stays unsealed, and a
// decommission never moves it), or nil.
func (d *demo) drainableFollower() *harness.Broker {
	var cands []*harness.Broker
	for _, b := range d.c.Running() {
		if b.ID == d.last.Leader || len(d.sealedOn(b.ID)) == 0 {
			continue
		}
		if !slices.ContainsFunc(d.last.Snap.Segments, func(s meta.Segment) bool { return !s.Sealed && s.HasReplica(b.ID) }) {
			cands = append(cands, b)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[d.rng.IntN(len(cands))]
}

func drainOf(l admin.Lifecycle, b meta.BrokerID) *admin.Drain {
	for i := range l.Decommission {
		if l.Decommission[i].Broker == b {
			return &l.Decommission[i]
		}
	}
	return nil
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// maintenancePastGrace is how many sampled passes, started more than the
// grace delay after the broker stopped, the maintenance stage waits for.
const maintenancePastGrace = 3

// stageMaintenance puts a follower in a maintenance window as long as the
// stage timeout (ended early by the stage), stops it (SIGTERM) and watches
// the passes until maintenancePastGrace of them started more than the
// grace delay after it stopped: no set may change and no backfill byte may
// move. It then starts the broker again and ends the window. The stage
// fails when the window ran out first (the absence was not shown inside
// it) or the passes were not seen.
func (d *demo) stageMaintenance(ctx context.Context) (FaultReport, error) {
	fr := FaultReport{Stage: "maintenance"}
	b, targets, err := d.victimFollower(ctx, &fr)
	if b == nil {
		return fr, err
	}
	lf := &LifecycleFigures{Broker: b.ID}
	fr.Lifecycle = lf
	cl := d.leaderClient(ctx)
	base, err := cl.Metadata(ctx)
	if err != nil {
		fr.Error = err.Error()
		return fr, fatal(ctx, err, d)
	}
	mode, err := cl.Maintenance(ctx, b.ID, d.o.StageTimeout)
	if err != nil {
		fr.Error = err.Error()
		return fr, fatal(ctx, err, d)
	}
	fr.What = fmt.Sprintf("maintenance broker %d (%d replicas)", b.ID, len(targets))
	d.logf("stage maintenance: broker %d (%d sealed replicas) in maintenance until %s, stopped for passes past the grace delay (%v)", b.ID, len(targets), mode.Until.Format(time.RFC3339), d.o.Grace)
	before := d.backfillBytes(ctx)
	if err := d.c.Terminate(b, 10*time.Second); err != nil {
		fr.Error = err.Error()
		return fr, err
	}
	stopAt := time.Now()
	fr.Injected = true
	why := d.watchMaintenance(ctx, cl, b.ID, base, stopAt, mode.Until, lf)
	fr.BytesRereplicated = d.backfillDelta(ctx, before)
	// Start it again and end the window, whatever was seen.
	if err := d.restart(ctx, b); err != nil {
		fr.Error = joinErr(why, err.Error())
		return fr, fatal(ctx, err, d)
	}
	if _, err := cl.EndMaintenance(ctx, b.ID); err != nil {
		fr.Error = joinErr(why, "ending the window: "+err.Error())
		return fr, fatal(ctx, err, d)
	}
	back := FaultReport{Stage: "maintenance-after"}
	if err := d.waitHealed(ctx, &back, "back from maintenance", time.Now(), nil, d.o.StageTimeout); err != nil {
		fr.Error = joinErr(why, "after the window: "+err.Error())
		return fr, fatal(ctx, err, d)
	}
	fr.SecondsToHeal = back.SecondsToHeal
	if why == "" && fr.BytesRereplicated != 0 {
		why = fmt.Sprintf("%d bytes re-replicated while broker %d was in maintenance", fr.BytesRereplicated, b.ID)
	}
	fr.Error = why
	fr.Detected = why == ""
	fr.Healed = why == ""
	addNote(&fr, "stopped %s in its window: %d passes with it absent (%d started past the grace delay), %d metadata reads with a set changed, %d bytes re-replicated; %d passes sampled, %d missed; restarted and window ended",
		time.Since(stopAt).Round(time.Millisecond), lf.PassesInWindow, lf.PassesPastGrace, lf.SetsChanged, fr.BytesRereplicated, lf.PassesSampled, lf.PassesMissed)
	return fr, nil
}

// watchMaintenance samples the leader's passes while broker id is down in
// its window until maintenancePastGrace passes started more than the
// grace delay after stopAt; it returns "" or what went wrong.
func (d *demo) watchMaintenance(ctx context.Context, cl *admin.Client, id meta.BrokerID, base meta.Snapshot, stopAt, until time.Time, lf *LifecycleFigures) string {
	var cover passCover
	defer cover.fill(lf)
	p := newProgress(d.out, d.tty, "absent in maintenance", maintenancePastGrace)
	why := ""
	for deadline := stopAt.Add(d.o.StageTimeout); ; time.Sleep(5 * time.Millisecond) {
		if ctx.Err() != nil || time.Now().After(deadline) {
			p.Finish("timed out")
			return fmt.Sprintf("only %d of %d passes past the grace delay seen in %v", lf.PassesPastGrace, maintenancePastGrace, d.o.StageTimeout)
		}
		if time.Now().After(until) {
			p.Finish("window ran out")
			return "the maintenance window ran out before the stage saw its passes"
		}
		s, ok := sampleLeader(ctx, cl)
		if !ok {
			continue
		}
		if !base.SameReplicaSets(&s.snap) {
			lf.SetsChanged++
			why = fmt.Sprintf("after pass %d a replica set changed while broker %d was in maintenance", s.pass, id)
		}
		if slices.Contains(s.rep.Dead, id) || slices.Contains(s.rep.Suspect, id) {
			why = fmt.Sprintf("pass %d lists broker %d dead or suspect inside its window", s.pass, id)
		}
		if !cover.add(s) || !s.start.After(stopAt) {
			continue
		}
		if k := slices.IndexFunc(s.life.Maintenance, func(m admin.MaintenanceEntry) bool { return m.Broker == id }); k < 0 || s.life.Maintenance[k].Seen {
			continue // not yet seen absent
		}
		lf.PassesInWindow++
		if s.start.After(stopAt.Add(d.o.Grace)) {
			lf.PassesPastGrace++
		}
		p.Set(min(lf.PassesPastGrace, maintenancePastGrace), maintenancePastGrace, fmt.Sprintf("%d passes absent", lf.PassesInWindow))
		if lf.PassesPastGrace >= maintenancePastGrace {
			p.Finish(fmt.Sprintf("%d passes absent, no set changed", lf.PassesInWindow))
			return why
		}
	}
}
