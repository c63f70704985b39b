package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/loopdisk"
	"github.com/malachi-log/malachi/testbed/netns"
)

// NemesisReport is the randomized nemesis's part of the report.
type NemesisReport struct {
	Seed     uint64  `json:"seed"`
	Duration string  `json:"duration"`
	Minutes  float64 `json:"minutes"`
	Epochs   int     `json:"epochs"`
	// Kinds are the kinds --nemesis-kinds restricted the draw to (none:
	// every kind the cluster could take).
	Kinds []FaultKind `json:"kinds,omitempty"`
	// FaultsScheduled and FaultsInjected count by kind; a scheduled fault
	// that could not be injected is in NotInjected with why, never counted
	// as survived, and the run fails: a fault that did not happen was not
	// survived either.
	FaultsScheduled map[FaultKind]int `json:"faults_scheduled"`
	FaultsInjected  map[FaultKind]int `json:"faults_injected"`
	NotInjected     []string          `json:"not_injected,omitempty"`
	// UndoFailed lists faults whose undo failed: the quiescent point after
	// them was not one, and the run fails.
	UndoFailed []string `json:"undo_failed,omitempty"`
	// QuorumLossWindows are the deliberate quorum-loss windows injected:
	// writes were expected to fail during them.
	QuorumLossWindows int `json:"quorum_loss_windows"`
	// SegmentsWritten counts the writer's attempts (one segment each),
	// SegmentsAcknowledged those the cluster acknowledged; WriteFailures the
	// rest, of which WriteFailuresQuorumLoss fell in a quorum-loss window.
	SegmentsWritten         int `json:"segments_written"`
	SegmentsAcknowledged    int `json:"segments_acknowledged"`
	WriteFailures           int `json:"write_failures"`
	WriteFailuresQuorumLoss int `json:"write_failures_quorum_loss"`
	// SegmentsLost counts acknowledged segments without a verified copy at
	// the last check (must be 0).
	SegmentsLost int `json:"segments_lost"`
	// CopiesVerified counts the replica copies the checker read in full and
	// found matching their frames' CRCs and the segment's checksum, over
	// every quiescent check.
	CopiesVerified int `json:"copies_verified"`
	ChecksRun      int `json:"quiescent_checks"`
	ChecksPassed   int `json:"quiescent_checks_passed"`
	PassesObserved int `json:"passes_observed"`
	// BytesRereplicated: the growth of every broker's backfill byte
	// counter over each epoch and its heal (a broker killed in an epoch
	// counts from its restart: a lower bound).
	BytesRereplicated int64 `json:"bytes_rereplicated"`
	PassesUnseen      int   `json:"passes_unseen"`
	HoldsSeen         int   `json:"passes_on_hold"`
	// KillsDuringWrite counts the kills that struck while a write was in
	// flight (a kill waits for one to begin, up to twice the writer's
	// period).
	KillsDuringWrite int      `json:"kills_during_write"`
	SetChangesSeen   int      `json:"replica_set_changes_seen"`
	Violations       []string `json:"violations,omitempty"`
	Schedule         string   `json:"schedule"`
}

// nemesis is one randomized run.
type nemesis struct {
	d     *demo
	sched Schedule
	rep   *NemesisReport

	mu          sync.Mutex
	obs         Observations
	active      map[meta.BrokerID]FaultKind // brokers under a fault now
	damaged     map[meta.SegmentID]bool     // copies hit this epoch
	quorumLoss  bool
	cursors     map[meta.BrokerID]passCursor // how far each pass history was read
	disk        *loopdisk.Disk
	diskBroker  *harness.Broker
	writeSerial int
	// writing is the serial of the write in flight (-1: none); writeBegun
	// is closed when the next write begins.
	writing    int
	writeBegun chan struct{}
}

// nemesisKinds are the fault kinds this cluster can take.
func (d *demo) nemesisKinds(disk bool) []FaultKind {
	kinds := slices.Concat(ProcessKinds, FileKinds)
	if disk {
		kinds = append(kinds, KindDiskFull)
		// readonly's remedy (stop, umount, e2fsck, mount, start) needs the
		// device free: brokers on hosts run under nsenter --net, in the
		// root's mount namespace, so none holds a copy of the mount (under
		// ip netns exec each did, and umount found the device busy).
		kinds = append(kinds, KindReadOnly)
	}
	if d.c.Net() != nil {
		kinds = append(kinds, NetKinds...)
	}
	if d.o.Brokers >= 3 {
		kinds = append(kinds, KindQuorumLoss)
	}
	return kinds
}

// drawnKinds are the kinds the nemesis draws: the cluster's, or those of
// --nemesis-kinds, each of which the cluster must be able to take.
func (d *demo) drawnKinds(disk bool) ([]FaultKind, error) {
	can := d.nemesisKinds(disk)
	if len(d.o.NemesisKinds) == 0 {
		return can, nil
	}
	for _, k := range d.o.NemesisKinds {
		if !slices.Contains(can, k) {
			return nil, fmt.Errorf("--nemesis-kinds %s: this cluster cannot take it (it can take %s)", k, strings.Join(kindNames(can), ","))
		}
	}
	return d.o.NemesisKinds, nil
}

// runNemesis runs the randomized nemesis after the baseline load: it draws
// the schedule, runs its epochs with a writer and a watcher going, checks
// at every quiescent point, and fails on the first violation with the
// seed and the schedule printed.
func (d *demo) runNemesis(ctx context.Context, seed uint64) error {
	n := &nemesis{d: d, active: map[meta.BrokerID]FaultKind{}, cursors: map[meta.BrokerID]passCursor{}, writing: -1, writeBegun: make(chan struct{}),
		obs: Observations{RF: d.o.RF, Brokers: d.o.Brokers, Grace: d.o.Grace, Tick: d.o.Tick,
			Settle: 2*d.o.RaftTimeout + time.Second, StepDown: 2*d.o.RaftTimeout + 2*time.Second, Sets: map[meta.SegmentID][]SetObs{}}}
	var diskID meta.BrokerID
	if l, b := d.c.Loop(); l != nil && b != nil {
		n.disk, n.diskBroker, diskID = l, b, b.ID
	} else if !d.o.NemesisNoDisk && d.o.draws(DiskKinds) {
		why := d.c.LoopSkip()
		if why == "" {
			why = loopdisk.Unavailable()
		}
		d.logf("nemesis: no disk faults: no loop-mounted copies disk: %s", why)
		d.rep.Notes = append(d.rep.Notes, "nemesis: disk faults (diskfull, readonly) not drawn: no loop-mounted copies disk: "+why)
	}
	if d.c.Net() == nil && d.o.Nemesis != "" && !d.o.NemesisNoNet && d.o.draws(NetKinds) {
		d.logf("nemesis: no network faults: %s", d.c.NetSkip())
		d.rep.Notes = append(d.rep.Notes, "nemesis: network faults not drawn (brokers on loopback): "+d.c.NetSkip())
	}
	kinds, err := d.drawnKinds(diskID != 0)
	if err != nil {
		return err
	}
	n.sched = Draw(seed, d.o.NemesisDuration, d.o.Brokers, d.o.RF, kinds, diskID)
	n.rep = &NemesisReport{Seed: seed, Duration: d.o.NemesisDuration.String(), Epochs: len(n.sched.Epochs), Kinds: d.o.NemesisKinds,
		FaultsScheduled: n.sched.Count(), FaultsInjected: map[FaultKind]int{}, Schedule: n.sched.String()}
	d.rep.Nemesis = n.rep
	d.logf("%s", n.sched)
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
		d.logf("NEMESIS FAILED (seed %d; replay with %s): %v\n%s", seed, n.rep.replay(), err, n.sched)
	}
	return err
}

// epochs runs every epoch, each followed by a quiescent check.
func (n *nemesis) epochs(ctx context.Context) error {
	for i, ep := range n.sched.Epochs {
		if err := ctx.Err(); err != nil {
			return err
		}
		n.d.logf("nemesis: epoch %d of %d: %d faults over %v", i+1, len(n.sched.Epochs), len(ep.Events), ep.Window)
		before := n.d.backfillBytes(ctx)
		wctx, stopWriter := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); n.write(wctx) }()
		n.runEpoch(ctx, ep)
		stopWriter()
		wg.Wait()
		if err := n.quiesce(ctx, fmt.Sprintf("after epoch %d", i+1)); err != nil {
			return err
		}
		n.rep.BytesRereplicated += n.d.backfillDelta(ctx, before)
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
func (n *nemesis) runEpoch(ctx context.Context, ep Epoch) {
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

func (n *nemesis) notInjected(e Event, why string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rep.NotInjected = append(n.rep.NotInjected, fmt.Sprintf("%s: %s", e, why))
	n.d.logf("  nemesis: NOT injected: %s: %s", e, why)
}

// event injects e, holds it for its length and undoes it.
func (n *nemesis) event(ctx context.Context, e Event) {
	for _, b := range e.Brokers {
		if br := n.d.c.Broker(b); br == nil || !br.Alive() {
			n.notInjected(e, fmt.Sprintf("broker %d is not running", b))
			return
		}
	}
	n.mu.Lock()
	for _, b := range e.Brokers {
		n.active[b] = e.Kind
	}
	if e.Kind == KindQuorumLoss {
		n.quorumLoss = true
	}
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		for _, b := range e.Brokers {
			delete(n.active, b)
		}
		if e.Kind == KindQuorumLoss {
			n.quorumLoss = false
		}
		n.mu.Unlock()
	}()
	f := Injected{Kind: e.Kind, Brokers: e.Brokers, Start: time.Now()}
	undo, err := n.inject(ctx, e, &f)
	if err != nil {
		n.notInjected(e, err.Error())
		if undo != nil {
			_ = undo()
		}
		return
	}
	n.mu.Lock()
	n.rep.FaultsInjected[e.Kind]++
	if e.Kind == KindQuorumLoss {
		n.rep.QuorumLossWindows++
	}
	n.mu.Unlock()
	n.d.logf("  nemesis: injected %s%s", e, copiesNote(f.Copies))
	sleepUntil(ctx, f.Start.Add(e.Length))
	// End is when the undo begins: from then on a broker may be back.
	f.End = time.Now()
	if undo != nil {
		if err := undo(); err != nil {
			n.d.logf("  nemesis: undoing %s failed: %v (the quiescent check restarts what is down)", e, err)
			n.mu.Lock()
			n.rep.UndoFailed = append(n.rep.UndoFailed, fmt.Sprintf("%s: %v", e, err))
			n.mu.Unlock()
		}
	}
	n.mu.Lock()
	n.obs.Faults = append(n.obs.Faults, f)
	n.mu.Unlock()
}

func copiesNote(cs []heal.CopyRef) string {
	if len(cs) == 0 {
		return ""
	}
	return fmt.Sprintf(": copies %v", cs)
}

// inject makes e's fault and returns how to undo it (nil: nothing to undo,
// the cluster heals it). f.Copies gets the copies a file fault hit.
func (n *nemesis) inject(ctx context.Context, e Event, f *Injected) (func() error, error) {
	c := n.d.c
	brokers := make([]*harness.Broker, len(e.Brokers))
	for i, id := range e.Brokers {
		brokers[i] = c.Broker(id)
	}
	startAll := func() error { return n.startAll(ctx, brokers) }
	switch e.Kind {
	case KindKill:
		return startAll, n.killDuringWrite(ctx, brokers, f)
	case KindQuorumLoss:
		for _, b := range brokers {
			if err := c.Kill(b); err != nil {
				return startAll, err
			}
		}
		return startAll, nil
	case KindPause:
		for _, b := range brokers {
			if err := b.Pause(); err != nil {
				return n.resumeAll(brokers), err
			}
		}
		return n.resumeAll(brokers), nil
	case KindRestart:
		for _, b := range brokers {
			if err := c.Terminate(b, 10*time.Second); err != nil {
				return startAll, err
			}
		}
		return nil, startAll()
	case KindSwap:
		return n.swap(ctx, brokers[0])
	case KindDelete, KindTruncate, KindExtend, KindBitflip, KindLatch:
		cs, err := n.fileFault(ctx, e, brokers[0])
		f.Copies = cs
		return nil, err
	case KindIsolate, KindPartition, KindDropOut, KindDropIn, KindFlap, KindCap:
		return n.network(e)
	case KindDiskFull:
		return n.diskFull()
	case KindReadOnly:
		return n.readOnly(ctx)
	}
	return nil, fmt.Errorf("unknown fault kind %q", e.Kind)
}

// killDuringWrite kills bs once a write is in flight (waiting for the
// writer's next one, up to twice its period); f.DuringWrite names the
// write that was begun and not yet answered when the kill was sent.
func (n *nemesis) killDuringWrite(ctx context.Context, bs []*harness.Broker, f *Injected) error {
	n.mu.Lock()
	begun := n.writeBegun
	idle := n.writing < 0
	n.mu.Unlock()
	if idle {
		t := time.NewTimer(2 * writeEvery)
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
	for _, b := range bs {
		if err := n.d.c.Kill(b); err != nil {
			return err
		}
	}
	return nil
}

// startAll starts every broker of bs that is not running and waits until
// each answers with a leader.
func (n *nemesis) startAll(ctx context.Context, bs []*harness.Broker) error {
	var errs []error
	for _, b := range bs {
		if !b.Alive() {
			if err := n.d.c.StartBroker(b); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, b := range bs {
		if err := n.d.waitNotDeadLeader(ctx, b); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitNotDeadLeader waits until b answers its health check with a leader.
func (d *demo) waitNotDeadLeader(ctx context.Context, b *harness.Broker) error {
	start := time.Now()
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := b.Client.Health(hctx)
		cancel()
		if err == nil && h.Leader != 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(start) > d.o.StageTimeout {
			return fmt.Errorf("broker %d (admin %s) not back after %v: %v", b.ID, b.Admin, d.o.StageTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *nemesis) resumeAll(bs []*harness.Broker) func() error {
	return func() error {
		var errs []error
		for _, b := range bs {
			if err := b.Resume(); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}

// swap kills b and puts an empty data directory in place of its own (the
// old one removed); the undo starts it on the empty one.
func (n *nemesis) swap(ctx context.Context, b *harness.Broker) (func() error, error) {
	start := func() error { return n.startAll(ctx, []*harness.Broker{b}) }
	if err := n.d.c.Kill(b); err != nil {
		return start, err
	}
	// The passes it ran go with its data directory: read them first.
	if err := n.notePassHistory(b.ID, b.Dir); err != nil {
		return start, fmt.Errorf("swap: reading broker %d's pass history: %w", b.ID, err)
	}
	aside := fmt.Sprintf("%s.nemesis-swapped", b.Dir)
	if err := os.RemoveAll(aside); err != nil {
		return start, err
	}
	if err := os.Rename(b.Dir, aside); err != nil {
		return start, fmt.Errorf("swap: moving %s aside: %w", b.Dir, err)
	}
	n.d.aud.forgetUnder(aside)
	n.d.aud.forgetDir(filepath.Join(b.Dir, "copies"))
	if err := os.Mkdir(b.Dir, 0o755); err != nil {
		return start, fmt.Errorf("swap: creating the empty %s: %w", b.Dir, err)
	}
	return func() error {
		_ = os.RemoveAll(aside)
		return start()
	}, nil
}

// network injects a network fault between the brokers' hosts (host i is
// broker i) and returns its undo.
func (n *nemesis) network(e Event) (func() error, error) {
	nt := n.d.c.Net()
	if nt == nil {
		return nil, fmt.Errorf("brokers on loopback: %s", n.d.c.NetSkip())
	}
	hosts := make([]int, len(e.Brokers))
	for i, b := range e.Brokers {
		hosts[i] = int(b)
	}
	var undo netns.Undo
	var err error
	switch e.Kind {
	case KindIsolate:
		undo, err = nt.Isolate(hosts[0])
	case KindPartition:
		var rest []int
		for i := 1; i <= n.d.o.Brokers; i++ {
			if !slices.Contains(hosts, i) {
				rest = append(rest, i)
			}
		}
		undo, err = nt.Partition(hosts, rest)
	case KindDropOut:
		undo, err = nt.DropOutbound(hosts[0], nil)
	case KindDropIn:
		undo, err = nt.DropInbound(hosts[0], nil)
	case KindFlap:
		undo, _, err = nt.Flap(hosts[0], e.Length, e.Seed)
	case KindCap:
		undo, err = nt.Cap(hosts[0], 2<<20)
	}
	if undo == nil {
		return nil, err
	}
	return func() error { return undo() }, err
}

// diskFull fills the loop-mounted copies disk; the undo removes the filler.
func (n *nemesis) diskFull() (func() error, error) {
	filler := filepath.Join(n.disk.Dir, diskFiller)
	undo := func() error {
		if err := os.Remove(filler); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	_, err := n.disk.Fill(filler, 0)
	return undo, err
}

// readOnly makes the copies disk read-only under its live broker; the undo
// is the operator's remedy (stop, umount, e2fsck -f -y, mount, start).
func (n *nemesis) readOnly(ctx context.Context) (func() error, error) {
	b, l := n.diskBroker, n.disk
	undo := func() error {
		_, err := n.d.recoverDisk(ctx, b, l)
		return err
	}
	if err := harness.SyncDir(l.Dir); err != nil {
		return nil, err
	}
	syscall.Sync()
	_, err := l.GoReadOnly()
	return undo, err
}

// fileFault damages e.Copies copies on b, chosen (by e.Seed) among the
// sealed segments b holds whose replica set is full and names no other
// broker under a fault and none hit this epoch: the RF-1 bound holds
// whatever the heal's timing.
func (n *nemesis) fileFault(ctx context.Context, e Event, b *harness.Broker) ([]heal.CopyRef, error) {
	snap, err := n.d.leaderClient(ctx).Metadata(ctx)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	n.mu.Lock()
	var cands []meta.Segment
	for _, s := range snap.Segments {
		if !s.Sealed || !s.HasReplica(b.ID) || len(s.Replicas) != n.d.o.RF || n.damaged[s.ID] {
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
	sort.Slice(cands, func(i, j int) bool { return cands[i].ID < cands[j].ID })
	rng := rand.New(rand.NewPCG(e.Seed, e.Seed^0xbb67ae8584caa73b))
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	var hit []heal.CopyRef
	var errs []error
	for _, s := range cands[:min(e.Copies, len(cands))] {
		if err := n.damage(ctx, e.Kind, b, s, rng); err != nil {
			errs = append(errs, fmt.Errorf("%s on broker %d: %w", s.ID, b.ID, err))
			continue
		}
		hit = append(hit, heal.CopyRef{Segment: s.ID, Broker: b.ID})
		n.mu.Lock()
		n.damaged[s.ID] = true
		n.mu.Unlock()
	}
	if len(hit) == 0 {
		errs = append(errs, fmt.Errorf("no copy on broker %d could be hit (%d candidates)", b.ID, len(cands)))
		return nil, errors.Join(errs...)
	}
	return hit, nil
}

func (n *nemesis) damage(ctx context.Context, kind FaultKind, b *harness.Broker, s meta.Segment, rng *rand.Rand) error {
	if kind == KindLatch {
		return b.Client.Latch(ctx, s.ID)
	}
	path, err := b.CopyPath(s.ID)
	if err != nil {
		return err
	}
	defer n.d.aud.Forget(path)
	switch kind {
	case KindDelete:
		_, err = harness.DeleteCopy(path)
	case KindTruncate:
		_, err = harness.TruncateCopy(path, rng)
	case KindExtend:
		_, err = harness.ExtendCopy(path, 1+rng.Int64N(4096), rng)
	case KindBitflip:
		_, err = harness.BitflipCopy(path, s.ByteSize, rng)
	}
	return err
}

// writeText prints the nemesis's figures.
// replay is the flags that draw the same schedule again.
func (r *NemesisReport) replay() string {
	s := fmt.Sprintf("--nemesis random --seed %d --duration %s", r.Seed, r.Duration)
	if len(r.Kinds) > 0 {
		s += " --nemesis-kinds " + strings.Join(kindNames(r.Kinds), ",")
	}
	return s
}

func (r *NemesisReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "\nnemesis            seed %d, %.1f minutes (--duration %s), %d epochs; replay: %s\n",
		r.Seed, r.Minutes, r.Duration, r.Epochs, r.replay())
	kinds := slices.Sorted(maps.Keys(r.FaultsScheduled))
	var parts []string
	injected := 0
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d/%d", k, r.FaultsInjected[k], r.FaultsScheduled[k]))
		injected += r.FaultsInjected[k]
	}
	fmt.Fprintf(w, "  faults injected/scheduled: %d in all: %s\n", injected, strings.Join(parts, ", "))
	fmt.Fprintf(w, "  writes: %d segments written, %d acknowledged, %d failed (%d in %d quorum-loss windows, expected); %d of %d kills struck mid-write\n",
		r.SegmentsWritten, r.SegmentsAcknowledged, r.WriteFailures, r.WriteFailuresQuorumLoss, r.QuorumLossWindows, r.KillsDuringWrite, r.FaultsInjected[KindKill])
	fmt.Fprintf(w, "  segments lost: %d; copies read and verified: %d; quiescent checks passed: %d of %d\n",
		r.SegmentsLost, r.CopiesVerified, r.ChecksPassed, r.ChecksRun)
	fmt.Fprintf(w, "  heal passes observed: %d of %d (from every broker's pass history), %d on hold; replica-set changes seen: %d\n",
		r.PassesObserved, r.PassesObserved+r.PassesUnseen, r.HoldsSeen, r.SetChangesSeen)
	for _, s := range r.NotInjected {
		fmt.Fprintf(w, "  NOT injected: %s\n", s)
	}
	for _, s := range r.UndoFailed {
		fmt.Fprintf(w, "  UNDO FAILED: %s\n", s)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  VIOLATION: %s\n", v)
	}
	if len(r.Violations) > 0 || len(r.NotInjected) > 0 || r.ChecksPassed < r.ChecksRun {
		fmt.Fprintf(w, "%s", r.Schedule)
	}
}

// dumpObservations writes what the checker was given to the run's
// directory (nemesis-observations.json), so that a violation can be
// traced to the passes, sets and faults it was judged on.
func (n *nemesis) dumpObservations(o Observations) {
	path := filepath.Join(n.d.o.Dir, "nemesis-observations.json")
	b, err := json.MarshalIndent(o, "", " ")
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		n.d.logf("nemesis: could not write the observations: %v", err)
		return
	}
	n.d.logf("nemesis: the checker's observations are in %s", path)
}
