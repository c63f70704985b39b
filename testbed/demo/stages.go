package demo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/meta"
)

// victim is one copy a fault hits.
type victim struct {
	seg meta.Segment
	b   *harness.Broker
}

// stage runs one stage. An error is returned only when the demo cannot go
// on (interrupted, a broker died on its own); a stage that does not heal is
// reported in the FaultReport.
func (d *demo) stage(ctx context.Context, st string) (FaultReport, error) {
	d.logf("")
	switch st {
	case "kill":
		return d.stageKill(ctx, "kill", false)
	case "leader":
		return d.stageKill(ctx, "leader", true)
	case "delete", "truncate", "extend", "bitflip":
		return d.stageDisk(ctx, st)
	case "latch":
		return d.stageLatch(ctx)
	case "restart":
		return d.stageRestart(ctx)
	case "pause":
		return d.stagePause(ctx)
	case "swap":
		return d.stageSwap(ctx)
	case "diskfull":
		return d.stageDiskFull(ctx)
	case "readonly":
		return d.stageReadOnly(ctx)
	case "backfill-kill":
		return d.stageBackfillKill(ctx)
	case "nospare":
		return d.stageNoSpare(ctx)
	case "lost":
		return d.stageLost(ctx)
	case "rebalance":
		return d.stageRebalance(ctx)
	case "decommission":
		return d.stageDecommission(ctx)
	case "maintenance":
		return d.stageMaintenance(ctx)
	}
	return FaultReport{Stage: st}, fmt.Errorf("unknown stage %q", st)
}

// sizes returns, for each target segment, the size of the copy on each of
// its replicas in the last view (0 when absent or the broker is down).
func (d *demo) sizes(targets []meta.SegmentID) map[meta.SegmentID]map[meta.BrokerID]int64 {
	out := map[meta.SegmentID]map[meta.BrokerID]int64{}
	for _, id := range targets {
		seg, ok := d.last.Snap.Segment(id)
		if !ok {
			continue
		}
		m := map[meta.BrokerID]int64{}
		for _, r := range seg.Replicas {
			if lc, ok := d.last.Copies[r][id]; ok {
				m[r] = lc.Size
			}
		}
		out[id] = m
	}
	return out
}

// sizesLosing is sizes with the copies on lost counted as gone: what a
// fault that takes lost's copies leaves to heal.
func (d *demo) sizesLosing(targets []meta.SegmentID, lost meta.BrokerID) map[meta.SegmentID]map[meta.BrokerID]int64 {
	out := d.sizes(targets)
	for _, m := range out {
		m[lost] = 0
	}
	return out
}

// estimateBytes is what healing the targets must have moved, from the
// copies' sizes after the fault (pre) and the final replica sets: every
// copy on a final replica that was missing or short needed the rest of its
// bytes.
func (d *demo) estimateBytes(pre map[meta.SegmentID]map[meta.BrokerID]int64) int64 {
	var total int64
	for id, m := range pre {
		seg, ok := d.last.Snap.Segment(id)
		if !ok {
			continue
		}
		full := seg.ByteSize + footerSize
		for _, r := range seg.Replicas {
			if have := m[r]; have < full {
				total += full - have
			}
		}
	}
	return total
}

// stageKill kills a broker with SIGKILL: a follower for "kill", the
// control plane's leader for "leader".
func (d *demo) stageKill(ctx context.Context, name string, leader bool) (FaultReport, error) {
	fr := FaultReport{Stage: name}
	v := d.last
	var b *harness.Broker
	if leader {
		b = d.c.Broker(v.Leader)
		if b == nil || !b.Alive() {
			fr.notInjected("no running leader to kill")
			return fr, nil
		}
	} else {
		var cands []*harness.Broker
		for _, rb := range d.c.Running() {
			if rb.ID != v.Leader {
				cands = append(cands, rb)
			}
		}
		if len(cands) == 0 {
			fr.notInjected("no running follower to kill")
			return fr, nil
		}
		b = cands[d.rng.IntN(len(cands))]
	}
	targets := d.sealedOn(b.ID)
	role := "broker"
	if leader {
		role = "leader"
	}
	fr.Broker = b.ID
	fr.What = fmt.Sprintf("kill -9 %s %d (%d replicas)", role, b.ID, len(targets))
	d.logf("stage %s: kill -9 %s %d (pid %d), which holds %d sealed replicas", name, role, b.ID, b.Pid(), len(targets))
	pre := d.sizesLosing(targets, b.ID)
	before := d.backfillBytes(ctx)
	d.watchDead, d.deadSeen = b.ID, time.Time{}
	defer func() { d.watchDead = 0 }()
	killAt := time.Now()
	if err := d.c.Kill(b); err != nil {
		fr.Error = err.Error()
		return fr, err
	}
	fr.Injected = true
	if !leader {
		d.killed = b
	}
	if leader {
		for time.Since(killAt) < d.o.StageTimeout {
			if id, err := d.c.Leader(ctx, false); err == nil && id != b.ID {
				fr.NewLeader = id
				fr.LeaderSeconds = seconds(time.Since(killAt))
				d.logf("  broker %d leads after %s", id, fmtSeconds(fr.LeaderSeconds))
				break
			}
			if ctx.Err() != nil {
				return fr, ctx.Err()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	err := d.waitHealed(ctx, &fr, "re-replicating", killAt, targets, d.o.StageTimeout)
	fr.Detected = fr.Healed
	fr.BytesEstimated = d.estimateBytes(pre)
	fr.BytesRereplicated = d.backfillDelta(ctx, before)
	// The moment the broker counts as dead: the grace delay after its last
	// contact, which was at or before the kill, so at kill + grace at the
	// latest; earlier when a heal pass that started before then already
	// listed it dead. Measuring from there, a wait for the next tick
	// counts as healing time, never as grace.
	deadAt := d.deadMoment(&fr, killAt, true)
	if fr.Healed {
		fr.SecondsToHeal = seconds(fr.healedAt.Sub(deadAt))
	}
	if err != nil {
		fr.Error = err.Error()
		return fr, fatal(ctx, err, d)
	}
	return fr, nil
}

// fatal turns a stage's error into one that stops the demo only when it
// was interrupted or a broker died on its own.
func fatal(ctx context.Context, err error, d *demo) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if e := d.c.UnexpectedExit(); e != nil {
		return e
	}
	return nil
}

// pickVictims chooses n distinct healthy sealed segments and, for each, one
// replica on a running broker.
func (d *demo) pickVictims(n int) []victim {
	var segs []meta.Segment
	for _, s := range d.last.Snap.Segments {
		// A Kafka partition's segments hold the clients' records, which
		// the clients' check judges: the file stages hit the demo's own.
		if _, bad := d.lastEv.Unhealthy[s.ID]; s.Sealed && !bad && !isPartitionSegment(s.ID) {
			segs = append(segs, s)
		}
	}
	d.rng.Shuffle(len(segs), func(i, j int) { segs[i], segs[j] = segs[j], segs[i] })
	var out []victim
	for _, s := range segs {
		if len(out) == n {
			break
		}
		var on []*harness.Broker
		for _, r := range s.Replicas {
			if b := d.c.Broker(r); b != nil && b.Alive() {
				on = append(on, b)
			}
		}
		if len(on) == 0 {
			continue
		}
		out = append(out, victim{seg: s, b: on[d.rng.IntN(len(on))]})
	}
	return out
}

// scrubberAdvertised: the leader's plugin status shows a scrubber that
// is on.
func (d *demo) scrubberAdvertised() bool {
	if d.last == nil {
		return false
	}
	st, ok := admin.DecodeStatus(d.last.Status)
	return ok && st.Scrub != nil && st.Scrub.Enabled
}

// scrubFound asks broker b whether its scrubber lists id as corrupt.
func (d *demo) scrubFound(ctx context.Context, b *harness.Broker, id meta.SegmentID) bool {
	raw, err := b.Client.Status(ctx)
	if err != nil {
		return false
	}
	st, ok := admin.DecodeStatus(raw)
	return ok && st.Scrub != nil && slices.Contains(st.Scrub.Corrupt, id)
}

// stageDisk damages copies' files directly on disk.
func (d *demo) stageDisk(ctx context.Context, kind string) (FaultReport, error) {
	fr := FaultReport{Stage: kind}
	timeout := d.o.StageTimeout
	if kind == "bitflip" && !d.scrubberAdvertised() {
		if !d.o.stagesSet {
			fr.Skipped = "the plugin runs no scrubber (no enabled \"scrub\" in /v1/status; --scrub-interval 0 turns it off): an in-place bit flip keeps the size, so the size probe cannot see it by design; ask for it with --faults to watch it go undetected"
			d.logf("stage bitflip: skipped: %s", fr.Skipped)
			return fr, nil
		}
		timeout = min(timeout, max(20*d.o.Tick, 5*time.Second))
	}
	vs := d.pickVictims(d.o.Copies)
	if len(vs) == 0 {
		fr.notInjected("no healthy sealed copy to damage")
		return fr, nil
	}
	var targets []meta.SegmentID
	for _, v := range vs {
		targets = append(targets, v.seg.ID)
	}
	pre := d.sizes(targets)
	before := d.backfillBytes(ctx)
	start := time.Now()
	for _, v := range vs {
		path := copyPath(v.b, v.seg.ID)
		var df harness.Fault
		var err error
		switch kind {
		case "delete":
			df, err = harness.DeleteCopy(path)
		case "truncate":
			df, err = harness.TruncateCopy(path, d.rng)
		case "extend":
			df, err = harness.ExtendCopy(path, 1+d.rng.Int64N(8192), d.rng)
		case "bitflip":
			df, err = harness.BitflipCopy(path, v.seg.ByteSize, d.rng)
		}
		d.aud.Forget(path)
		if err != nil {
			fr.Error = err.Error()
			continue
		}
		fr.Copies = append(fr.Copies, df)
		pre[v.seg.ID][v.b.ID] = max(df.SizeAfter, 0)
		if kind == "extend" || kind == "bitflip" {
			pre[v.seg.ID][v.b.ID] = v.seg.ByteSize + footerSize
		}
		d.logf("stage %s: %s on broker %d: %s", kind, v.seg.ID, v.b.ID, describeFault(df))
	}
	if len(fr.Copies) == 0 {
		return fr, nil
	}
	fr.Injected = true
	fr.What = fmt.Sprintf("%s %d copies", kind, len(fr.Copies))
	err := d.waitHealed(ctx, &fr, "healing "+kind, start, targets, timeout)
	fr.Detected = fr.Healed
	fr.BytesEstimated = d.estimateBytes(pre)
	fr.BytesRereplicated = d.backfillDelta(ctx, before)
	if err != nil {
		fr.Error = err.Error()
		if e := fatal(ctx, err, d); e != nil {
			return fr, e
		}
		if kind == "bitflip" {
			for _, v := range vs {
				if d.scrubFound(ctx, v.b, v.seg.ID) {
					fr.Detected = true
				}
			}
			d.restoreBitflips(ctx, &fr)
		}
	}
	return fr, nil
}

// restoreBitflips flips back the bits of an undetected bit-flip stage so
// that the later stages start from a healthy cluster.
func (d *demo) restoreBitflips(ctx context.Context, fr *FaultReport) {
	restored := 0
	for _, df := range fr.Copies {
		if _, err := harness.FlipBit(df.Path, df.Offset, df.Bit); err == nil {
			restored++
			d.aud.Forget(df.Path)
		}
	}
	if fr.Detected {
		fr.Note = fmt.Sprintf("found by the scrubber but NOT REPAIRED within the stage timeout; the demo flipped %d of %d bits back itself", restored, len(fr.Copies))
	} else {
		fr.Note = fmt.Sprintf("NOT DETECTED within the stage timeout (no scrubber found it); the demo flipped %d of %d bits back itself", restored, len(fr.Copies))
	}
	d.logf("  bitflip: %s", fr.Note)
	tmp := FaultReport{Stage: "bitflip-restore"}
	_ = d.waitHealed(ctx, &tmp, "after restoring bits", time.Now(), nil, d.o.StageTimeout)
}

func describeFault(df harness.Fault) string {
	switch df.Kind {
	case "delete":
		return fmt.Sprintf("deleted (%d bytes)", df.SizeBefore)
	case "truncate":
		return fmt.Sprintf("truncated at byte %d of %d", df.Offset, df.SizeBefore)
	case "extend":
		return fmt.Sprintf("extended by %d random bytes to %d", df.SizeAfter-df.SizeBefore, df.SizeAfter)
	case "bitflip":
		return fmt.Sprintf("bit %d of byte %d flipped in place (size %d unchanged)", df.Bit, df.Offset, df.SizeAfter)
	}
	return df.Kind
}

// stageLatch latches copies through the brokers' fault injection API.
func (d *demo) stageLatch(ctx context.Context) (FaultReport, error) {
	fr := FaultReport{Stage: "latch"}
	vs := d.pickVictims(d.o.Copies)
	var targets []meta.SegmentID
	for _, v := range vs {
		targets = append(targets, v.seg.ID)
	}
	pre := d.sizes(targets)
	before := d.backfillBytes(ctx)
	start := time.Now()
	for _, v := range vs {
		if err := v.b.Client.Latch(ctx, v.seg.ID); err != nil {
			fr.Error = err.Error()
			d.logf("stage latch: %s on broker %d: %v", v.seg.ID, v.b.ID, err)
			continue
		}
		fr.Latched = append(fr.Latched, heal.CopyRef{Segment: v.seg.ID, Broker: v.b.ID})
		pre[v.seg.ID][v.b.ID] = 0 // a latched copy is lost: replaced elsewhere
		d.logf("stage latch: %s on broker %d latched", v.seg.ID, v.b.ID)
	}
	if len(fr.Latched) == 0 {
		return fr, nil
	}
	fr.Injected = true
	fr.What = fmt.Sprintf("latch %d copies", len(fr.Latched))
	err := d.waitHealed(ctx, &fr, "replacing latched", start, targets, d.o.StageTimeout)
	fr.Detected = fr.Healed
	fr.BytesEstimated = d.estimateBytes(pre)
	fr.BytesRereplicated = d.backfillDelta(ctx, before)
	if err != nil {
		fr.Error = err.Error()
		return fr, fatal(ctx, err, d)
	}
	return fr, nil
}

// stageRestart restarts the broker the kill stage killed; a restart clears
// its latches and its intact copies serve again.
func (d *demo) stageRestart(ctx context.Context) (FaultReport, error) {
	fr := FaultReport{Stage: "restart"}
	b := d.killed
	if b == nil {
		fr.Skipped = "no broker was killed"
		return fr, nil
	}
	fr.Broker = b.ID
	fr.What = fmt.Sprintf("restart broker %d", b.ID)
	d.logf("stage restart: broker %d starts again on its old data directory", b.ID)
	start := time.Now()
	if err := d.restart(ctx, b); err != nil {
		fr.Error = err.Error()
		return fr, fatal(ctx, err, d)
	}
	fr.Injected = true
	d.killed = nil
	err := d.waitHealed(ctx, &fr, "rejoining", start, nil, d.o.StageTimeout)
	fr.Detected = fr.Healed
	if cs, ok := d.last.Copies[b.ID]; ok {
		latched := 0
		for _, lc := range cs {
			if lc.Latched {
				latched++
			}
		}
		fr.Note = fmt.Sprintf("broker %d lists %d copies after the restart, %d latched", b.ID, len(cs), latched)
	}
	if err != nil {
		fr.Error = err.Error()
		return fr, fatal(ctx, err, d)
	}
	return fr, nil
}

// restart starts broker b's process again on its data directory and waits
// until it answers and knows a leader.
func (d *demo) restart(ctx context.Context, b *harness.Broker) error {
	start := time.Now()
	if err := d.c.StartBroker(b); err != nil {
		return err
	}
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := b.Client.Health(hctx)
		cancel()
		if err == nil && h.Leader != 0 {
			return nil
		}
		if e := d.c.UnexpectedExit(); e != nil {
			return e
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(start) > d.o.StageTimeout {
			return fmt.Errorf("broker %d (admin %s) not back after %v: %v", b.ID, b.Admin, time.Since(start).Round(time.Millisecond), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reviveAll restarts every broker whose process is not running (a stage
// before left it dead) and waits until the cluster is healthy again, so
// that the next stage starts from every broker up and every segment at its
// replication factor. It does nothing when every broker runs.
func (d *demo) reviveAll(ctx context.Context) error {
	var dead []*harness.Broker
	for _, b := range d.c.Brokers() {
		if !b.Alive() {
			dead = append(dead, b)
		}
	}
	if len(dead) == 0 {
		return nil
	}
	for _, b := range dead {
		d.logf("  restarting broker %d before the stage", b.ID)
		if err := d.restart(ctx, b); err != nil {
			return err
		}
		if d.killed == b {
			d.killed = nil
		}
	}
	tmp := FaultReport{Stage: "revive"}
	return d.waitHealed(ctx, &tmp, "brokers back", time.Now(), nil, d.o.StageTimeout)
}
