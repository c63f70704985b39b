package stage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/malachi-log/malachi/store"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
)

// Options are the run's settings the stages read; the demo's flags fill
// them.
type Options struct {
	Brokers     int
	RF          int
	Segments    int   // sealed segments loaded before the stages
	SegmentSize int64 // bytes of records per segment
	// Copies is how many copies each disk fault and the latch stage hit.
	Copies       int
	Tick         time.Duration // heal.tick
	Grace        time.Duration // heal.grace
	Poll         time.Duration // how often a wait polls the brokers
	ScrubEvery   time.Duration // heal.scrub_interval; 0: no scrubber
	BackfillRate int64         // heal.backfill_bytes_per_second; 0: no cap
	// StageTimeout bounds each stage's heal.
	StageTimeout time.Duration
	// Chosen: the stages were named (--faults), so a bit flip runs with
	// no scrubber to show it undetected instead of being skipped.
	Chosen bool
	// CLI is the malachi binary the lifecycle stages give the operator's
	// commands through, judging what each prints; "": the admin API.
	CLI string
}

// Sink is where a stage says what it does: a line of narration, and a
// progress per wait.
type Sink interface {
	Logf(format string, args ...any)
	Progress(label string, total int) Progress
}

// Progress shows one wait's advance: done of total (total may grow) with
// a short note, then a closing line.
type Progress interface {
	Set(done, total int, note string)
	Finish(msg string)
}

// Env is the cluster the stages run in and what they keep between them.
// The caller sets Options, C, Aud, Rand, Out, Sealed and SegmentBytes;
// one goroutine runs the stages and the waits.
type Env struct {
	Options
	C    *harness.Cluster
	Aud  *harness.Auditor
	Rand *rand.Rand // the victims and fault positions, from the run's seed
	Out  Sink
	// Sealed counts the sealed segments the run made: loaded, written by
	// the stages, sealed in Kafka partitions. The final check wants each.
	Sealed int
	// SegmentBytes are the frames' bytes of one loaded segment.
	SegmentBytes int64
	// Audits counts the auditor's full reads of a copy file that passed
	// (a cached result is not counted again).
	Audits int

	last   *harness.View
	lastEv harness.Evaluation
	// confirmed: /v1/copies carries a confirmed flag per copy.
	confirmed bool
	killed    *harness.Broker // by the kill stage, until restarted
	// watchDead is a broker just killed; deadSeen the start of the first
	// heal pass that counted it dead.
	watchDead meta.BrokerID
	deadSeen  time.Time
	// partitionSealed counts the sealed partition segments in Sealed.
	partitionSealed int
}

func (e *Env) logf(format string, args ...any) { e.Out.Logf(format, args...) }

// PartitionSealed is how many of Sealed are Kafka partition segments.
func (e *Env) PartitionSealed() int { return e.partitionSealed }

func (e *Env) progress(label string, total int) Progress { return e.Out.Progress(label, total) }

// Last is the last full view and its evaluation; nil before the first.
func (e *Env) Last() (*harness.View, harness.Evaluation) { return e.last, e.lastEv }

// Confirmed says whether the brokers confirm each copy (/v1/copies), as
// read by Baseline.
func (e *Env) Confirmed() bool { return e.confirmed }

// Run runs stage name: it restarts the dead first when the row says so,
// runs the row and times it. An error is returned only when the run
// cannot go on (interrupted, a broker died on its own, a broker that would
// not restart); a stage that does not heal says so in its Report.
func (e *Env) Run(ctx context.Context, name string) (Report, error) {
	e.logf("")
	fr := Report{Stage: name, Began: time.Now()}
	r := row(name)
	err := fmt.Errorf("unknown stage %q", name)
	if r.run != nil {
		err = nil
		if r.revives {
			err = e.reviveAll(ctx)
		}
		if err != nil {
			fr.Error = err.Error()
		} else {
			err = r.run(e, ctx, &fr)
		}
	}
	e.watchDead = 0 // a stage's kill is watched until it ends
	fr.Ended = time.Now()
	return fr, err
}

// Baseline waits for the loaded cluster to be healthy, notes whether the
// brokers confirm copies and counts its sealed segments.
func (e *Env) Baseline(ctx context.Context) error {
	base := Report{Stage: "baseline"}
	if err := e.WaitHealed(ctx, &base, "verifying loaded copies", time.Now(), nil, e.StageTimeout); err != nil {
		return err
	}
	e.confirmed = e.copiesCarryConfirmed()
	e.Sealed = e.lastEv.Sealed
	return nil
}

// Observe evaluates a view and keeps it.
func (e *Env) Observe(v *harness.View) harness.Evaluation {
	ev := harness.Evaluate(v, e.RF, e.C.Live(), e.CheckCopy)
	e.keep(v, ev)
	return ev
}

// keep counts a view's partition segments and, when it is a full view,
// keeps it and its evaluation: stages pick victims from the last.
func (e *Env) keep(v *harness.View, ev harness.Evaluation) {
	e.notePartitionSegments(v.Snap)
	if !v.MetadataOnly {
		e.last, e.lastEv = v, ev
	}
}

// CheckCopy: the broker's word (harness.CheckCopy, and confirmed when
// exposed), then the run's own audit of the file.
func (e *Env) CheckCopy(b meta.BrokerID, seg meta.Segment, lc admin.Copy, listed bool) string {
	if bad := harness.CheckCopy(seg, lc, listed); bad != "" {
		return bad
	}
	if lc.Confirmed != nil && !*lc.Confirmed {
		return "not confirmed by its broker"
	}
	br := e.C.Broker(b)
	if br == nil {
		return "unknown broker"
	}
	read := e.Aud.BytesRead
	err := e.Aud.Check(copyPath(br, seg.ID), seg)
	if e.Aud.BytesRead != read && err == nil {
		e.Audits++ // the auditor read the file (not a cached result)
	}
	if err != nil {
		if os.IsNotExist(err) {
			return "listed by its broker but no file on disk"
		}
		return "audit: " + err.Error()
	}
	return ""
}

// copiesCarryConfirmed reports whether /v1/copies says per copy whether its
// broker confirmed it.
func (e *Env) copiesCarryConfirmed() bool {
	if e.last == nil {
		return false
	}
	for _, cs := range e.last.Copies {
		for _, lc := range cs {
			return lc.Confirmed != nil
		}
	}
	return false
}

// readPasses reads the passes of c's histories feed has not returned yet
// and counts them in fr (their number, the unread, the longest, the time
// in backfills), noting the start of the first that listed e.watchDead
// dead. A history that did not answer (the error) is read on the next call.
func (e *Env) readPasses(ctx context.Context, c *harness.Cluster, feed *harness.PassFeed, fr *Report) ([]plugin.PassRecord, error) {
	unread := feed.Unread
	recs, err := feed.Next(ctx, c)
	fr.PassesUnread += feed.Unread - unread
	for i := range recs {
		p := &recs[i]
		fr.Passes++
		took := p.Ended.Sub(p.Started).Seconds()
		fr.MaxPassSeconds = max(fr.MaxPassSeconds, took)
		if p.Report.Backfills > 0 {
			fr.BackfillPassSeconds += took
		}
		if e.watchDead != 0 && e.deadSeen.IsZero() && slices.Contains(p.Report.Dead, e.watchDead) {
			e.deadSeen = p.Started
		}
	}
	return recs, err
}

// watchPasses is the stages' watch over the heal passes: every quarter
// tick it reads the passes feed has not returned (readPasses) and hands
// them, with the feed's error, to round, until round says done, the
// deadline passes or ctx ends. It reports whether round said done.
func (e *Env) watchPasses(ctx context.Context, fr *Report, feed *harness.PassFeed, deadline time.Time, round func([]plugin.PassRecord, error) bool) bool {
	for ; ctx.Err() == nil && time.Now().Before(deadline); time.Sleep(max(e.Tick/4, 10*time.Millisecond)) {
		if round(e.readPasses(ctx, e.C, feed, fr)) {
			return true
		}
	}
	return false
}

// WaitHealed is harness.WaitHealed with a progress over the segments
// seen unhealthy (targets: known hit) and every pass since start counted
// in fr; it sets fr.Healed, SecondsToHeal and Affected. A pass left
// unread is an error too. For the stage "baseline" every sealed segment
// counts, and the loaded ones must all be sealed.
func (e *Env) WaitHealed(ctx context.Context, fr *Report, label string, start time.Time, targets []meta.SegmentID, timeout time.Duration) error {
	feed := harness.NewPassFeed(start)
	affected := map[meta.SegmentID]bool{}
	for _, id := range targets {
		affected[id] = true
	}
	baseline := fr.Stage == "baseline"
	p := e.progress(label, max(len(affected), 1))
	seen := func(v *harness.View, ev harness.Evaluation) {
		e.keep(v, ev)
		_, _ = e.readPasses(ctx, e.C, feed, fr)
		for id := range ev.Unhealthy {
			affected[id] = true
		}
		for _, s := range v.Snap.Segments {
			if baseline && s.Sealed {
				affected[s.ID] = true
			}
		}
		healthy := 0
		for id := range affected {
			if _, bad := ev.Unhealthy[id]; !bad {
				healthy++
			}
		}
		fr.Affected = len(affected)
		p.Set(healthy, max(len(affected), 1), progressNote(v, ev))
	}
	pending := func(v *harness.View, ev harness.Evaluation) string {
		if baseline && ev.Sealed < e.Segments {
			return fmt.Sprintf("%d of %d segments sealed", ev.Sealed, e.Segments)
		}
		if clean, why := v.PassClean(); !e.confirmed && !clean {
			return why
		}
		return ""
	}
	v, err := harness.WaitHealed(ctx, e.C, harness.HealWait{RF: e.RF, Check: e.CheckCopy, Every: e.Poll, Seen: seen, Pending: pending}, timeout)
	if err != nil {
		p.Finish("not healthy: " + harness.FirstLine(err.Error(), 80))
		return err
	}
	fr.Healed = true
	fr.healedAt = v.At
	fr.SecondsToHeal = Seconds(v.At.Sub(start))
	p.Finish(fmt.Sprintf("healthy after %s (%d segments affected)", FormatSeconds(fr.SecondsToHeal), len(affected)))
	if why := feed.Problem(); why != "" {
		return fmt.Errorf("healthy, but %s", why)
	}
	return nil
}

// settle waits, as WaitHealed, for every segment healthy again after a
// step beside a stage's fault (from: when the step began), its passes not
// counted in the stage; it returns the seconds it took.
func (e *Env) settle(ctx context.Context, label string, from time.Time) (*float64, error) {
	fr := Report{Stage: "settle"}
	err := e.WaitHealed(ctx, &fr, label, from, nil, e.StageTimeout)
	return fr.SecondsToHeal, err
}

// progressNote is the progress's note on a view: the first broker that
// did not answer, the unhealthy count, or a verification awaited.
func progressNote(v *harness.View, ev harness.Evaluation) string {
	switch {
	case len(v.Unreachable) > 0:
		return v.Unreachable[0]
	case len(ev.Unhealthy) > 0:
		return fmt.Sprintf("%d unhealthy", len(ev.Unhealthy))
	}
	return "awaiting verification"
}

// copyPath is where broker b keeps its copy of segment id, "" when it
// holds none (harness.Broker.CopyPath knows the layout).
func copyPath(b *harness.Broker, id meta.SegmentID) string {
	p, _ := b.CopyPath(id)
	return p
}

// SealedCount counts the sealed segments in the metadata, the Kafka
// partitions' left out (notePartitionSegments counts those).
func (e *Env) SealedCount(ctx context.Context) (int, error) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	snap, err := e.C.LeaderClient(ctx).Metadata(pctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range snap.Segments {
		if s.Sealed && !isPartitionSegment(s.ID) {
			n++
		}
	}
	return n, nil
}

// notePartitionSegments counts the partition segments sealed since the
// last call in Sealed (the Kafka listener seals one when a replica
// fails): the final check wants every sealed segment counted.
func (e *Env) notePartitionSegments(snap meta.Snapshot) {
	n := 0
	for _, s := range snap.Segments {
		if isPartitionSegment(s.ID) && s.Sealed {
			n++
		}
	}
	if n > e.partitionSealed {
		e.Sealed += n - e.partitionSealed
		e.partitionSealed = n
	}
}

// CountSealed sets Sealed to the sealed segments of segments, the
// partitions' too: later partition seals are counted from there.
func (e *Env) CountSealed(segments map[meta.SegmentID]meta.Segment) {
	e.Sealed, e.partitionSealed = 0, 0
	for _, s := range segments {
		if s.Sealed {
			e.Sealed++
			if isPartitionSegment(s.ID) {
				e.partitionSealed++
			}
		}
	}
}

// isPartitionSegment says id is a segment of a Kafka partition's chain.
func isPartitionSegment(id meta.SegmentID) bool {
	_, _, _, ok := meta.ParsePartitionSegment(id)
	return ok
}

// RecordShape splits a segment of size bytes of frames into records of at
// most 4 KiB frames: n records of recordSize payload bytes, n×(16+recordSize)
// as close to size as whole records allow.
func RecordShape(size int64) (n, recordSize int) {
	const frame = 4096
	if size <= frame {
		return 1, int(max(size-store.FrameHeaderSize, 1))
	}
	return int(size / frame), frame - store.FrameHeaderSize
}

// LoopDiskSize is room for segs copies of per bytes each, a quarter
// more, and ext4's own (the image is sparse).
func LoopDiskSize(segs, per int64) int64 {
	return max(64<<20, (segs*per*5/4+48<<20)&^(1<<20-1))
}
