package nemesis

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/loopdisk"
)

// Options are what a run of the nemesis reads: the schedule's inputs
// (Seed, Duration, Kinds and the cluster's shape) and the bounds of its
// waits. Brokers, RF, Grace, Tick and RaftTimeout must be the cluster's.
type Options struct {
	Seed     uint64
	Duration time.Duration
	// Kinds, when set, are the only kinds drawn (each must be one the
	// cluster can take); none: every kind it can take.
	Kinds []FaultKind
	// NoDisk and NoNet say the disk or network faults were left out on
	// purpose: a cluster without a loop disk or hosts is then not noted.
	NoDisk, NoNet bool
	Brokers       int
	RF            int
	Grace         time.Duration
	Tick          time.Duration
	RaftTimeout   time.Duration
	// Timeout bounds each heal waited for and each fault's injection.
	Timeout time.Duration
	// BackfillRate is the cluster's per-broker catch-up cap in bytes per
	// second (heal.backfill_bytes_per_second; 0: none, or auto). With a
	// cap, each quiescent point's heal bound grows by the bytes an epoch's
	// swaps emptied over the cap (healBound).
	BackfillRate int64
	// Records and RecordSize shape each segment the writer loads.
	Records, RecordSize int
	// Dir is where a violation's observations are written.
	Dir string
}

// Draws says whether the nemesis may draw one of kinds: Kinds names one,
// or is empty. Without a disk or network kind drawn, a runner need give
// the cluster no loop disk (the schedule then never avoids its broker:
// the same draw on every machine) and no hosts of their own.
func (o Options) Draws(kinds []FaultKind) bool {
	if len(o.Kinds) == 0 {
		return true
	}
	for _, k := range kinds {
		if slices.Contains(o.Kinds, k) {
			return true
		}
	}
	return false
}

// Env is what the nemesis asks of the runner whose cluster it breaks.
// Run calls Logf, LeaderClient and Forget from several goroutines at once
// (one per fault in flight, and the watcher); the others from one
// goroutine at a time.
type Env interface {
	// Cluster is the running cluster.
	Cluster() *harness.Cluster
	// Logf narrates one line.
	Logf(format string, args ...any)
	// Note adds a line to the runner's report.
	Note(line string)
	// LeaderClient is the leader's admin client, or any broker's.
	LeaderClient(ctx context.Context) *admin.Client
	// Live is the brokers whose process runs.
	Live() map[meta.BrokerID]bool
	// WaitHealed waits up to timeout until every segment is healthy and
	// verified, narrating under label; last is the metadata of the
	// runner's latest full view of the cluster (nil: none), whatever err.
	WaitHealed(ctx context.Context, label string, timeout time.Duration) (last *meta.Snapshot, err error)
	// Forget drops what the runner cached of its checks of the file at
	// path, or of every file under the directory path: a fault changed it.
	Forget(path string)
	// BackfillMark reads every running broker's count of the bytes its
	// backfills received; since gives the growth from then.
	BackfillMark(ctx context.Context) (since func(context.Context) int64)
	// Checked is given the metadata of the last quiescent check when the
	// run ends: every segment it leaves sealed, the Kafka partitions' too.
	Checked(segments map[meta.SegmentID]meta.Segment)
}

// runner is one randomized run.
type runner struct {
	env   Env
	c     *harness.Cluster
	o     Options
	sched Schedule
	rep   *Report

	mu          sync.Mutex
	obs         Observations
	active      map[meta.BrokerID]FaultKind // brokers under a fault now
	damaged     map[meta.SegmentID]bool     // copies hit this epoch
	quorumLoss  bool
	cursors     map[meta.BrokerID]passCursor // how far each pass history was read
	writeSerial int
	// writing is the serial of the write in flight (-1: none); writeBegun
	// is closed when the next write begins.
	writing    int
	writeBegun chan struct{}
}

// canTake are the fault kinds this cluster can take.
func (n *runner) canTake(disk bool) []FaultKind {
	kinds := slices.Concat(harness.ProcessKinds, harness.FileKinds)
	if disk {
		// readonly's remedy (stop, umount, e2fsck, mount, start) needs the
		// device free: brokers on hosts run under nsenter --net, in the
		// root's mount namespace, so none holds a copy of the mount.
		kinds = append(kinds, harness.DiskKinds...)
	}
	if n.c.Net() != nil {
		kinds = append(kinds, harness.NetKinds...)
	}
	if n.o.Brokers >= 3 {
		kinds = append(kinds, harness.KindQuorumLoss)
	}
	return kinds
}

// drawnKinds are the kinds the nemesis draws: the cluster's, or those of
// Options.Kinds, each of which the cluster must be able to take.
func (n *runner) drawnKinds(disk bool) ([]FaultKind, error) {
	can := n.canTake(disk)
	if len(n.o.Kinds) == 0 {
		return can, nil
	}
	for _, k := range n.o.Kinds {
		if !slices.Contains(can, k) {
			return nil, fmt.Errorf("--nemesis-kinds %s: this cluster cannot take it (it can take %s)", k, strings.Join(KindNames(can), ","))
		}
	}
	return n.o.Kinds, nil
}

// Run runs the randomized nemesis on env's cluster, healthy and loaded:
// it draws the schedule, runs its epochs with a writer and a watcher
// going, checks at every quiescent point, and fails on the first
// violation with the seed and the schedule printed. The report is nil
// only when no schedule was drawn (the error says why); otherwise it is
// the run's, whatever the error.
func Run(ctx context.Context, env Env, o Options) (*Report, error) {
	n := &runner{env: env, c: env.Cluster(), o: o, active: map[meta.BrokerID]FaultKind{}, cursors: map[meta.BrokerID]passCursor{}, writing: -1, writeBegun: make(chan struct{}),
		obs: Observations{RF: o.RF, Brokers: o.Brokers, Grace: o.Grace, Tick: o.Tick,
			Settle: 2*o.RaftTimeout + time.Second, StepDown: 2*o.RaftTimeout + 2*time.Second, Sets: map[meta.SegmentID][]SetObs{}}}
	var diskID meta.BrokerID
	if l, b := n.c.Loop(); l != nil && b != nil {
		diskID = b.ID
	} else if !o.NoDisk && o.Draws(harness.DiskKinds) {
		why := n.c.LoopSkip()
		if why == "" {
			why = loopdisk.Unavailable()
		}
		env.Logf("nemesis: no disk faults: no loop-mounted copies disk: %s", why)
		env.Note("nemesis: disk faults (diskfull, readonly) not drawn: no loop-mounted copies disk: " + why)
	}
	if n.c.Net() == nil && !o.NoNet && o.Draws(harness.NetKinds) {
		env.Logf("nemesis: no network faults: %s", n.c.NetSkip())
		env.Note("nemesis: network faults not drawn (brokers on loopback): " + n.c.NetSkip())
	}
	kinds, err := n.drawnKinds(diskID != 0)
	if err != nil {
		return nil, err
	}
	n.sched = Draw(o.Seed, o.Duration, o.Brokers, o.RF, kinds, diskID)
	n.rep = &Report{Seed: o.Seed, Duration: o.Duration.String(), Epochs: len(n.sched.Epochs), Kinds: o.Kinds,
		FaultsScheduled: n.sched.Count(), FaultsInjected: map[FaultKind]int{}, Schedule: n.sched.String()}
	env.Logf("%s", n.sched)
	start := time.Now()
	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); n.watch(wctx) }()
	err = n.epochs(ctx)
	stopWatch()
	wg.Wait()
	n.rep.Minutes = time.Since(start).Minutes()
	n.finish()
	if err == nil && len(n.rep.NotInjected) > 0 {
		err = fmt.Errorf("nemesis: %d scheduled faults were not injected, first: %s", len(n.rep.NotInjected), n.rep.NotInjected[0])
	}
	if err == nil && len(n.rep.UndoFailed) > 0 {
		err = fmt.Errorf("nemesis: %d faults could not be undone, first: %s", len(n.rep.UndoFailed), n.rep.UndoFailed[0])
	}
	if err == nil && len(n.rep.Violations) > 0 {
		err = fmt.Errorf("nemesis: %d violations, first: %s", len(n.rep.Violations), n.rep.Violations[0])
	}
	if err != nil {
		env.Logf("NEMESIS FAILED (seed %d; replay with %s): %v\n%s", o.Seed, n.rep.Replay(), err, n.sched)
	}
	return n.rep, err
}

// epochs runs every epoch, each followed by a quiescent check.
func (n *runner) epochs(ctx context.Context) error {
	for i, ep := range n.sched.Epochs {
		if err := ctx.Err(); err != nil {
			return err
		}
		n.env.Logf("nemesis: epoch %d of %d: %d faults over %v", i+1, len(n.sched.Epochs), len(ep.Events), ep.Window)
		since := n.env.BackfillMark(ctx)
		wctx, stopWriter := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); n.write(wctx) }()
		began := time.Now()
		n.runEpoch(ctx, ep)
		stopWriter()
		wg.Wait()
		if err := n.quiesce(ctx, fmt.Sprintf("after epoch %d", i+1), began); err != nil {
			return err
		}
		n.rep.BytesRereplicated += since(ctx)
		// Every pass the brokers ran is in their histories: read them all
		// before judging.
		if err := n.readAllPasses(ctx, 10*time.Second); err != nil {
			return fmt.Errorf("nemesis: reading the pass histories after epoch %d: %w", i+1, err)
		}
		obs := n.snapshot()
		if v := Check(obs); len(v) > 0 {
			for _, x := range v {
				n.rep.Violations = append(n.rep.Violations, x.String())
			}
			n.dumpObservations(obs)
			return nil
		}
		n.rep.ChecksPassed++
	}
	return nil
}

// runEpoch injects the epoch's events at their times and undoes each
// after its length; it returns when every one is undone.
func (n *runner) runEpoch(ctx context.Context, ep Epoch) {
	n.mu.Lock()
	n.damaged = map[meta.SegmentID]bool{}
	n.mu.Unlock()
	start := time.Now()
	var wg sync.WaitGroup
	for _, e := range ep.Events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sleepUntil(ctx, start.Add(e.At)) {
				n.notInjected(e, "interrupted")
				return
			}
			n.event(ctx, e)
		}()
	}
	wg.Wait()
	sleepUntil(ctx, start.Add(ep.Window))
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Until(t)):
		return true
	}
}

func (n *runner) notInjected(e Event, why string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rep.NotInjected = append(n.rep.NotInjected, fmt.Sprintf("%s: %s", e, why))
	n.env.Logf("  nemesis: NOT injected: %s: %s", e, why)
}

// event injects e, holds it for its length and undoes it.
func (n *runner) event(ctx context.Context, e Event) {
	for _, b := range e.Brokers {
		if br := n.c.Broker(b); br == nil || !br.Alive() {
			n.notInjected(e, fmt.Sprintf("broker %d is not running", b))
			return
		}
	}
	var files fileDraw
	if slices.Contains(harness.FileKinds, e.Kind) {
		var why string
		if e, files, why = n.drawFiles(ctx, e); why != "" {
			n.notInjected(e, why)
			return
		}
	}
	n.mark(e, true)
	defer n.mark(e, false)
	f := Injected{Kind: e.Kind, Brokers: e.Brokers, Start: time.Now()}
	in, err := n.inject(ctx, e, files, &f)
	if err != nil {
		n.notInjected(e, err.Error())
		_ = in.Undo(ctx)
		return
	}
	n.mu.Lock()
	n.rep.FaultsInjected[e.Kind]++
	if e.Kind == harness.KindQuorumLoss {
		n.rep.QuorumLossWindows++
	}
	n.mu.Unlock()
	n.env.Logf("  nemesis: injected %s%s", e, copiesNote(f.Copies))
	sleepUntil(ctx, f.Start.Add(e.Length))
	// End is when the undo begins: from then on a broker may be back.
	f.End = time.Now()
	if err := in.Undo(ctx); err != nil {
		n.env.Logf("  nemesis: undoing %s failed: %v (the quiescent check restarts what is down)", e, err)
		n.mu.Lock()
		n.rep.UndoFailed = append(n.rep.UndoFailed, fmt.Sprintf("%s: %v", e, err))
		n.mu.Unlock()
	}
	if in.Aside != "" {
		_ = os.RemoveAll(in.Aside) // a swapped-out directory: its passes were read
	}
	n.mu.Lock()
	n.obs.Faults = append(n.obs.Faults, f)
	n.mu.Unlock()
}

// mark records e's brokers as under a fault (on) or no longer.
func (n *runner) mark(e Event, on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, b := range e.Brokers {
		if on {
			n.active[b] = e.Kind
		} else {
			delete(n.active, b)
		}
	}
	if e.Kind == harness.KindQuorumLoss {
		n.quorumLoss = on
	}
}

func copiesNote(cs []heal.CopyRef) string {
	if len(cs) == 0 {
		return ""
	}
	return fmt.Sprintf(": copies %v", cs)
}

// inject makes e's fault from the harness's catalogue. A kill waits for
// a write in flight first; a file fault hits the copies drawn for it
// (drawFiles). f.Copies gets the copies a file fault hit.
func (n *runner) inject(ctx context.Context, e Event, files fileDraw, f *Injected) (*harness.Injection, error) {
	c := n.c
	t := harness.Target{Kind: e.Kind, Length: e.Length, Seed: e.Seed, Timeout: n.o.Timeout}
	for _, id := range e.Brokers {
		t.Brokers = append(t.Brokers, c.Broker(id))
	}
	switch {
	case e.Kind == harness.KindKill:
		n.awaitWrite(ctx, f)
	case slices.Contains(harness.FileKinds, e.Kind):
		t.Segments, t.Rand = files.segments, files.rng
	}
	in, err := c.Inject(ctx, t)
	f.Copies = in.Lost
	for _, df := range in.Files {
		n.env.Forget(df.Path)
	}
	n.mu.Lock()
	for _, cr := range in.Lost {
		n.damaged[cr.Segment] = true
	}
	n.mu.Unlock()
	if e.Kind == harness.KindSwap && in.Aside != "" {
		n.env.Forget(in.Aside)
		n.env.Forget(t.Brokers[0].CopiesDir())
		// The passes it ran went with its data directory: read them there.
		if herr := n.notePassHistory(t.Brokers[0].ID, in.Aside); herr != nil && err == nil {
			err = fmt.Errorf("swap: reading broker %d's pass history: %w", t.Brokers[0].ID, herr)
		}
	}
	return in, err
}

// awaitWrite waits for a write in flight (the writer's next one, up to
// twice its period); f.DuringWrite names the write that was begun and not
// yet answered when the kill that follows was sent.
func (n *runner) awaitWrite(ctx context.Context, f *Injected) {
	n.mu.Lock()
	begun := n.writeBegun
	idle := n.writing < 0
	n.mu.Unlock()
	if idle {
		t := time.NewTimer(2 * WriteEvery)
		select {
		case <-begun:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	n.mu.Lock()
	if n.writing >= 0 {
		f.DuringWrite = meta.SegmentID(fmt.Sprintf("nem-%05d", n.writing))
		n.rep.KillsDuringWrite++
	}
	n.mu.Unlock()
}

// fileDraw is what a file fault hits: copies of one broker and the draw
// of their damage.
type fileDraw struct {
	segments []meta.Segment
	rng      *rand.Rand
}

// drawFiles picks the copies e's file fault hits, from what a broker
// holds on disk now: e's broker first, else the first other broker, in
// an order drawn from e.Seed, that runs, is under no fault and holds a
// candidate (fileTargets). A broker swapped to an empty directory holds
// no file of the copies the metadata still names on it, so the fault
// moves to a broker that does, rather than missing. It returns e with
// the broker it chose, or why no broker can take the fault.
func (n *runner) drawFiles(ctx context.Context, e Event) (Event, fileDraw, string) {
	snap, err := n.env.LeaderClient(ctx).Metadata(ctx)
	if err != nil {
		return e, fileDraw{}, fmt.Sprintf("no metadata to draw copies from: %v", err)
	}
	order := []meta.BrokerID{e.Brokers[0]}
	others := n.c.Brokers()
	rng := rand.New(rand.NewPCG(e.Seed, e.Seed^0x3c6ef372fe94f82b))
	for _, k := range rng.Perm(len(others)) {
		if id := others[k].ID; id != e.Brokers[0] {
			order = append(order, id)
		}
	}
	var whys []string
	for _, id := range order {
		b := n.c.Broker(id)
		n.mu.Lock()
		_, busy := n.active[id]
		n.mu.Unlock()
		if !b.Alive() || (busy && id != e.Brokers[0]) {
			continue
		}
		d, why := n.fileTargets(e, b, snap)
		if len(d.segments) > 0 {
			e.Brokers = []meta.BrokerID{id}
			return e, d, ""
		}
		whys = append(whys, fmt.Sprintf("broker %d: %s", id, why))
	}
	return e, fileDraw{}, "no broker holds a copy the fault may hit: " + strings.Join(whys, "; ")
}

// fileTargets chooses e.Copies copies on b (by e.Seed) among the sealed
// segments whose whole copy b holds on disk now (a file of the sealed
// size: not one still being backfilled, nor one the metadata names on a
// broker that lost its directory), whose replica set is full and names
// no other broker under a fault and none hit this epoch: the RF-1 bound
// holds whatever the heal's timing. It returns them with the draw of
// their damage, or why there is none.
func (n *runner) fileTargets(e Event, b *harness.Broker, snap meta.Snapshot) (fileDraw, string) {
	rng := rand.New(rand.NewPCG(e.Seed, e.Seed^0xbb67ae8584caa73b))
	sizes, err := b.CopySizes()
	if err != nil {
		return fileDraw{rng: rng}, err.Error()
	}
	n.mu.Lock()
	var cands []meta.Segment
	for _, s := range snap.Segments {
		if !s.Sealed || !s.HasReplica(b.ID) || len(s.Replicas) != n.o.RF || n.damaged[s.ID] {
			continue
		}
		if size, ok := sizes[s.ID]; !ok || size != harness.SealedSize(s) {
			continue
		}
		ok := true
		for _, r := range s.Replicas {
			if _, busy := n.active[r]; busy && r != b.ID {
				ok = false
			}
		}
		if ok {
			cands = append(cands, s)
		}
	}
	n.mu.Unlock()
	if len(cands) == 0 {
		return fileDraw{rng: rng}, fmt.Sprintf("none of its %d copy files is a whole sealed copy of a full replica set free of other faults", len(sizes))
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].ID < cands[j].ID })
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	return fileDraw{segments: cands[:min(e.Copies, len(cands))], rng: rng}, ""
}

// dumpObservations writes what the checker was given to the run's
// directory (nemesis-observations.json), so that a violation can be
// traced to the passes, sets and faults it was judged on.
func (n *runner) dumpObservations(o Observations) {
	path := filepath.Join(n.o.Dir, "nemesis-observations.json")
	b, err := json.MarshalIndent(o, "", " ")
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		n.env.Logf("nemesis: could not write the observations: %v", err)
		return
	}
	n.env.Logf("nemesis: the checker's observations are in %s", path)
}
