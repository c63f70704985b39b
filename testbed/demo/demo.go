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

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/kafkaload"
	"github.com/malachi-log/malachi/testbed/stage"

	"github.com/malachi-log/malachi/meta"
)

// demo is one run of `malachi-demo`: the stages' environment (env), the
// report it fills, and what the showcase adds around them.
type demo struct {
	o       Options
	out     io.Writer // progress and narration
	tty     bool
	env     *stage.Env
	rep     *Report
	madeDir bool   // the demo created o.Dir (a temporary directory)
	seed    uint64 // the run's seed (--seed, or drawn from the clock)
	// clients is the --clients load (clients.go), nil without.
	clients *kafkaload.Load
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
		o: o, out: out, tty: isTerminal(out), seed: seed,
		rep: &Report{Brokers: o.Brokers, ReplicationFactor: o.RF, Segments: o.Segments, Config: map[string]string{
			"heal.tick": o.Tick.String(), "heal.grace": o.Grace.String(), "heal.settle_batch": fmt.Sprint(o.SettleBatch),
			"heal.scrub_interval": o.ScrubEvery.String(), "heal.scrub_bytes_per_second": fmt.Sprint(o.ScrubRate),
			"heal.backfill_bytes_per_second": fmt.Sprint(o.BackfillRate),
			"raft.heartbeat_timeout":         o.RaftTimeout.String(), "raft.election_timeout": o.RaftTimeout.String(), "poll": o.Poll.String(), "insecure": fmt.Sprint(o.Insecure),
		}},
	}
	d.env = &stage.Env{Options: o.Options, Aud: harness.NewAuditor(), Out: d, Sealed: o.Segments,
		Rand: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	d.rep.Notes = append(d.rep.Notes, fmt.Sprintf("seed %d (--seed to replay the same victims)", seed))
	for st, why := range o.skippedStages() {
		d.rep.Faults = append(d.rep.Faults, stage.Report{Stage: st, Skipped: why})
	}
	start := time.Now()
	runErr := d.run(ctx)
	d.finishClients(ctx)
	if last, _ := d.env.Last(); last != nil && ctx.Err() == nil {
		if v, err := harness.Poll(ctx, d.env.C, false); err == nil {
			d.env.Observe(v)
		}
	}
	d.rep.TotalSeconds = time.Since(start).Seconds()
	sortFaults(d.rep.Faults)
	d.rep.Segments, d.rep.PartitionSegments = d.env.Sealed, d.env.PartitionSealed()
	final, failedByPass := d.finalCheck(d.rep.heldDestroyed())
	d.rep.AuditBytes = d.env.Aud.BytesRead
	d.rep.Summary.CopiesVerified = d.env.Audits
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

func sortFaults(fs []stage.Report) {
	pos := func(s string) int { return slices.Index(stage.Names, s) }
	sort.SliceStable(fs, func(i, j int) bool { return pos(fs[i].Stage) < pos(fs[j].Stage) })
}

func (d *demo) logf(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

// Logf and Progress make the demo the stages' stage.Sink.
func (d *demo) Logf(format string, args ...any) { d.logf(format, args...) }

func (d *demo) Progress(label string, total int) stage.Progress {
	return newProgress(d.out, d.tty, label, total)
}

func (d *demo) verificationText() []string {
	v := []string{
		fmt.Sprintf("metadata: every sealed segment has %d replicas, all on running brokers", d.o.RF),
		"brokers: each replica's broker lists the copy (GET /v1/copies) sealed, not latched, and exactly byte_size + 40 footer bytes",
		"audit: the demo read every such copy file itself and checked each frame's CRC32C and offset, the footer, and the frames' checksum against the metadata",
	}
	if d.env.Confirmed() {
		v = append(v, "broker confirmation: each copy reports confirmed (GET /v1/copies)")
	} else {
		v = append(v, "heal pass: the leader's latest heal report (GET /v1/status), at or after the metadata index at which that state was first seen (Kafka offset commits aside), shows no under-replicated, failed or unsettled (unconfirmed) copy")
	}
	return v
}

// cleanup stops the cluster unless --keep, and removes its directory when
// the demo made it and everything healed.
func (d *demo) cleanup(ok bool) {
	c := d.env.C
	if c == nil {
		if d.madeDir {
			_ = os.RemoveAll(d.o.Dir) // no broker ever ran: nothing to look at
		}
		return
	}
	if d.o.Keep {
		d.rep.Dir = d.o.Dir
		d.logf("--keep: the cluster keeps running; admin APIs:")
		for _, b := range c.Running() {
			d.logf("  broker %d  admin %s  data %s  log %s", b.ID, b.Admin, b.Dir, b.LogPath)
		}
		if run := c.Running(); len(run) > 0 {
			d.logf("  ask it with: malachi status --admin %s %s", run[0].Admin, strings.Join(c.CLIFlags(), " "))
		}
		for _, line := range d.kafkaManual() {
			d.logf("%s", line)
		}
		return
	}
	c.Stop()
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
	if d.o.CLI, err = harness.Locate(ctx, "malachi", d.o.CLI, d.o.Dir, d.out); err != nil {
		return err
	}
	c, err := harness.New(d.o.clusterConfig(bin))
	if err != nil {
		return err
	}
	d.env.C = c
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
	if err := c.WaitRegistered(ctx, 60*time.Second); err != nil {
		return err
	}
	if err := d.load(ctx); err != nil {
		return err
	}
	if err := d.env.Baseline(ctx); err != nil {
		return fmt.Errorf("the loaded cluster never became healthy: %w", err)
	}
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
		fr, err := d.env.Run(ctx, st)
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
	n, rsize := stage.RecordShape(d.o.SegmentSize)
	segBytes := int64(n) * int64(rsize+store.FrameHeaderSize)
	d.rep.SegmentBytes, d.env.SegmentBytes = segBytes, segBytes
	d.logf("loading %d sealed segments of %d records × %d B (%s each, %s with %d copies)",
		d.o.Segments, n, rsize, bytesize.Format(segBytes), bytesize.Format(segBytes*int64(d.o.Segments)*int64(d.o.RF)), d.o.RF)
	chunk := max(1, min(50, int((64<<20)/max(segBytes, 1))))
	p := newProgress(d.out, d.tty, "load", d.o.Segments)
	start := time.Now()
	next, retries, progressAt := 0, 0, 0
	var lastErr error
	for {
		sealed, err := d.env.SealedCount(ctx)
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
			_, err = d.env.C.LeaderClient(ctx).Load(ctx, req)
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

// finalCheck evaluates the last view without the segments destroyed on
// purpose, counts the replica copies found intact, and returns the
// evaluation with the failures the last pass reports (destroyed left out).
func (d *demo) finalCheck(gone []stage.Destroyed) (harness.Evaluation, int) {
	last, ev := d.env.Last()
	if last == nil {
		return ev, 0
	}
	v := *last
	v.Snap.Segments = slices.DeleteFunc(slices.Clone(v.Snap.Segments), func(s meta.Segment) bool {
		return destroyed(gone, s.ID)
	})
	intact := 0
	e := harness.Evaluate(&v, d.o.RF, d.env.C.Live(), func(b meta.BrokerID, seg meta.Segment, lc admin.Copy, listed bool) string {
		why := d.env.CheckCopy(b, seg, lc, listed)
		if why == "" && seg.HasReplica(b) {
			intact++
		}
		return why
	})
	d.rep.Summary.CopiesVerifiedAtEnd = intact
	failed := 0
	if r, _, _, ok := admin.LastPass(last.Status); ok {
		for _, f := range r.Failed {
			if !destroyed(gone, f.Segment) {
				failed++
			}
		}
	}
	return e, failed
}
