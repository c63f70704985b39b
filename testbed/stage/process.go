package stage

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/meta"
)

// sealedOn lists the sealed segments of the last view with a replica on b.
func (e *Env) sealedOn(b meta.BrokerID) []meta.SegmentID {
	var out []meta.SegmentID
	for _, s := range e.last.Snap.Segments {
		if s.Sealed && s.HasReplica(b) {
			out = append(out, s.ID)
		}
	}
	return out
}

// follower is a running broker other than the leader for which ok holds
// (nil: any), drawn by the run's seed, or nil.
func (e *Env) follower(ok func(*harness.Broker) bool) *harness.Broker {
	var cands []*harness.Broker
	for _, b := range e.C.Running() {
		if b.ID != e.last.Leader && (ok == nil || ok(b)) {
			cands = append(cands, b)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[e.Rand.IntN(len(cands))]
}

// holdsSealed: b holds sealed replicas.
func (e *Env) holdsSealed(b *harness.Broker) bool { return len(e.sealedOn(b.ID)) > 0 }

// holdsUnsealed: b holds a replica of an unsealed segment (a Kafka
// partition's active one) in the last view, which a decommission never
// moves: it waits, blocked active, until the partition rolls.
func (e *Env) holdsUnsealed(b *harness.Broker) bool { return unsealedOn(&e.last.Snap, b.ID) }

// unsealedOn: broker id holds a replica of an unsealed segment in snap.
func unsealedOn(snap *meta.Snapshot, id meta.BrokerID) bool {
	return slices.ContainsFunc(snap.Segments, func(s meta.Segment) bool { return !s.Sealed && s.HasReplica(id) })
}

// timeFromDeath sets fr's grace fields and, once healed (fr.healedAt),
// its seconds to heal from when the broker faulted at faultAt counts as
// dead: faultAt + grace, or, for a kill (passStart), the start of an
// earlier pass that listed it dead. A stopped broker's probe hangs, so
// for it that start is only reported.
func (e *Env) timeFromDeath(fr *Report, faultAt time.Time, passStart bool) {
	deadAt := faultAt.Add(e.Grace)
	if !e.deadSeen.IsZero() {
		fr.DeadSeenSeconds = Seconds(e.deadSeen.Sub(faultAt))
		if passStart && e.deadSeen.Before(deadAt) {
			deadAt = e.deadSeen
		}
	}
	fr.GraceWaitSeconds = Seconds(deadAt.Sub(faultAt))
	if !fr.healedAt.IsZero() {
		fr.SecondsToHeal = Seconds(fr.healedAt.Sub(deadAt))
	}
}

// addNote appends a sentence to fr.Note, after a "; " when it has one.
func addNote(fr *Report, format string, args ...any) {
	fr.Note = joinErr(fr.Note, fmt.Sprintf(format, args...))
}

// victimFollower picks a follower holding sealed replicas; nil when none
// (fr says not injected).
func (e *Env) victimFollower(fr *Report) (*harness.Broker, []meta.SegmentID) {
	b := e.follower(e.holdsSealed)
	if b == nil {
		fr.notInjected("no running follower holds sealed replicas")
		return nil, nil
	}
	fr.Broker = b.ID
	return b, e.sealedOn(b.ID)
}

// stagePause stops a follower (SIGSTOP) until its replicas moved and
// verified, then continues it: it must rejoin.
func (e *Env) stagePause(ctx context.Context, fr *Report) error {
	b, targets := e.victimFollower(fr)
	if b == nil {
		return nil
	}
	m, stopAt, in, err := e.strikeBroker(ctx, fr, harness.Target{Kind: harness.KindPause, Brokers: []*harness.Broker{b}}, targets,
		fmt.Sprintf("SIGSTOP follower %d (%d replicas)", b.ID, len(targets)))
	defer func() { _ = in.Undo(ctx) }() // never leave a broker stopped
	if err != nil {
		return err
	}
	feed := harness.NewPassFeed(stopAt)
	healedAt, why, err := e.healWithout(ctx, fr, b, targets, feed, stopAt.Add(e.StageTimeout))
	if err != nil {
		return err
	}
	fr.healedAt = healedAt
	e.timeFromDeath(fr, stopAt, false)
	gap := feed.Problem()
	fr.BytesEstimated = e.last.MissingBytes(m.pre)
	fr.BytesRereplicated = m.before.Since(ctx, e.C)
	fr.Detected = !healedAt.IsZero()
	if !fr.Detected {
		fr.Error = fmt.Sprintf("broker %d stopped: not re-replicated after %v: %s", b.ID, e.StageTimeout, why)
	}

	// SIGCONT, bounded by the stage timeout either way: it must rejoin.
	contAt := time.Now()
	if err := in.Undo(ctx); err != nil {
		return fr.record(err)
	}
	e.logf("  SIGCONT broker %d after %s stopped", b.ID, time.Since(stopAt).Round(time.Millisecond))
	secs, err := e.settle(ctx, "rejoining", contAt)
	if err == nil {
		err = e.C.WaitNotDead(ctx, b.ID, e.StageTimeout, e.Poll)
	}
	if err != nil {
		return e.fail(ctx, fr, fmt.Errorf("after SIGCONT: %w", err))
	}
	addNote(fr, "stopped %s; after SIGCONT it rejoined and every segment was healthy and verified in %s",
		contAt.Sub(stopAt).Round(time.Millisecond), FormatSeconds(secs))
	fr.judge(fr.Detected, gap)
	return nil
}

// healWithout waits, without b, until a pass lists b dead and every
// target moved off it and healed; zero time and why when not by deadline.
func (e *Env) healWithout(ctx context.Context, fr *Report, b *harness.Broker, targets []meta.SegmentID, feed *harness.PassFeed, deadline time.Time) (time.Time, string, error) {
	sub := e.C.Without(b.ID) // its Live leaves b out
	p := e.progress("re-replicating off the paused broker", len(targets))
	seen := func(v *harness.View, ev harness.Evaluation) {
		_, _ = e.readPasses(ctx, sub, feed, fr)
		p.Set(movedOff(v.Snap, targets, b.ID), len(targets), fmt.Sprintf("%d unhealthy", len(ev.Unhealthy)))
	}
	pending := func(v *harness.View, _ harness.Evaluation) string {
		if e.deadSeen.IsZero() {
			return fmt.Sprintf("no heal pass lists broker %d dead yet", b.ID)
		}
		if moved := movedOff(v.Snap, targets, b.ID); moved < len(targets) {
			return fmt.Sprintf("%d of %d of its replicas moved", moved, len(targets))
		}
		_, why := v.PassClean()
		return why
	}
	v, err := harness.WaitHealed(ctx, sub, harness.HealWait{RF: e.RF, Check: e.CheckCopy, Every: e.Poll, Seen: seen, Pending: pending}, time.Until(deadline))
	if err == nil {
		p.Finish("re-replicated and verified")
		return v.At, "", nil
	}
	if ferr := fatal(ctx, err, e); ferr != nil {
		p.Finish("interrupted, or a broker died")
		fr.Error = ferr.Error()
		return time.Time{}, "", ferr
	}
	p.Finish("timed out")
	return time.Time{}, err.Error(), nil
}

// movedOff counts the segments of targets whose set in snap no longer
// names broker id.
func movedOff(snap meta.Snapshot, targets []meta.SegmentID, id meta.BrokerID) int {
	n := 0
	for _, t := range targets {
		if s, ok := snap.Segment(t); ok && !s.HasReplica(id) {
			n++
		}
	}
	return n
}

// stageSwap kills a follower and starts it on an empty data directory;
// the old one is kept beside it.
func (e *Env) stageSwap(ctx context.Context, fr *Report) error {
	b, targets := e.victimFollower(fr)
	if b == nil {
		return nil
	}
	files, size := harness.DirUsage(b.Dir)
	m, killAt, in, err := e.strikeBroker(ctx, fr, harness.Target{Kind: harness.KindSwap, Brokers: []*harness.Broker{b}, Timeout: e.StageTimeout}, targets,
		fmt.Sprintf("empty data dir on %d (%d replicas)", b.ID, len(targets)))
	if err != nil {
		fr.Injected = in.Aside != ""
		return fmt.Errorf("stage swap: %w", err)
	}
	e.Aud.ForgetUnder(in.Aside)
	e.logf("  old data directory (%d files, %s) kept at %s; broker %d starts on an empty one", files, bytesize.Format(size), in.Aside, b.ID)
	startAt := time.Now()
	if err := in.Undo(ctx); err != nil {
		return e.fail(ctx, fr, err)
	}
	if _, err := e.C.AgreedLeader(ctx, true); err != nil {
		e.logf("  brokers not yet agreed on a leader: %v", err)
	}
	upAt := time.Now()
	err = e.heal(ctx, fr, "refilling the emptied broker", startAt, targets, e.StageTimeout, m)
	addNote(fr, "seconds_to_heal from the restart on the empty directory (killed %s before; it answered with a leader after %s); it holds %d copies again; old directory kept at %s",
		startAt.Sub(killAt).Round(time.Millisecond), upAt.Sub(startAt).Round(time.Millisecond), len(e.last.Copies[b.ID]), in.Aside)
	return fatal(ctx, err, e)
}

// throttledTimeout is the stage timeout plus twice the time the lost
// copies take at the stage's catch-up rate over the running brokers.
func (e *Env) throttledTimeout(fr *Report, lost []meta.SegmentID) time.Duration {
	live := int64(len(e.C.Running()))
	if e.BackfillRate <= 0 || live == 0 {
		return e.StageTimeout
	}
	var bytes int64
	for _, id := range lost {
		if s, ok := e.last.Snap.Segment(id); ok {
			bytes += s.ByteSize
		}
	}
	rate := max(e.BackfillRate/backfillStageShare, 4096)
	copyTime := time.Duration(bytes/(rate*live)) * time.Second
	addNote(fr, "waits up to %s for the heal: the stage timeout plus twice the %s the %d lost copies (%s) take at %s/s per broker over %d brokers",
		(e.StageTimeout + 2*copyTime).Round(time.Second), copyTime, len(lost), bytesize.Format(bytes), bytesize.Format(rate), live)
	return e.StageTimeout + 2*copyTime
}

// stageBackfillKill kills a follower A and, while bytes of its backfills
// are seen moving, a target B of them: everything must come back at RF on
// the survivors (A and B are left dead). A hold of the mass-failure brake,
// should one appear, is released as an operator would.
func (e *Env) stageBackfillKill(ctx context.Context, fr *Report) error {
	restore, err := e.slowBackfills(ctx, fr)
	defer restore()
	if err != nil {
		return fr.record(err)
	}
	a := e.freshestFollower()
	if a == nil {
		fr.notInjected("no running follower holds sealed replicas")
		return nil
	}
	leader := e.last.Leader
	targetsA := e.sealedOn(a.ID)
	segs := map[meta.SegmentID]meta.Segment{}
	for _, id := range targetsA {
		s, _ := e.last.Snap.Segment(id)
		segs[id] = *s
	}
	baseline := e.C.CopySizes()
	m, killA, _, err := e.strikeBroker(ctx, fr, harness.Target{Kind: harness.KindKill, Brokers: []*harness.Broker{a}}, targetsA,
		fmt.Sprintf("kill -9 %d, then a target of its backfills", a.ID))
	if err != nil {
		return err
	}
	b, seen, how, failure, err := e.strikeTarget(ctx, a, leader, targetsA, segs, baseline, killA)
	if err != nil || failure != "" {
		// With a failure broker a died, but the stage's fault (a target
		// killed while bytes move to it) did not happen: not injected,
		// the run fails.
		fr.Injected = failure == ""
		if failure != "" {
			fr.notInjected(failure)
		}
		return err
	}
	deadSeenA := e.deadSeen
	targetsB := e.lose(m.pre, b.ID)
	e.watchDead, e.deadSeen = b.ID, time.Time{}
	killB := time.Now()
	if _, err := e.C.Inject(ctx, harness.Target{Kind: harness.KindKill, Brokers: []*harness.Broker{b}}); err != nil {
		return fr.record(err)
	}
	fr.Broker = b.ID
	fr.What = fmt.Sprintf("kill -9 %d, then %d mid-backfill", a.ID, b.ID)
	e.noteStrike(fr, a, b, killB.Sub(killA), seen, how, deadSeenA.Sub(killA), !deadSeenA.IsZero())
	err = e.healTwoKills(ctx, fr, append(slices.Clone(targetsA), targetsB...), killB, m)
	return fatal(ctx, err, e)
}

// noteStrike logs and notes the second kill of the backfill-kill stage:
// broker b killed after a (by after), the target of the transfers seen;
// seenA is when a was first listed dead, if it was (listed).
func (e *Env) noteStrike(fr *Report, a, b *harness.Broker, after time.Duration, seen harness.Transfers, how string, seenA time.Duration, listed bool) {
	after = after.Round(time.Millisecond)
	e.logf("  kill -9 broker %d %s after broker %d: a target of %d transfers in flight (%d partial copies, %s of %s on disk), %d copies complete",
		b.ID, after, a.ID, seen.Partial+seen.Complete, seen.Partial, bytesize.Format(seen.Bytes), bytesize.Format(seen.BytesTotal), seen.Complete)
	addNote(fr, "broker %d killed %s after broker %d, while it was the target of %d of its backfills (%d partial: %s of %s on disk; %d full-size; chosen for: %s)",
		b.ID, after, a.ID, seen.Partial+seen.Complete, seen.Partial, bytesize.Format(seen.Bytes), bytesize.Format(seen.BytesTotal), seen.Complete, how)
	if listed {
		addNote(fr, "broker %d was listed dead by the pass that started %s after its kill", a.ID, seenA.Round(time.Millisecond))
	}
}

// healTwoKills waits for the heal after the backfill-kill stage's second
// kill (at killB), releasing a hold of the mass-failure brake as an
// operator would, and judges it: no segment may be lost or missing.
func (e *Env) healTwoKills(ctx context.Context, fr *Report, all []meta.SegmentID, killB time.Time, m measure) error {
	timeout := e.throttledTimeout(fr, all)
	rel := e.C.ReleaseHolds(ctx, e.Tick)
	err := e.heal(ctx, fr, "healing after two kills", killB, all, timeout, m)
	rel.Stop()
	if n := rel.Note(); n != "" {
		addNote(fr, "%s", n)
		e.logf("  %s", n)
	} else {
		addNote(fr, "the mass-failure brake did not hold")
	}
	e.timeFromDeath(fr, killB, true)
	if fr.Healed {
		if e.lastEv.DataLoss != 0 || e.lastEv.Sealed != e.Sealed {
			fr.Healed = false
			fr.Error = fmt.Sprintf("after healing: %d segments with no intact copy, %d of %d sealed segments in the metadata", e.lastEv.DataLoss, e.lastEv.Sealed, e.Sealed)
		}
	}
	return err
}

// strikeTarget picks the broker to kill once bytes are seen moving to it
// (a short copy of a's segments that grew since the scan before). When
// every set is recorded first, or no backfill shows in time, failure says
// the window was missed: the stage is not injected, never survived.
func (e *Env) strikeTarget(ctx context.Context, a *harness.Broker, leader meta.BrokerID, targetsA []meta.SegmentID, segs map[meta.SegmentID]meta.Segment, baseline map[meta.BrokerID]map[meta.SegmentID]int64, killA time.Time) (b *harness.Broker, seen harness.Transfers, how, failure string, err error) {
	lb := e.C.Broker(leader)
	deadline := killA.Add(e.StageTimeout)
	prev := map[meta.BrokerID]harness.Transfers{}
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return nil, seen, "", "", err
		}
		if time.Now().After(deadline) {
			return nil, seen, "", fmt.Sprintf("no backfill of broker %d's segments seen within %v", a.ID, e.StageTimeout), nil
		}
		found := e.C.ScanTransfers(segs, baseline, a.ID, leader)
		best := meta.BrokerID(0)
		for id, t := range found {
			if t.Partial > 0 && t.Bytes > prev[id].Bytes && prev[id].Partial > 0 && (best == 0 || t.Bytes > found[best].Bytes) {
				best = id
			}
		}
		if best != 0 {
			return e.C.Broker(best), found[best], fmt.Sprintf("bytes moving: %s on disk short of the sealed size, %s more than the scan before",
				bytesize.Format(found[best].Bytes), bytesize.Format(found[best].Bytes-prev[best].Bytes)), "", nil
		}
		prev = found
		if i%16 == 0 && lb != nil {
			mctx, cancel := context.WithTimeout(ctx, time.Second)
			snap, err := lb.Client.Metadata(mctx)
			cancel()
			if err == nil && movedOff(snap, targetsA, a.ID) == len(targetsA) {
				// Every set recorded before a scan caught bytes moving:
				// the fault this stage is about did not happen. It fails;
				// it is never counted as survived.
				missed := fmt.Sprintf("MISSED the in-flight window: every set of broker %d's segments was recorded before a scan saw bytes moving to a target (heal.backfill_bytes_per_second = %d for the run, a %dth of it for this stage)", a.ID, e.BackfillRate, backfillStageShare)
				e.logf("  %s", missed)
				return nil, seen, "", missed, nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nospareReason is how the heal pass reports a lost copy with nowhere to go.
const nospareReason = "no_spare_broker"

// stageNoSpare latches a copy while exactly RF brokers run: it must stay
// in its set, be reported no_spare_broker on every pass and stay readable
// elsewhere; once the dead return it is replaced.
func (e *Env) stageNoSpare(ctx context.Context, fr *Report) error {
	killed, err := e.killToFactor(ctx, fr)
	if killed < 0 || err != nil {
		return err
	}
	vs := e.pickVictims(1)
	if len(vs) == 0 {
		fr.notInjected("no healthy sealed copy to latch")
		return nil
	}
	v := vs[0]
	id, lb := v.seg.ID, v.b
	fr.Broker = lb.ID
	fr.What = fmt.Sprintf("latch %s on %d, %d running", id, lb.ID, len(e.C.Running()))
	e.logf("stage nospare: %d brokers run (replication factor %d: no spare); latch %s on broker %d", len(e.C.Running()), e.RF, id, lb.ID)
	latchAt := time.Now()
	in, err := e.C.Inject(ctx, harness.Target{Kind: harness.KindLatch, Brokers: []*harness.Broker{lb}, Segments: []meta.Segment{v.seg}})
	if err != nil {
		return e.fail(ctx, fr, err)
	}
	fr.Injected = true
	fr.Latched = in.Lost
	e.Aud.Forget(copyPath(lb, id))
	tally := harness.NewPassTally([]meta.SegmentID{id}, func(r *heal.Report, seg meta.SegmentID) bool {
		return r.FailedReason(seg) == heal.NoSpareBroker
	}, harness.NewPassFeed(latchAt))
	problems, reads := e.watchNoSpare(ctx, fr, tally, v)
	hits, misses := tally.Hits[id], tally.Misses[id]
	addNote(fr, "%d broker(s) killed first; reported %s on %d of the %d passes from its first report on (%d did not); %s; %d intact copies audited readable while latched",
		killed, nospareReason, hits, hits+misses, misses, tally.Feed.Summary(), reads)
	if len(problems) > 0 {
		e.logf("  nospare: %s", strings.Join(problems, "; "))
	}
	fr.Detected = tally.Detected()
	return e.sparesBack(ctx, fr, v, problems)
}

// killToFactor kills followers, each after the last healed (no brake),
// until RF run; -1 when the stage cannot go on.
func (e *Env) killToFactor(ctx context.Context, fr *Report) (int, error) {
	if len(e.C.Running()) < e.RF || !e.lastEv.OK() {
		if err := e.reviveAll(ctx); err != nil {
			return -1, fr.record(err)
		}
	}
	killed := 0
	for len(e.C.Running()) > e.RF {
		k := e.follower(e.holdsSealed)
		if k == nil {
			fr.notInjected("no follower to kill down to the replication factor")
			return -1, nil
		}
		e.logf("stage nospare: kill -9 broker %d (%d running, want %d = replication factor)", k.ID, len(e.C.Running()), e.RF)
		if _, err := e.C.Inject(ctx, harness.Target{Kind: harness.KindKill, Brokers: []*harness.Broker{k}}); err != nil {
			return -1, fr.record(err)
		}
		killed++
		if _, err := e.settle(ctx, "re-replicating", time.Now()); err != nil {
			fr.Error = fmt.Sprintf("after killing broker %d to leave no spare: %v", k.ID, err)
			return -1, fatal(ctx, err, e)
		}
	}
	return killed, nil
}

// sparesBack revives the dead: the latched copy must then be replaced.
func (e *Env) sparesBack(ctx context.Context, fr *Report, v victim, problems problems) error {
	id, lb := v.seg.ID, v.b
	sizeBefore := map[meta.BrokerID]int64{}
	for _, b := range e.C.Brokers() {
		if fi, err := os.Stat(copyPath(b, id)); err == nil && b.ID != lb.ID {
			sizeBefore[b.ID] = fi.Size()
		}
	}
	setBefore := []meta.BrokerID{}
	if s, ok := e.last.Snap.Segment(id); ok {
		setBefore = slices.Clone(s.Replicas)
	}
	restartAt := time.Now()
	if _, err := e.reviveDead(ctx, ": a spare again"); err != nil {
		fr.judge(fr.Detected, append(problems, err.Error())...)
		return fatal(ctx, err, e)
	}
	before := e.C.MarkBackfill(ctx)
	healed := Report{Stage: "nospare-heal"}
	err := e.WaitHealed(ctx, &healed, "replacing the latched copy", restartAt, []meta.SegmentID{id}, e.StageTimeout)
	fr.Passes += healed.Passes
	fr.BytesRereplicated = before.Since(ctx, e.C)
	s, ok := e.last.Snap.Segment(id)
	for i := 0; ok && i < len(s.Replicas); i++ {
		if r := s.Replicas[i]; !slices.Contains(setBefore, r) {
			fr.BytesEstimated += max(v.seg.ByteSize+store.FooterSize-sizeBefore[r], 0)
		}
	}
	if err != nil {
		fr.judge(fr.Detected, append(problems, "after the restarts: "+err.Error())...)
		return fatal(ctx, err, e)
	}
	if ok {
		if lc, listed := e.last.Copies[lb.ID][id]; s.HasReplica(lb.ID) && listed && lc.Latched {
			problems.add("the latched copy on broker %d is still in %s's set after the restarts", lb.ID, id)
		}
		addNote(fr, "after the restarts %s's set is %v (latched copy was on %d); healthy %s after the first restart",
			id, s.Replicas, lb.ID, FormatSeconds(healed.SecondsToHeal))
	}
	fr.SecondsToHeal, fr.healedAt, fr.Affected = healed.SecondsToHeal, healed.healedAt, healed.Affected
	fr.judge(fr.Detected, problems...)
	return nil
}

// noSparePasses is how many heal passes the nospare and lost stages watch
// after the fault is first reported.
const noSparePasses = 10

// watchNoSpare watches the latched segment reported no_spare_broker
// (watchReported), checking on each poll that it keeps RF replicas with
// the latched copy among them and its other copies readable.
func (e *Env) watchNoSpare(ctx context.Context, fr *Report, tally *harness.PassTally, v victim) (out problems, reads int) {
	id := v.seg.ID
	out = e.watchReported(ctx, fr, tally, []meta.SegmentID{id}, nospareReason, time.Now().Add(e.StageTimeout), func(view *harness.View, add func(string, ...any)) {
		s, ok := view.Snap.Segment(id)
		switch {
		case !ok:
			add("%s left the metadata", id)
			return
		case len(s.Replicas) != e.RF:
			add("%s has %d replicas %v, want %d", id, len(s.Replicas), s.Replicas, e.RF)
		case !s.HasReplica(v.b.ID):
			add("the latched copy on broker %d left %s's set %v with no spare", v.b.ID, id, s.Replicas)
		}
		for _, r := range s.Replicas {
			if br := e.C.Broker(r); br != nil && r != v.b.ID {
				if err := harness.AuditCopy(copyPath(br, id), *s); err != nil {
					add("intact copy of %s on broker %d not readable: %v", id, r, err)
				} else {
					reads++
				}
			}
		}
	})
	out.add("%s", tally.Feed.Problem())
	return out, reads
}

// watchReported reads tally's passes until each of ids was reported (as
// what) on noSparePasses of them, or deadline; once a second it polls the
// cluster: another segment turning unhealthy is a problem, and check, when
// set, judges the view. It returns the problems, the tally's verdict
// among them (never reported, too few, a pass that did not report).
func (e *Env) watchReported(ctx context.Context, fr *Report, tally *harness.PassTally, ids []meta.SegmentID, what string, deadline time.Time, check func(*harness.View, func(string, ...any))) (out problems) {
	p := e.progress("watching "+what+" reported", noSparePasses)
	var lastFull time.Time
	e.watchPasses(ctx, fr, tally.Feed, deadline, func(recs []plugin.PassRecord, _ error) bool {
		for i := range recs {
			tally.Observe(&recs[i])
		}
		if len(recs) > 0 {
			p.Set(min(tally.MinHits(), noSparePasses), noSparePasses, fmt.Sprintf("%d not reporting", tally.MissCount()))
		}
		if time.Since(lastFull) > time.Second {
			lastFull = time.Now()
			if view, err := harness.Poll(ctx, e.C, false); err == nil {
				for other, why := range e.Observe(view).Unhealthy {
					if !slices.Contains(ids, other) {
						out.add("%s became unhealthy: %s", other, why)
					}
				}
				if check != nil {
					check(view, out.add)
				}
			}
		}
		return tally.Detected() && tally.MinHits() >= noSparePasses
	})
	if tally.Held(noSparePasses) {
		p.Finish(fmt.Sprintf("reported on every one of %d passes", tally.MinHits()))
	} else {
		p.Finish("not reported as required")
	}
	for _, why := range tally.Shortfall(what, noSparePasses, e.StageTimeout) {
		out.add("%s", why)
	}
	return out
}

// lostReported: the pass lists seg lost, or failed for want of any intact
// copy.
func lostReported(r *heal.Report, seg meta.SegmentID) bool {
	if r.IsLost(seg) {
		return true
	}
	why := r.FailedReason(seg)
	return why == heal.NoIntactSource || why == heal.AllReplicasDead
}

// stageLost destroys every copy of X (deleted) and Y (damaged in place):
// both must be reported lost on every pass (ten at least), nothing else
// turn unhealthy, no file of Y go; then both are acknowledged.
func (e *Env) stageLost(ctx context.Context, fr *Report) error {
	// The damage must land as one event. Made file after file under a
	// running cluster, a heal pass between two steps may rightly replace a
	// damaged copy from one not yet damaged (or resume a leftover from it),
	// and the segment is then not lost: the stage would judge a race, not
	// heal. So the stage waits for a pass that planned nothing, picks its
	// victims from that view, and damages every copy with every broker
	// stopped.
	v, err := e.C.WaitSettled(ctx, time.Now(), e.StageTimeout, e.Poll)
	if err != nil {
		return e.fail(ctx, fr, fmt.Errorf("before the fault: %w", err))
	}
	e.Observe(v)
	vs := e.pickVictims(2)
	if len(vs) < 2 {
		fr.notInjected("fewer than two healthy sealed segments")
		return nil
	}
	r := &lostRun{e: e, fr: fr, x: vs[0].seg, y: vs[1].seg, damage: harness.KindBitflip, yFiles: map[meta.BrokerID]harness.Fault{},
		acked: map[meta.SegmentID]bool{}}
	x, y := r.x, r.y
	if !e.scrubberAdvertised() {
		r.damage = harness.KindTruncate
	}
	fr.What = fmt.Sprintf("delete all of %s, %s all of %s", x.ID, r.damage, y.ID)
	e.logf("stage lost: delete every copy of %s; %s every copy of %s", x.ID, r.damage, y.ID)
	r.start = time.Now()
	if err := e.C.Frozen(func() error {
		r.nx, r.ny = r.hit(x, harness.KindDelete), r.hit(y, r.damage)
		return nil
	}); err != nil {
		return e.fail(ctx, fr, fmt.Errorf("damaging %s and %s with every broker stopped: %w", x.ID, y.ID, err))
	}
	e.logf("  every copy damaged with every broker stopped (SIGSTOP, then SIGCONT): the fault lands as one event")
	if r.nx == 0 && r.ny == 0 {
		fr.notInjected(fmt.Sprintf("no copy file of %s or %s found to destroy", x.ID, y.ID))
		return nil
	}
	fr.Injected = true
	if r.extra > 0 {
		addNote(fr, "%d of the %d copy files destroyed lay outside their segment's replica set (left by earlier stages)", r.extra, r.nx+r.ny)
	}
	if r.nx < len(x.Replicas) || r.ny < len(y.Replicas) {
		fr.Error = fmt.Sprintf("only %d of %d copies of %s and %d of %d of %s destroyed: %s", r.nx, len(x.Replicas), x.ID, r.ny, len(y.Replicas), y.ID, fr.Error)
		return nil
	}
	r.ids = []meta.SegmentID{x.ID, y.ID}
	r.tally = harness.NewPassTally(r.ids, lostReported, harness.NewPassFeed(r.start))
	r.problems = e.watchReported(ctx, fr, r.tally, r.ids, "lost", r.start.Add(e.StageTimeout), nil)
	if err := ctx.Err(); err != nil {
		return err
	}
	fr.Detected = r.tally.Detected()
	r.checkKept()
	r.acknowledge(ctx)
	r.finish()
	return nil
}

// lostRun is one run of the lost stage: X is deleted, Y damaged in place.
type lostRun struct {
	e      *Env
	fr     *Report
	x, y   meta.Segment
	damage harness.Kind // what is done to Y's copies: bitflip, or truncate
	ids    []meta.SegmentID
	start  time.Time
	// nx and ny are the copies of X and Y destroyed, extra those of them
	// outside the segment's replica set.
	nx, ny, extra int
	// yFiles are Y's damaged files by broker, as the fault left them;
	// kept how many of them the cluster left so.
	yFiles map[meta.BrokerID]harness.Fault
	kept   int
	// tally judges every heal pass that ended after the fault.
	tally    *harness.PassTally
	acked    map[meta.SegmentID]bool
	problems problems
}

// hit destroys every copy file of seg on any broker, leftovers too.
func (r *lostRun) hit(seg meta.Segment, kind harness.Kind) int {
	e, fr := r.e, r.fr
	n := 0
	var first *harness.Fault
	for _, b := range e.C.Brokers() {
		path := copyPath(b, seg.ID)
		if _, err := os.Stat(path); err != nil {
			if seg.HasReplica(b.ID) {
				fr.Error = fmt.Sprintf("%s has no file on its replica %d: %v", seg.ID, b.ID, err)
			}
			continue
		}
		var df harness.Fault
		var err error
		if first == nil {
			df, err = harness.DamageCopy(kind, path, seg.ByteSize, e.Rand)
		} else {
			df, err = harness.RepeatFault(*first, path)
		}
		if err == nil && first == nil {
			first = &df
		}
		e.Aud.Forget(path)
		switch {
		case err != nil && seg.HasReplica(b.ID):
			fr.Error = err.Error() // an intact replica: the segment is not lost
			continue
		case err != nil:
			addNote(fr, "%s's leftover copy on broker %d (outside its replica set) was not damaged: %v", seg.ID, b.ID, err)
			continue
		case !seg.HasReplica(b.ID):
			r.extra++
		}
		if kind != harness.KindDelete {
			r.yFiles[b.ID] = df
		}
		fr.Copies = append(fr.Copies, df)
		e.logf("  %s on broker %d: %s", seg.ID, b.ID, describeFault(df))
		n++
	}
	return n
}

// checkKept: none of Y's damaged files may go, and its replicas' stay as
// the fault left them; a leftover collected or cut back is noted.
func (r *lostRun) checkKept() {
	y := r.y
	for owner, df := range r.yFiles {
		path, size, inSet := df.Path, df.SizeAfter, y.HasReplica(owner)
		fi, err := os.Stat(path)
		switch {
		case err != nil && !inSet && r.tally.Collected[heal.CopyRef{Segment: y.ID, Broker: owner}]:
			addNote(r.fr, "%s's leftover copy %s (outside its replica set) was collected by a pass that saw every replica intact (before the scrubber found them damaged)", y.ID, path)
		case err != nil:
			r.problems.add("damaged copy %s of %s gone: %v", path, y.ID, err)
		case fi.Size() != size && inSet:
			r.problems.add("damaged replica copy %s of %s changed size: %d, was %d after the fault", path, y.ID, fi.Size(), size)
		case fi.Size() != size:
			addNote(r.fr, "%s's leftover copy %s (outside its replica set) was a backfill target and cut back from %d to %d bytes, its valid frames; the file is kept", y.ID, path, size, fi.Size())
			r.kept++
		default:
			r.kept++
		}
	}
}

// acknowledge has an operator acknowledge both segments; the report must
// mark them.
func (r *lostRun) acknowledge(ctx context.Context) {
	e, ids := r.e, r.ids
	if lb := e.C.Leader(ctx); lb == nil {
		r.problems.add("no running broker names a leader to acknowledge through")
	} else {
		ab := e.pickAcknowledger(lb.ID)
		for _, id := range ids {
			if err := harness.Acknowledge(ctx, ab, id); err != nil {
				r.problems.add("acknowledging %s through broker %d: %v", id, ab.ID, err)
			}
		}
		e.logf("  acknowledged %s and %s through broker %d's POST /v1/heal/acknowledge/{id}", r.x.ID, r.y.ID, ab.ID)
		e.watchPasses(ctx, r.fr, r.tally.Feed, time.Now().Add(max(20*e.Tick, 5*time.Second)), func(recs []plugin.PassRecord, _ error) bool {
			for _, p := range recs {
				r.tally.Observe(&p)
				for _, l := range p.Report.Lost {
					if l.Acknowledged && slices.Contains(ids, l.Segment) {
						r.acked[l.Segment] = true
					}
				}
			}
			return len(r.acked) == len(ids)
		})
		for _, id := range ids {
			if !r.acked[id] {
				r.problems.add("no heal report marks %s acknowledged", id)
			}
		}
	}
	if r.tally.MissCount() > 0 {
		r.problems.add("%d misses in all (counted through the acknowledgement)", r.tally.MissCount())
	}
	r.problems.add("%s", r.tally.Feed.Problem())
}

// finish records both destroyed segments and the stage's verdict.
func (r *lostRun) finish() {
	fr, x, y, tally := r.fr, r.x, r.y, r.tally
	for _, seg := range []meta.Segment{x, y} {
		copies := r.nx
		if seg.ID == y.ID {
			copies = r.ny
		}
		ds := Destroyed{
			Segment: seg.ID, Copies: copies, PassesReported: tally.Hits[seg.ID],
			PassesNotReporting: tally.Misses[seg.ID], Acknowledged: r.acked[seg.ID],
		}
		if seg.ID == x.ID {
			ds.How = "every copy's file deleted"
		} else {
			ds.How = fmt.Sprintf("every copy damaged in place (%s)", r.damage)
			ds.FilesKept = r.kept
		}
		if at := tally.FirstAt[seg.ID]; !at.IsZero() {
			ds.ReportedAfterSeconds = Seconds(at.Sub(r.start))
		}
		fr.Destroyed = append(fr.Destroyed, ds)
	}
	addNote(fr, "seconds_to_heal is, for this stage, from the fault to the end of the first pass by which both were reported lost; destroyed on purpose: %s reported lost on %d passes, %s on %d (%d passes did not); %s; %d of %d damaged files of %s kept by the cluster; acknowledged %d of 2",
		x.ID, tally.Hits[x.ID], y.ID, tally.Hits[y.ID], tally.MissCount(), tally.Feed.Summary(), r.kept, len(r.yFiles), y.ID, len(r.acked))
	// Healed, for this stage, means reported as required: the data is
	// gone by design.
	fr.judge(fr.Detected, r.problems...)
	if fr.Error != "" {
		r.e.logf("  lost: %s", fr.Error)
	}
	if fr.Healed {
		last := r.start
		for _, t := range tally.FirstAt {
			if t.After(last) {
				last = t
			}
		}
		fr.SecondsToHeal = Seconds(last.Sub(r.start)) // to both reported lost
	}
}

// pickAcknowledger is a running follower when there is one (its admin API
// forwards to the leader, as an operator's call to any broker would be),
// else the leader.
func (e *Env) pickAcknowledger(leader meta.BrokerID) *harness.Broker {
	var lb *harness.Broker
	for _, b := range e.C.Running() {
		if b.ID != leader {
			return b
		}
		lb = b
	}
	return lb
}
