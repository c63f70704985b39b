package stage

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/meta"
)

// victim is one copy a fault hits.
type victim struct {
	seg meta.Segment
	b   *harness.Broker
}

// Row is one stage: its name; its run, which injects the fault, waits
// for the heal and fills the stage's Report; whether Env.Run restarts
// every dead broker before it; the brokers beyond the replication factor
// it needs running (spare, for why) and those it takes out at once (down:
// the rest must keep a quorum); and any other need (check: why not, or "").
type Row struct {
	Name    string
	run     func(*Env, context.Context, *Report) error
	revives bool
	spare   int
	why     string
	down    int
	check   func(o *Options, has func(string) bool) string
}

// Rows are the stages, in the order they run.
var Rows = []Row{
	{"kill", bind((*Env).stageKill, false), false, 1, "the killed broker's copies move to a spare broker", 1, nil},
	{"restart", (*Env).stageRestart, false, 0, "", 0, func(_ *Options, has func(string) bool) string {
		return when(!has("kill"), "restarts the broker the kill stage killed; add kill")
	}},
	{"delete", bind((*Env).stageFile, harness.KindDelete), false, 0, "", 0, nil},
	{"truncate", bind((*Env).stageFile, harness.KindTruncate), false, 0, "", 0, nil},
	{"extend", bind((*Env).stageFile, harness.KindExtend), false, 0, "", 0, nil},
	{"bitflip", bind((*Env).stageFile, harness.KindBitflip), false, 0, "", 0, func(o *Options, has func(string) bool) string {
		if o.ScrubEvery <= 0 {
			return ""
		}
		return o.spareFor(o.live(has, false), 1, "a copy the scrubber finds corrupt is replaced on a spare broker (with none the plugin reports it no_spare_broker)")
	}},
	{"latch", bind((*Env).stageFile, harness.KindLatch), false, 1, "a latched copy is replaced on a spare broker", 0, nil},
	{"decommission", (*Env).stageDecommission, true, 1, "the drained broker's replicas move to a spare broker", 0, nil},
	{"maintenance", (*Env).stageMaintenance, true, 0, "", 1, nil},
	{"rebalance", (*Env).stageRebalance, true, 1, "emptying a broker (decommission) moves its replicas to a spare one", 0, nil},
	{"leader", bind((*Env).stageKill, true), false, 1, "the killed leader's copies move to a spare broker", 1, nil},
	{"pause", (*Env).stagePause, true, 1, "the paused broker's copies are replaced on a spare broker", 1, nil},
	{"swap", (*Env).stageSwap, true, 0, "", 1, func(o *Options, _ func(string) bool) string {
		return when(o.RF < 2, "the emptied broker's copies are backfilled from their other replicas: want --rf 2 or more")
	}},
	{"diskfull", bind((*Env).stageDisk, harness.KindDiskFull), true, 1, "the full disk's copies are replaced on a spare broker", 1, nil},
	{"readonly", bind((*Env).stageDisk, harness.KindReadOnly), true, 1, "the read-only disk's copies are replaced on a spare broker", 1, nil},
	{"backfill-kill", (*Env).stageBackfillKill, true, 2, "two brokers die, one during the other's backfill", 2, nil},
	{"nospare", (*Env).stageNoSpare, false, 0, "", 0, func(o *Options, _ func(string) bool) string {
		if o.RF < 2 || o.Brokers < 3 {
			return "a latched copy with no spare broker: want --rf 2 or more and --brokers 3 or more"
		}
		return when(o.RF <= o.Brokers/2, fmt.Sprintf("no spare broker means only %d of %d brokers running: no quorum; want --rf more than half of --brokers", o.RF, o.Brokers))
	}},
	{"lost", (*Env).stageLost, true, 0, "", 0, nil},
}

// bind is a stage's run with its argument (the kind of fault, or which
// broker) bound.
func bind[K any](run func(*Env, context.Context, K, *Report) error, k K) func(*Env, context.Context, *Report) error {
	return func(e *Env, ctx context.Context, fr *Report) error { return run(e, ctx, k, fr) }
}

func when(cond bool, why string) string {
	if cond {
		return why
	}
	return ""
}

// live is how many brokers run when a stage starts after the stages
// before it (has): one fewer while a kill was not followed by a restart,
// unless the stage restarts every dead broker first (revives).
func (o *Options) live(has func(string) bool, revives bool) int {
	if has("kill") && !has("restart") && !revives {
		return o.Brokers - 1
	}
	return o.Brokers
}

// spareFor says why live brokers leave fewer than n spare brokers beyond
// the replication factor for why, or "".
func (o *Options) spareFor(live, n int, why string) string {
	return when(live < o.RF+n, fmt.Sprintf("%s: %d live brokers for replication factor %d; want --brokers %d or more", why, live, o.RF, o.RF+n+o.Brokers-live))
}

// Infeasible says why stage name cannot heal on this cluster after the
// stages before it, or "".
func (o *Options) Infeasible(name string, before []string) string {
	r := row(name)
	has := func(s string) bool { return slices.Contains(before, s) }
	live := o.live(has, r.revives)
	if why := o.spareFor(live, r.spare, r.why); r.spare > 0 && why != "" {
		return why
	}
	if up := live - r.down; r.down > 0 && up <= o.Brokers/2 {
		return fmt.Sprintf("with %d of %d brokers out, %d run: no quorum; want --brokers %d or more", o.Brokers-up, o.Brokers, up, 2*(o.Brokers-up)+1)
	}
	if r.check != nil {
		return r.check(o, has)
	}
	return ""
}

// Names names the stages of Rows, in the order they run.
var Names = func() []string {
	var out []string
	for _, r := range Rows {
		out = append(out, r.Name)
	}
	return out
}()

// row is stage name's row (no run when there is none).
func row(name string) Row {
	for _, r := range Rows {
		if r.Name == name {
			return r
		}
	}
	return Row{Name: name}
}

// measure is what a stage notes before its fault to count what the heal
// moved: the targets' copy sizes (pre; those the fault takes are counted
// gone) and every broker's catch-up counter (before).
type measure struct {
	pre    map[meta.SegmentID]map[meta.BrokerID]int64
	before harness.BackfillMark
}

// measure notes the targets' copies and the catch-up counters.
func (e *Env) measure(ctx context.Context, targets []meta.SegmentID) measure {
	return measure{pre: e.last.Sizes(targets), before: e.C.MarkBackfill(ctx)}
}

// lose adds broker b's sealed segments to pre, their copies' sizes in
// the last view with b's counted gone, and returns them.
func (e *Env) lose(pre map[meta.SegmentID]map[meta.BrokerID]int64, b meta.BrokerID) []meta.SegmentID {
	segs := e.sealedOn(b)
	for id, sizes := range e.last.Sizes(segs) {
		if pre[id] == nil {
			pre[id] = sizes
		}
		pre[id][b] = 0
	}
	return segs
}

// strikeBroker notes what to measure (targets, the struck broker's copies
// counted gone), watches for the first pass listing it dead (until the
// stage ends: the runner resets e.watchDead), injects t and marks fr
// injected. The injection is returned on an error too, which fr holds.
func (e *Env) strikeBroker(ctx context.Context, fr *Report, t harness.Target, targets []meta.SegmentID, what string) (measure, time.Time, *harness.Injection, error) {
	b := t.Brokers[0]
	fr.Broker, fr.What = b.ID, what
	e.logf("stage %s: %s: broker %d (pid %d) holds %d sealed replicas", fr.Stage, what, b.ID, b.Pid(), len(targets))
	m := e.measure(ctx, nil)
	e.lose(m.pre, b.ID)
	e.watchDead, e.deadSeen = b.ID, time.Time{}
	at := time.Now()
	in, err := e.C.Inject(ctx, t)
	if err != nil {
		return m, at, in, fr.record(err)
	}
	fr.Injected = true
	return m, at, in, nil
}

// heal waits for the cluster to heal a stage's fault (waitHealed) and
// fills in fr's detection, the bytes moved and estimated, and its error.
func (e *Env) heal(ctx context.Context, fr *Report, label string, start time.Time, targets []meta.SegmentID, timeout time.Duration, m measure) error {
	err := e.WaitHealed(ctx, fr, label, start, targets, timeout)
	fr.Detected = fr.Healed
	fr.BytesEstimated = e.last.MissingBytes(m.pre)
	fr.BytesRereplicated = m.before.Since(ctx, e.C)
	if err != nil {
		fr.Error = err.Error()
	}
	return err
}

// stageKill kills a broker with SIGKILL: a follower for "kill", the
// control plane's leader for "leader".
func (e *Env) stageKill(ctx context.Context, leader bool, fr *Report) error {
	b, role := e.C.Broker(e.last.Leader), "leader"
	if !leader {
		b, role = e.follower(nil), "follower"
	}
	if b == nil || !b.Alive() {
		fr.notInjected("no running " + role + " to kill")
		return nil
	}
	targets := e.sealedOn(b.ID)
	m, killAt, _, err := e.strikeBroker(ctx, fr, harness.Target{Kind: harness.KindKill, Brokers: []*harness.Broker{b}}, targets,
		fmt.Sprintf("kill -9 %s %d (%d replicas)", role, b.ID, len(targets)))
	if err != nil {
		return err
	}
	if leader {
		e.awaitNewLeader(ctx, fr, b.ID, killAt)
	} else {
		e.killed = b
	}
	err = e.heal(ctx, fr, "re-replicating", killAt, targets, e.StageTimeout, m)
	e.timeFromDeath(fr, killAt, true)
	return fatal(ctx, err, e)
}

// awaitNewLeader notes in fr the first broker other than old that the
// running brokers agree leads, and how long after killAt.
func (e *Env) awaitNewLeader(ctx context.Context, fr *Report, old meta.BrokerID, killAt time.Time) {
	for time.Since(killAt) < e.StageTimeout && ctx.Err() == nil {
		if id, err := e.C.AgreedLeader(ctx, false); err == nil && id != old {
			fr.NewLeader = id
			fr.LeaderSeconds = Seconds(time.Since(killAt))
			e.logf("  broker %d leads after %s", id, FormatSeconds(fr.LeaderSeconds))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fail adds err to fr's error and returns it when it stops the run
// (fatal).
func (e *Env) fail(ctx context.Context, fr *Report, err error) error {
	return fatal(ctx, fr.record(err), e)
}

// fatal turns a stage's error into one that stops the run only when it
// was interrupted or a broker died on its own.
func fatal(ctx context.Context, err error, e *Env) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return e.C.UnexpectedExit()
}

// pickVictims chooses n distinct healthy sealed segments and, for each, one
// replica on a running broker.
func (e *Env) pickVictims(n int) []victim {
	var segs []meta.Segment
	for _, s := range e.last.Snap.Segments {
		// A Kafka partition's segments hold the clients' records, which
		// the clients' check judges: the file stages hit the loaded ones.
		if _, bad := e.lastEv.Unhealthy[s.ID]; s.Sealed && !bad && !isPartitionSegment(s.ID) {
			segs = append(segs, s)
		}
	}
	e.Rand.Shuffle(len(segs), func(i, j int) { segs[i], segs[j] = segs[j], segs[i] })
	var out []victim
	for _, s := range segs {
		if len(out) == n {
			break
		}
		var on []*harness.Broker
		for _, r := range s.Replicas {
			if b := e.C.Broker(r); b != nil && b.Alive() {
				on = append(on, b)
			}
		}
		if len(on) == 0 {
			continue
		}
		out = append(out, victim{seg: s, b: on[e.Rand.IntN(len(on))]})
	}
	return out
}

// scrubberAdvertised: the leader's plugin status shows a scrubber that
// is on.
func (e *Env) scrubberAdvertised() bool {
	if e.last == nil {
		return false
	}
	st, ok := admin.DecodeStatus(e.last.Status)
	return ok && st.Scrub != nil && st.Scrub.Enabled
}

// scrubFound asks broker b whether its scrubber lists id as corrupt.
func (e *Env) scrubFound(ctx context.Context, b *harness.Broker, id meta.SegmentID) bool {
	raw, err := b.Client.Status(ctx)
	if err != nil {
		return false
	}
	st, ok := admin.DecodeStatus(raw)
	return ok && st.Scrub != nil && slices.Contains(st.Scrub.Corrupt, id)
}

// stageFile damages copies' files directly on disk (delete, truncate,
// extend, bitflip) or latches them inside their brokers (latch), from the
// harness's fault catalogue.
func (e *Env) stageFile(ctx context.Context, kind harness.Kind, fr *Report) error {
	timeout := e.StageTimeout
	if kind == harness.KindBitflip && !e.scrubberAdvertised() {
		if !e.Chosen {
			fr.Skipped = "the plugin runs no scrubber (no enabled \"scrub\" in /v1/status; --scrub-interval 0 turns it off): an in-place bit flip keeps the size, so the size probe cannot see it by design; ask for it with --faults to watch it go undetected"
			e.logf("stage bitflip: skipped: %s", fr.Skipped)
			return nil
		}
		timeout = min(timeout, max(20*e.Tick, 5*time.Second))
	}
	vs := e.pickVictims(e.Copies)
	if len(vs) == 0 {
		fr.notInjected("no healthy sealed copy to damage")
		return nil
	}
	var targets []meta.SegmentID
	for _, v := range vs {
		targets = append(targets, v.seg.ID)
	}
	m := e.measure(ctx, targets)
	start := time.Now()
	for _, v := range vs {
		in, err := e.C.Inject(ctx, harness.Target{Kind: kind, Brokers: []*harness.Broker{v.b}, Segments: []meta.Segment{v.seg}, Rand: e.Rand})
		if err != nil {
			fr.Error = err.Error()
			e.logf("stage %s: %s on broker %d: %v", kind, v.seg.ID, v.b.ID, err)
			continue
		}
		if kind == harness.KindLatch {
			fr.Latched = append(fr.Latched, in.Lost...)
			m.pre[v.seg.ID][v.b.ID] = 0 // a latched copy is lost: replaced elsewhere
			e.logf("stage latch: %s on broker %d latched", v.seg.ID, v.b.ID)
			continue
		}
		df := in.Files[0]
		e.Aud.Forget(df.Path)
		fr.Copies = append(fr.Copies, df)
		m.pre[v.seg.ID][v.b.ID] = max(df.SizeAfter, 0)
		if kind == harness.KindExtend || kind == harness.KindBitflip {
			m.pre[v.seg.ID][v.b.ID] = v.seg.ByteSize + store.FooterSize
		}
		e.logf("stage %s: %s on broker %d: %s", kind, v.seg.ID, v.b.ID, describeFault(df))
	}
	n := len(fr.Copies) + len(fr.Latched)
	if n == 0 {
		return nil
	}
	fr.Injected = true
	fr.What = fmt.Sprintf("%s %d copies", kind, n)
	label := "healing " + string(kind)
	if kind == harness.KindLatch {
		label = "replacing latched"
	}
	err := e.heal(ctx, fr, label, start, targets, timeout, m)
	if ferr := fatal(ctx, err, e); ferr != nil || err == nil || kind != harness.KindBitflip {
		return ferr
	}
	for _, v := range vs {
		if e.scrubFound(ctx, v.b, v.seg.ID) {
			fr.Detected = true
		}
	}
	e.restoreBitflips(ctx, fr)
	return nil
}

// restoreBitflips flips back the bits of an undetected bit-flip stage so
// that the later stages start from a healthy cluster.
func (e *Env) restoreBitflips(ctx context.Context, fr *Report) {
	restored := 0
	for _, df := range fr.Copies {
		if _, err := harness.FlipBit(df.Path, df.Offset, df.Bit); err == nil {
			restored++
			e.Aud.Forget(df.Path)
		}
	}
	if fr.Detected {
		fr.Note = fmt.Sprintf("found by the scrubber but NOT REPAIRED within the stage timeout; the demo flipped %d of %d bits back itself", restored, len(fr.Copies))
	} else {
		fr.Note = fmt.Sprintf("NOT DETECTED within the stage timeout (no scrubber found it); the demo flipped %d of %d bits back itself", restored, len(fr.Copies))
	}
	e.logf("  bitflip: %s", fr.Note)
	_, _ = e.settle(ctx, "after restoring bits", time.Now())
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

// stageRestart restarts the broker the kill stage killed; a restart clears
// its latches and its intact copies serve again.
func (e *Env) stageRestart(ctx context.Context, fr *Report) error {
	b := e.killed
	if b == nil {
		fr.Skipped = "no broker was killed"
		return nil
	}
	fr.Broker = b.ID
	fr.What = fmt.Sprintf("restart broker %d", b.ID)
	e.logf("stage restart: broker %d starts again on its old data directory", b.ID)
	start := time.Now()
	if err := e.C.Revive(ctx, e.StageTimeout, b); err != nil {
		return e.fail(ctx, fr, err)
	}
	fr.Injected = true
	e.killed = nil
	err := e.WaitHealed(ctx, fr, "rejoining", start, nil, e.StageTimeout)
	fr.Detected = fr.Healed
	if cs, ok := e.last.Copies[b.ID]; ok {
		latched := 0
		for _, lc := range cs {
			if lc.Latched {
				latched++
			}
		}
		fr.Note = fmt.Sprintf("broker %d lists %d copies after the restart, %d latched", b.ID, len(cs), latched)
	}
	if err != nil {
		return e.fail(ctx, fr, err)
	}
	return nil
}

// reviveAll restarts every dead broker and waits until the cluster is
// healthy again; nothing when every broker runs.
func (e *Env) reviveAll(ctx context.Context) error {
	if n, err := e.reviveDead(ctx, " before the stage"); n == 0 || err != nil {
		return err
	}
	_, err := e.settle(ctx, "brokers back", time.Now())
	return err
}

// reviveDead restarts every dead broker, saying why (after its id), and
// counts them.
func (e *Env) reviveDead(ctx context.Context, why string) (int, error) {
	n := 0
	for _, b := range e.C.Brokers() {
		if b.Alive() {
			continue
		}
		e.logf("  restarting broker %d%s", b.ID, why)
		if err := e.C.Revive(ctx, e.StageTimeout, b); err != nil {
			return n, err
		}
		if e.killed == b {
			e.killed = nil
		}
		n++
	}
	return n, nil
}
