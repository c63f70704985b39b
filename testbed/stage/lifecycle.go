package stage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
)

// The lifecycle stages: decommission drains a follower (no pass or
// metadata read may show a set below RF); maintenance stops one in its
// window (no pass may change a set, no byte may move).

// stageDecommission drains a follower, then makes it active again (empty:
// the later stages keep every broker).
func (e *Env) stageDecommission(ctx context.Context, fr *Report) error {
	// A decommission never moves an unsealed segment: b holds none.
	b := e.follower(func(b *harness.Broker) bool { return e.holdsSealed(b) && !e.holdsUnsealed(b) })
	if b == nil {
		fr.notInjected("no running follower holds sealed replicas and no unsealed one (a decommission never moves an unsealed segment: it waits, blocked active)")
		return nil
	}
	fr.Broker = b.ID
	targets := e.sealedOn(b.ID)
	lf := &Figures{Broker: b.ID, SegmentsMoved: len(targets)}
	fr.Figures = lf
	for _, id := range targets {
		if s, ok := e.last.Snap.Segment(id); ok {
			lf.BytesMoved += s.ByteSize
		}
	}
	fr.What = fmt.Sprintf("decommission broker %d (%d replicas)", b.ID, len(targets))
	e.logf("stage decommission: broker %d, which holds %d sealed replicas, drains to the others", b.ID, len(targets))
	cl := e.C.LeaderClient(ctx)
	before := e.C.MarkBackfill(ctx)
	start := time.Now()
	if err := e.decommission(ctx, fr, b, false); err != nil {
		return e.fail(ctx, fr, err)
	}
	fr.Injected = true
	feed := harness.NewPassFeed(start)
	why, err := e.watchDrain(ctx, fr, feed, cl, b.ID, len(targets), start)
	if err != nil {
		return err
	}
	fr.BytesRereplicated = before.Since(ctx, e.C)
	var gone string
	if !lf.Drained {
		fr.Error = fmt.Sprintf("broker %d not drained after %v: %s", b.ID, e.StageTimeout, why)
	} else {
		lf.Rate = float64(lf.BytesMoved) / max(*lf.SecondsToDrain, 1e-3)
		gone = e.drainedAway(ctx, fr, b, targets)
	}
	fr.Error = joinErr(fr.Error, feed.Problem())
	// Active again, empty, so that the later stages have every broker.
	if err := e.decommission(ctx, fr, b, true); err != nil {
		return e.fail(ctx, fr, fmt.Errorf("making it active again: %w", err))
	}
	if _, err := e.settle(ctx, "active again", time.Now()); err != nil {
		return e.fail(ctx, fr, fmt.Errorf("after it was made active again: %w", err))
	}
	fr.judge(lf.Drained, gone, when(lf.BelowFactor > 0, fmt.Sprintf("%d passes or metadata reads below the replication factor", lf.BelowFactor)))
	fr.SecondsToHeal = lf.SecondsToDrain
	addNote(fr, "drained %d segments (%d bytes) in %s, %.0f B/s; %d passes or metadata reads below RF; %s; active again (empty)",
		lf.SegmentsMoved, lf.BytesMoved, FormatSeconds(lf.SecondsToDrain), lf.Rate, lf.BelowFactor, feed.Summary())
	return nil
}

// drainedAway checks a drained broker b: the copy files of the segments
// it held (targets) go, and `malachi status` says it can be stopped. It
// returns what went wrong, or "".
func (e *Env) drainedAway(ctx context.Context, fr *Report, b *harness.Broker, targets []meta.SegmentID) string {
	left := len(targets)
	for deadline := time.Now().Add(e.StageTimeout); ctx.Err() == nil; time.Sleep(e.Poll) {
		files, err := b.CopyFiles()
		left = 0
		for _, id := range targets {
			if _, ok := files[id]; ok || err != nil {
				left++
			}
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
	}
	if left > 0 {
		return fmt.Sprintf("drained, but broker %d still holds %d of the %d copy files it held", b.ID, left, len(targets))
	}
	return e.statusSays(ctx, fr, fmt.Sprintf("decommission broker %d: drained: no replica set names it; it can be stopped", b.ID))
}

// watchDrain reads every pass until one reports broker id drained,
// counting commands and metadata sets below RF; it returns where the
// drain stood.
func (e *Env) watchDrain(ctx context.Context, fr *Report, feed *harness.PassFeed, cl *admin.Client, id meta.BrokerID, held int, start time.Time) (string, error) {
	lf := fr.Figures
	p := e.progress("draining", max(held, 1))
	why := "no heal pass read"
	drained := e.watchPasses(ctx, fr, feed, start.Add(e.StageTimeout), func(recs []plugin.PassRecord, err error) bool {
		if err != nil && len(recs) == 0 {
			why = err.Error()
		}
		for i := range recs {
			r, seq, by := &recs[i].Report, recs[i].Seq, recs[i].Broker
			if segs := harness.CommandsBelow(r, e.RF); len(segs) > 0 {
				lf.BelowFactor++
				addNote(fr, "heal pass %d of broker %d: %d commands below the replication factor (%s)", seq, by, len(segs), segs[0])
			}
			dr := r.DrainOf(id)
			if dr == nil {
				why = fmt.Sprintf("heal pass %d of broker %d does not report the decommission", seq, by)
				continue
			}
			p.Set(max(held-dr.Segments, 0), max(held, 1), fmt.Sprintf("%d left", dr.Segments))
			why = fmt.Sprintf("heal pass %d of broker %d: %d segments left, blocked %v", seq, by, dr.Segments, dr.Blocked)
			if dr.Drained && !lf.Drained {
				lf.Drained = true
				lf.SecondsToDrain = Seconds(recs[i].Ended.Sub(start))
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		snap, err := cl.Metadata(rctx)
		cancel()
		if n := harness.SetsBelow(snap, e.RF); err == nil && n > 0 {
			lf.BelowFactor++
			addNote(fr, "metadata at index %d: %d sets below the replication factor", snap.Index, n)
		}
		return lf.Drained
	})
	switch {
	case ctx.Err() != nil:
		p.Finish("interrupted")
		return why, ctx.Err()
	case drained:
		p.Finish(fmt.Sprintf("drained in %s", FormatSeconds(lf.SecondsToDrain)))
	default:
		p.Finish("timed out")
	}
	return why, nil
}

// joinErr joins two errors' texts, either of them empty.
func joinErr(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// maintenancePastGrace is how many passes, started more than the grace
// delay after the broker stopped, the maintenance stage waits for.
const maintenancePastGrace = 3

// stageMaintenance stops a follower in a maintenance window until
// maintenancePastGrace passes started past the grace delay, then starts
// it and ends the window. No pass of the window may change a set or list
// it dead or suspect, no byte may move, and every pass must be read.
func (e *Env) stageMaintenance(ctx context.Context, fr *Report) error {
	b, targets := e.victimFollower(fr)
	if b == nil {
		return nil
	}
	lf := &Figures{Broker: b.ID}
	fr.Figures = lf
	feed := harness.NewPassFeed(time.Now())
	until, second, err := e.openWindow(ctx, fr, b)
	if err != nil {
		return e.fail(ctx, fr, err)
	}
	fr.What = fmt.Sprintf("maintenance broker %d (%d replicas)", b.ID, len(targets))
	e.logf("stage maintenance: broker %d (%d sealed replicas) in maintenance until %s, stopped for passes past the grace delay (%v)", b.ID, len(targets), until.Format(time.RFC3339), e.Grace)
	before := e.C.MarkBackfill(ctx)
	if err := e.C.Terminate(b, 10*time.Second); err != nil {
		return fr.record(err)
	}
	stopAt := time.Now()
	fr.Injected = true
	j := &maintenanceJudge{id: b.ID, stopAt: stopAt, grace: e.Grace, lf: lf}
	short := e.watchMaintenance(ctx, fr, feed, j, until)
	if short == "" {
		short = e.statusSays(ctx, fr, fmt.Sprintf("maintenance broker %d: until", b.ID), "not answering; its absence is not a failure")
	}
	fr.BytesRereplicated = before.Since(ctx, e.C)
	// Start it again and end the window, whatever was seen.
	restartAt := time.Now()
	stop := func(err error) error {
		fr.Error = joinErr(joinErr(short, second), j.why)
		return e.fail(ctx, fr, err)
	}
	if err := e.C.Revive(ctx, e.StageTimeout, b); err != nil {
		return stop(err)
	}
	if err := e.command(ctx, fr, "maintenance ended", func(cl *admin.Client) error {
		_, err := cl.EndMaintenance(ctx, b.ID)
		return err
	}, "maintenance", b.ID.String(), "--end"); err != nil {
		return stop(fmt.Errorf("ending the window: %w", err))
	}
	e.readWindowRest(ctx, fr, feed, j, time.Now())
	secs, err := e.settle(ctx, "back from maintenance", time.Now())
	if err != nil {
		return stop(fmt.Errorf("after the window: %w", err))
	}
	fr.SecondsToHeal = secs
	fr.judge(true, short, second, j.why, feed.Problem(), when(fr.BytesRereplicated != 0, fmt.Sprintf("%d bytes re-replicated while broker %d was in maintenance", fr.BytesRereplicated, b.ID)))
	fr.Detected = fr.Healed // the window was kept
	addNote(fr, "stopped %s in its window: %d passes with it absent (%d started past the grace delay), %d passes with a set changed, %d bytes re-replicated; %s; restarted and window ended",
		restartAt.Sub(stopAt).Round(time.Millisecond), lf.PassesInWindow, lf.PassesPastGrace, lf.SetsChanged, fr.BytesRereplicated, feed.Summary())
	return nil
}

// openWindow opens broker b's maintenance window for the stage timeout
// and returns when it ends, as the metadata records it, and what went
// wrong with a second window asked for beside it ("" when nothing).
func (e *Env) openWindow(ctx context.Context, fr *Report, b *harness.Broker) (time.Time, string, error) {
	err := e.command(ctx, fr, "in maintenance until", func(cl *admin.Client) error {
		_, err := cl.Maintenance(ctx, b.ID, e.StageTimeout)
		return err
	}, "maintenance", b.ID.String(), "--for", e.StageTimeout.String())
	if err != nil {
		return time.Time{}, "", err
	}
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	snap, err := e.C.LeaderClient(ctx).Metadata(mctx)
	cancel()
	if err != nil {
		return time.Time{}, "", fmt.Errorf("reading the window's end: %w", err)
	}
	mb, _ := snap.Broker(b.ID)
	if !mb.Is(meta.ModeMaintenance) || mb.Until.IsZero() {
		return time.Time{}, "", fmt.Errorf("the metadata at index %d records no window for broker %d: %+v", snap.Index, b.ID, mb)
	}
	return mb.Until, e.secondWindow(ctx, fr, b), nil
}

// secondWindow asks for a window for another running follower while b's
// is open: heal.max_maintenance (1, the plugin's default) must refuse it,
// naming the bound. It returns what went wrong, or "".
func (e *Env) secondWindow(ctx context.Context, fr *Report, b *harness.Broker) string {
	var o *harness.Broker
	for _, x := range e.C.Running() {
		if x != b && x.ID != e.last.Leader {
			o = x
			break
		}
	}
	if o == nil {
		return ""
	}
	var err error
	if e.CLI != "" {
		_, err = e.cli(ctx, "maintenance", o.ID.String(), "--for", e.StageTimeout.String())
	} else {
		_, err = e.C.LeaderClient(ctx).Maintenance(ctx, o.ID, e.StageTimeout)
	}
	switch {
	case err == nil:
		_, _ = e.C.LeaderClient(ctx).EndMaintenance(ctx, o.ID)
		return fmt.Sprintf("a second maintenance window (broker %d) was opened beside broker %d's", o.ID, b.ID)
	case !strings.Contains(err.Error(), "max_maintenance is"):
		return fmt.Sprintf("a second maintenance window (broker %d): %v; want it refused, naming max_maintenance", o.ID, err)
	}
	addNote(fr, "a second window (broker %d) refused, naming max_maintenance", o.ID)
	return ""
}

// maintenanceJudge judges the heal passes of one maintenance window of
// broker id, stopped at stopAt: lf counts them, why says the last thing
// that went wrong ("" while nothing did).
type maintenanceJudge struct {
	id     meta.BrokerID
	stopAt time.Time
	grace  time.Duration
	lf     *Figures
	why    string
}

// judge takes one pass of the window: a set changed, or the broker dead
// or suspect, goes wrong; a pass after the stop that saw it absent counts.
func (j *maintenanceJudge) judge(p *plugin.PassRecord) {
	r := &p.Report
	if segs := harness.SetsChangedBy(r); len(segs) > 0 {
		j.lf.SetsChanged++
		j.why = fmt.Sprintf("heal pass %d of broker %d changed the replica set of %d segments (%s) while broker %d was in maintenance", p.Seq, p.Broker, len(segs), segs[0], j.id)
	}
	if slices.Contains(r.Dead, j.id) || slices.Contains(r.Suspect, j.id) {
		j.why = fmt.Sprintf("heal pass %d of broker %d lists broker %d dead or suspect inside its window", p.Seq, p.Broker, j.id)
	}
	if !p.Started.After(j.stopAt) {
		return
	}
	if k := slices.IndexFunc(r.Maintenance, func(m heal.Maintenance) bool { return m.Broker == j.id }); k < 0 || r.Maintenance[k].Seen {
		return // not seen absent
	}
	j.lf.PassesInWindow++
	if p.Started.After(j.stopAt.Add(j.grace)) {
		j.lf.PassesPastGrace++
	}
}

// watchMaintenance judges the passes while the broker is down in its
// window; "" or why the window was not shown.
func (e *Env) watchMaintenance(ctx context.Context, fr *Report, feed *harness.PassFeed, j *maintenanceJudge, until time.Time) string {
	lf := j.lf
	p := e.progress("absent in maintenance", maintenancePastGrace)
	ranOut := false
	done := e.watchPasses(ctx, fr, feed, j.stopAt.Add(e.StageTimeout), func(recs []plugin.PassRecord, _ error) bool {
		for i := range recs {
			j.judge(&recs[i])
		}
		if ranOut = time.Now().After(until); ranOut {
			return true
		}
		p.Set(min(lf.PassesPastGrace, maintenancePastGrace), maintenancePastGrace, fmt.Sprintf("%d passes absent", lf.PassesInWindow))
		return lf.PassesPastGrace >= maintenancePastGrace
	})
	switch {
	case ranOut:
		p.Finish("window ran out")
		return "the maintenance window ran out before the stage read its passes"
	case done:
		p.Finish(fmt.Sprintf("%d passes absent, %d with a set changed", lf.PassesInWindow, lf.SetsChanged))
		return ""
	}
	p.Finish("timed out")
	return fmt.Sprintf("only %d of %d passes past the grace delay read in %v", lf.PassesPastGrace, maintenancePastGrace, e.StageTimeout)
}

// readWindowRest reads and judges the heal passes that started before the
// window ended (at end) and were not read yet, trying for up to
// maintenanceRestRead while a history does not answer.
func (e *Env) readWindowRest(ctx context.Context, fr *Report, feed *harness.PassFeed, j *maintenanceJudge, end time.Time) {
	var last error
	e.watchPasses(ctx, fr, feed, time.Now().Add(maintenanceRestRead), func(recs []plugin.PassRecord, err error) bool {
		for i := range recs {
			if recs[i].Started.Before(end) {
				j.judge(&recs[i])
			}
		}
		last = err
		return err == nil
	})
	if last != nil {
		j.why = joinErr(j.why, "the passes after the window: "+last.Error())
	}
}

// maintenanceRestRead bounds the read of the window's last passes.
const maintenanceRestRead = 10 * time.Second
