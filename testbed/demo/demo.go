package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/kafkaload"

	"github.com/malachi-log/malachi/meta"
)

// demo is one run of `malachi demo`.
type demo struct {
	o      Options
	out    io.Writer // progress and narration
	tty    bool
	c      *harness.Cluster
	aud    *harness.Auditor
	rng    *rand.Rand
	rep    *Report
	last   *harness.View
	lastEv harness.Evaluation
	// brokerVerified: /v1/copies carries a confirmed flag per copy.
	brokerVerified bool
	killed         *harness.Broker // by the kill stage, until restarted
	// watchDead is a broker just killed; deadSeen the start of the first
	// heal pass that counted it dead.
	watchDead meta.BrokerID
	deadSeen  time.Time
	madeDir   bool // the demo created o.Dir (a temporary directory)
	// auditsPassed counts the auditor's full reads of a copy file that
	// passed (a cached result is not counted again).
	auditsPassed int
	seed         uint64 // the run's seed (--seed, or drawn from the clock)
	// clients is the --clients load (clients.go), nil without;
	// partitionSealed the sealed partition segments counted in
	// rep.Segments so far.
	clients         *kafkaload.Load
	partitionSealed int
}

// Run runs the demo and returns the process exit status.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) int {
	if o.Compare {
		return runCompare(ctx, o, stdout, stderr)
	}
	out := stdout
	if o.JSON {
		out = stderr
	}
	seed := o.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	d := &demo{
		o: o, out: out, tty: isTerminal(out), aud: harness.NewAuditor(), seed: seed,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		rep: &Report{Brokers: o.Brokers, ReplicationFactor: o.RF, Segments: o.Segments, Config: map[string]string{
			"heal.tick": o.Tick.String(), "heal.grace": o.Grace.String(), "heal.settle_batch": fmt.Sprint(o.SettleBatch),
			"heal.scrub_interval": o.ScrubEvery.String(), "heal.scrub_bytes_per_second": fmt.Sprint(o.ScrubRate),
			"heal.backfill_bytes_per_second": fmt.Sprint(o.BackfillRate),
			"raft.heartbeat_timeout":         o.RaftTimeout.String(), "raft.election_timeout": o.RaftTimeout.String(), "poll": o.Poll.String(), "insecure": fmt.Sprint(o.Insecure),
		}},
	}
	d.rep.Notes = append(d.rep.Notes, fmt.Sprintf("seed %d (--seed to replay the same victims)", seed))
	for st, why := range o.skippedStages() {
		d.rep.Faults = append(d.rep.Faults, FaultReport{Stage: st, Skipped: why})
	}
	start := time.Now()
	runErr := d.run(ctx)
	d.finishClients(ctx)
	if d.c != nil && d.last != nil && ctx.Err() == nil {
		if v, err := harness.Poll(ctx, d.c, false); err == nil {
			d.observe(v)
		}
	}
	d.rep.TotalSeconds = time.Since(start).Seconds()
	sortFaults(d.rep.Faults)
	final, failedByPass := d.finalCheck(d.rep.heldDestroyed())
	d.rep.AuditBytes = d.aud.BytesRead
	d.rep.Summary.CopiesVerified = d.auditsPassed
	d.rep.Verification = d.verificationText()
	d.rep.finish(final, failedByPass, runErr)
	d.cleanup(runErr == nil && d.rep.OK)
	if o.JSON {
		_ = d.rep.writeJSON(stdout)
	} else {
		d.rep.writeText(stdout)
	}
	if d.rep.OK {
		return 0
	}
	return 1
}

func sortFaults(fs []FaultReport) {
	pos := func(s string) int { return slices.Index(AllStages, s) }
	sort.SliceStable(fs, func(i, j int) bool { return pos(fs[i].Stage) < pos(fs[j].Stage) })
}

func (d *demo) logf(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) verificationText() []string {
	v := []string{
		fmt.Sprintf("metadata: every sealed segment has %d replicas, all on running brokers", d.o.RF),
		"brokers: each replica's broker lists the copy (GET /v1/copies) sealed, not latched, and exactly byte_size + 40 footer bytes",
		"audit: the demo read every such copy file itself and checked each frame's CRC32C and offset, the footer, and the frames' checksum against the metadata",
	}
	if d.brokerVerified {
		v = append(v, "broker confirmation: each copy reports confirmed (GET /v1/copies)")
	} else {
		v = append(v, "heal pass: the leader's latest heal report (GET /v1/status), at or after the metadata index, shows no under-replicated, failed or unsettled (unconfirmed) copy")
	}
	return v
}

// cleanup stops the cluster unless --keep, and removes its directory when
// the demo made it and everything healed.
func (d *demo) cleanup(ok bool) {
	if d.c == nil {
		if d.madeDir {
			_ = os.RemoveAll(d.o.Dir) // no broker ever ran: nothing to look at
		}
		return
	}
	if d.o.Keep {
		d.rep.Dir = d.o.Dir
		d.logf("--keep: the cluster keeps running; admin APIs:")
		for _, b := range d.c.Running() {
			d.logf("  broker %d  admin %s  data %s  log %s", b.ID, b.Admin, b.Dir, b.LogPath)
		}
		if run := d.c.Running(); len(run) > 0 {
			d.logf("  ask it with: malachi status --admin %s %s", run[0].Admin, strings.Join(d.c.CLIFlags(), " "))
		}
		for _, line := range d.kafkaManual() {
			d.logf("%s", line)
		}
		return
	}
	d.c.Stop()
	if ok && d.madeDir {
		_ = os.RemoveAll(d.o.Dir)
		return
	}
	d.rep.Dir = d.o.Dir
}

func (d *demo) run(ctx context.Context) error {
	if d.o.Dir == "" {
		dir, err := os.MkdirTemp("", "malachi-demo-")
		if err != nil {
			return err
		}
		d.o.Dir, d.madeDir = dir, true
	} else {
		if err := os.MkdirAll(d.o.Dir, 0o755); err != nil {
			return fmt.Errorf("--dir %s: %w", d.o.Dir, err)
		}
		if ents, err := os.ReadDir(d.o.Dir); err != nil {
			return fmt.Errorf("--dir %s: %w", d.o.Dir, err)
		} else if len(ents) > 0 {
			return fmt.Errorf("--dir %s is not empty (it holds %s): the demo starts a new cluster in an empty directory", d.o.Dir, ents[0].Name())
		}
		d.rep.Dir = d.o.Dir // the user's directory is never removed
	}
	bin, err := harness.LocateMalachid(ctx, d.o.Malachid, d.o.Dir, d.out)
	if err != nil {
		return err
	}
	c, err := harness.New(d.o.clusterConfig(bin))
	if err != nil {
		return err
	}
	d.c = c
	d.logf("starting %d brokers (replication factor %d, heal.tick %v, heal.grace %v, heal.settle_batch %d, raft timeouts %v) under %s", d.o.Brokers, d.o.RF, d.o.Tick, d.o.Grace, d.o.SettleBatch, d.o.RaftTimeout, d.o.Dir)
	if d.o.Insecure {
		d.logf("INSECURE MODE (--insecure): every listener is plaintext and unauthenticated, on loopback")
	} else {
		d.logf("mutual TLS: a CA, a certificate per broker and the operator and viewer clients under %s", c.Certs().Root)
	}
	if err := c.Start(); err != nil {
		return err
	}
	leader, err := c.WaitReady(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	d.logf("cluster up: broker %d leads", leader)
	if err := d.c.WaitRegistered(ctx, 60*time.Second); err != nil {
		return err
	}
	if err := d.load(ctx); err != nil {
		return err
	}
	base := FaultReport{Stage: "baseline"}
	if err := d.waitHealed(ctx, &base, "verifying loaded copies", time.Now(), nil, d.o.StageTimeout); err != nil {
		return fmt.Errorf("the loaded cluster never became healthy: %w", err)
	}
	d.brokerVerified = d.copiesCarryConfirmed()
	d.rep.Segments = d.lastEv.Sealed
	if err := d.startClients(ctx); err != nil {
		return err
	}
	if d.o.Nemesis != "" {
		return d.runNemesis(ctx)
	}
	for _, st := range d.o.Stages {
		if err := ctx.Err(); err != nil {
			return err
		}
		fr, err := d.stage(ctx, st)
		d.rep.Faults = append(d.rep.Faults, fr)
		if err != nil {
			return err
		}
		if fr.Injected && !fr.Healed && !(fr.Stage == "bitflip" && fr.Note != "") {
			return fmt.Errorf("stage %s did not heal within %v; later stages not run", fr.Stage, d.o.StageTimeout)
		}
	}
	return nil
}

// load creates, writes and seals the segments through /v1/load, in chunks
// so that progress shows.
func (d *demo) load(ctx context.Context) error {
	n, rsize := recordShape(d.o.SegmentSize)
	segBytes := int64(n) * int64(rsize+store.FrameHeaderSize)
	d.rep.SegmentBytes = segBytes
	d.logf("loading %d sealed segments of %d records × %d B (%s each, %s with %d copies)",
		d.o.Segments, n, rsize, bytesize.Format(segBytes), bytesize.Format(segBytes*int64(d.o.Segments)*int64(d.o.RF)), d.o.RF)
	chunk := max(1, min(50, int((64<<20)/max(segBytes, 1))))
	p := newProgress(d.out, d.tty, "load", d.o.Segments)
	start := time.Now()
	next, retries, progressAt := 0, 0, 0
	var lastErr error
	for {
		sealed, err := d.sealedCount(ctx)
		if err != nil {
			lastErr = err
		} else if sealed >= d.o.Segments {
			break
		}
		if sealed > progressAt {
			progressAt, retries = sealed, 0
		}
		p.Set(sealed, d.o.Segments, bytesize.Format(int64(sealed)*segBytes))
		k := min(chunk, d.o.Segments-sealed)
		if err == nil {
			req := admin.LoadRequest{Segments: k, RecordsPerSegment: n, RecordSize: rsize, Prefix: "s", First: next, Concurrency: 4}
			next += k
			_, err = d.c.LeaderClient(ctx).Load(ctx, req)
			if err == nil {
				continue
			}
			lastErr = err
		}
		// A leader change refuses or cuts a load short: what was sealed is
		// counted again, the rest loaded under new ids.
		if ctx.Err() != nil || !errors.Is(lastErr, admin.ErrUnavailable) || retries == 10 {
			p.Finish("failed")
			return fmt.Errorf("loading segments: %w", lastErr)
		}
		retries++
		d.rep.Notes = append(d.rep.Notes, fmt.Sprintf("load retried after: %v", lastErr))
		time.Sleep(500 * time.Millisecond)
	}
	d.rep.LoadSeconds = time.Since(start).Seconds()
	d.rep.LoadBytes = segBytes * int64(d.o.Segments) * int64(d.o.RF)
	p.Finish(fmt.Sprintf("%d segments in %.2fs", d.o.Segments, d.rep.LoadSeconds))
	return nil
}

// sealedCount counts the sealed segments in the metadata, the Kafka
// partitions' left out (notePartitionSegments counts those).
func (d *demo) sealedCount(ctx context.Context) (int, error) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	snap, err := d.c.LeaderClient(ctx).Metadata(pctx)
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

// observe evaluates a view and keeps it.
func (d *demo) observe(v *harness.View) harness.Evaluation {
	e := harness.Evaluate(v, d.o.RF, d.c.Live(), d.checkCopy)
	d.keep(v, e)
	return e
}

// keep counts a view's partition segments and, when it is a full view,
// keeps it and its evaluation: stages pick victims from the last.
func (d *demo) keep(v *harness.View, e harness.Evaluation) {
	d.notePartitionSegments(v.Snap)
	if !v.MetadataOnly {
		d.last, d.lastEv = v, e
	}
}

// finalCheck evaluates the last view without the segments destroyed on
// purpose, counts the replica copies found intact, and returns the
// evaluation with the failures the last pass reports (destroyed left out).
func (d *demo) finalCheck(gone []destroyedSegment) (harness.Evaluation, int) {
	if d.last == nil {
		return d.lastEv, 0
	}
	v := *d.last
	v.Snap.Segments = slices.DeleteFunc(slices.Clone(v.Snap.Segments), func(s meta.Segment) bool {
		return destroyed(gone, s.ID)
	})
	intact := 0
	e := harness.Evaluate(&v, d.o.RF, d.c.Live(), func(b meta.BrokerID, seg meta.Segment, lc admin.Copy, listed bool) string {
		why := d.checkCopy(b, seg, lc, listed)
		if why == "" && seg.HasReplica(b) {
			intact++
		}
		return why
	})
	d.rep.Summary.CopiesVerifiedAtEnd = intact
	failed := 0
	if r, _, _, ok := admin.LastPass(d.last.Status); ok {
		for _, f := range r.Failed {
			if !destroyed(gone, f.Segment) {
				failed++
			}
		}
	}
	return e, failed
}

// checkCopy: the broker's word (harness.CheckCopy, and confirmed when exposed),
// then the demo's own audit of the file.
func (d *demo) checkCopy(b meta.BrokerID, seg meta.Segment, lc admin.Copy, listed bool) string {
	if bad := harness.CheckCopy(seg, lc, listed); bad != "" {
		return bad
	}
	if lc.Confirmed != nil && !*lc.Confirmed {
		return "not confirmed by its broker"
	}
	br := d.c.Broker(b)
	if br == nil {
		return "unknown broker"
	}
	read := d.aud.BytesRead
	err := d.aud.Check(copyPath(br, seg.ID), seg)
	if d.aud.BytesRead != read && err == nil {
		d.auditsPassed++ // the auditor read the file (not a cached result)
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
func (d *demo) copiesCarryConfirmed() bool {
	if d.last == nil {
		return false
	}
	for _, cs := range d.last.Copies {
		for _, lc := range cs {
			return lc.Confirmed != nil
		}
	}
	return false
}

// readPasses reads the passes of c's histories feed has not returned yet
// and counts them in fr (their number, the unread, the longest, the time
// in backfills), noting the start of the first that listed d.watchDead
// dead. A history that did not answer (the error) is read on the next call.
func (d *demo) readPasses(ctx context.Context, c *harness.Cluster, feed *harness.PassFeed, fr *FaultReport) ([]plugin.PassRecord, error) {
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
		if d.watchDead != 0 && d.deadSeen.IsZero() && slices.Contains(p.Report.Dead, d.watchDead) {
			d.deadSeen = p.Started
		}
	}
	return recs, err
}

// watchPasses is the stages' watch over the heal passes: every quarter
// tick it reads the passes feed has not returned (readPasses) and hands
// them, with the feed's error, to round, until round says done, the
// deadline passes or ctx ends. It reports whether round said done.
func (d *demo) watchPasses(ctx context.Context, fr *FaultReport, feed *harness.PassFeed, deadline time.Time, round func([]plugin.PassRecord, error) bool) bool {
	for ; ctx.Err() == nil && time.Now().Before(deadline); time.Sleep(max(d.o.Tick/4, 10*time.Millisecond)) {
		if round(d.readPasses(ctx, d.c, feed, fr)) {
			return true
		}
	}
	return false
}

// waitHealed is harness.WaitHealed with a progress bar over the segments
// seen unhealthy (targets: known hit) and every pass since start counted
// in fr; it sets fr.Healed, SecondsToHeal and Affected. A pass left
// unread is an error too.
func (d *demo) waitHealed(ctx context.Context, fr *FaultReport, label string, start time.Time, targets []meta.SegmentID, timeout time.Duration) error {
	feed := harness.NewPassFeed(start)
	affected := map[meta.SegmentID]bool{}
	for _, id := range targets {
		affected[id] = true
	}
	baseline := fr.Stage == "baseline"
	p := newProgress(d.out, d.tty, label, max(len(affected), 1))
	seen := func(v *harness.View, e harness.Evaluation) {
		d.keep(v, e)
		_, _ = d.readPasses(ctx, d.c, feed, fr)
		for id := range e.Unhealthy {
			affected[id] = true
		}
		for _, s := range v.Snap.Segments {
			if baseline && s.Sealed {
				affected[s.ID] = true
			}
		}
		healthy := 0
		for id := range affected {
			if _, bad := e.Unhealthy[id]; !bad {
				healthy++
			}
		}
		fr.Affected = len(affected)
		p.Set(healthy, max(len(affected), 1), progressNote(v, e))
	}
	pending := func(v *harness.View, e harness.Evaluation) string {
		if baseline && e.Sealed < d.o.Segments {
			return fmt.Sprintf("%d of %d segments sealed", e.Sealed, d.o.Segments)
		}
		if clean, why := v.PassClean(); !d.brokerVerified && !clean {
			return why
		}
		return ""
	}
	v, err := harness.WaitHealed(ctx, d.c, harness.HealWait{RF: d.o.RF, Check: d.checkCopy, Every: d.o.Poll, Seen: seen, Pending: pending}, timeout)
	if err != nil {
		p.Finish("not healthy: " + harness.FirstLine(err.Error(), 80))
		return err
	}
	fr.Healed = true
	fr.healedAt = v.At
	fr.SecondsToHeal = seconds(v.At.Sub(start))
	p.Finish(fmt.Sprintf("healthy after %s (%d segments affected)", fmtSeconds(fr.SecondsToHeal), len(affected)))
	if why := feed.Problem(); why != "" {
		return fmt.Errorf("healthy, but %s", why)
	}
	return nil
}

// settle waits, as waitHealed, for every segment healthy again after a
// step beside a stage's fault (from: when the step began), its passes not
// counted in the stage; it returns the seconds it took.
func (d *demo) settle(ctx context.Context, label string, from time.Time) (*float64, error) {
	fr := FaultReport{Stage: "settle"}
	err := d.waitHealed(ctx, &fr, label, from, nil, d.o.StageTimeout)
	return fr.SecondsToHeal, err
}

// progressNote is the progress bar's note on a view: the first broker
// that did not answer, the unhealthy count, or a verification awaited.
func progressNote(v *harness.View, e harness.Evaluation) string {
	switch {
	case len(v.Unreachable) > 0:
		return v.Unreachable[0]
	case len(e.Unhealthy) > 0:
		return fmt.Sprintf("%d unhealthy", len(e.Unhealthy))
	}
	return "awaiting verification"
}

// copyPath is where broker b keeps its copy of segment id, "" when it
// holds none (harness.Broker.CopyPath knows the layout).
func copyPath(b *harness.Broker, id meta.SegmentID) string {
	p, _ := b.CopyPath(id)
	return p
}
