package demo

import (
	"context"
	"encoding/json"
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
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/loopdisk"
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
	writeSerial int
	// writing is the serial of the write in flight (-1: none); writeBegun
	// is closed when the next write begins.
	writing    int
	writeBegun chan struct{}
}

// nemesisKinds are the fault kinds this cluster can take.
func (d *demo) nemesisKinds(disk bool) []FaultKind {
	kinds := slices.Concat(harness.ProcessKinds, harness.FileKinds)
	if disk {
		// readonly's remedy (stop, umount, e2fsck, mount, start) needs the
		// device free: brokers on hosts run under nsenter --net, in the
		// root's mount namespace, so none holds a copy of the mount.
		kinds = append(kinds, DiskKinds...)
	}
	if d.c.Net() != nil {
		kinds = append(kinds, NetKinds...)
	}
	if d.o.Brokers >= 3 {
		kinds = append(kinds, harness.KindQuorumLoss)
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
		diskID = b.ID
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
	n.mark(e, true)
	defer n.mark(e, false)
	f := Injected{Kind: e.Kind, Brokers: e.Brokers, Start: time.Now()}
	in, err := n.inject(ctx, e, &f)
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
	n.d.logf("  nemesis: injected %s%s", e, copiesNote(f.Copies))
	sleepUntil(ctx, f.Start.Add(e.Length))
	// End is when the undo begins: from then on a broker may be back.
	f.End = time.Now()
	if err := in.Undo(ctx); err != nil {
		n.d.logf("  nemesis: undoing %s failed: %v (the quiescent check restarts what is down)", e, err)
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
func (n *nemesis) mark(e Event, on bool) {
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
// a write in flight first; a file fault picks its copies (fileTargets).
// f.Copies gets the copies a file fault hit.
func (n *nemesis) inject(ctx context.Context, e Event, f *Injected) (*harness.Injection, error) {
	c := n.d.c
	t := harness.Target{Kind: e.Kind, Length: e.Length, Seed: e.Seed, Timeout: n.d.o.StageTimeout}
	for _, id := range e.Brokers {
		t.Brokers = append(t.Brokers, c.Broker(id))
	}
	switch {
	case e.Kind == harness.KindKill:
		n.awaitWrite(ctx, f)
	case slices.Contains(harness.FileKinds, e.Kind):
		t.Segments, t.Rand = n.fileTargets(ctx, e, t.Brokers[0])
	}
	in, err := c.Inject(ctx, t)
	f.Copies = in.Lost
	for _, df := range in.Files {
		n.d.aud.Forget(df.Path)
	}
	n.mu.Lock()
	for _, cr := range in.Lost {
		n.damaged[cr.Segment] = true
	}
	n.mu.Unlock()
	if e.Kind == harness.KindSwap && in.Aside != "" {
		n.d.aud.forgetUnder(in.Aside)
		n.d.aud.forgetUnder(t.Brokers[0].CopiesDir())
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
func (n *nemesis) awaitWrite(ctx context.Context, f *Injected) {
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
}

// fileTargets chooses e.Copies copies on b (by e.Seed) among the sealed
// segments b holds whose replica set is full and names no other broker
// under a fault and none hit this epoch: the RF-1 bound holds whatever
// the heal's timing. It returns them with the draw of their damage.
func (n *nemesis) fileTargets(ctx context.Context, e Event, b *harness.Broker) ([]meta.Segment, *rand.Rand) {
	rng := rand.New(rand.NewPCG(e.Seed, e.Seed^0xbb67ae8584caa73b))
	snap, err := n.d.leaderClient(ctx).Metadata(ctx)
	if err != nil {
		return nil, rng
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
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	return cands[:min(e.Copies, len(cands))], rng
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
		r.SegmentsWritten, r.SegmentsAcknowledged, r.WriteFailures, r.WriteFailuresQuorumLoss, r.QuorumLossWindows, r.KillsDuringWrite, r.FaultsInjected[harness.KindKill])
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
