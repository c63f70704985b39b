package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
)

// lifeCluster is a started cluster of real brokers for the lifecycle
// tests, with the leader's admin client and the CLI.
type lifeCluster struct {
	t      *testing.T
	c      *harness.Cluster
	leader meta.BrokerID
	addr   string
	client *admin.Client
}

func startLifeCluster(t *testing.T, cfg harness.Config) *lifeCluster {
	t.Helper()
	malachid := binaries(t)
	cfg.Bin, cfg.Root, cfg.Raft = malachid, t.TempDir(), harness.DemoRaft(time.Second)
	c, err := harness.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	ctx := context.Background()
	leader, err := c.WaitReady(ctx, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRegistered(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	addr := c.Broker(leader).Admin
	return &lifeCluster{t: t, c: c, leader: leader, addr: addr, client: admin.New(addr, c.RPC(), c.Config().Insecure)}
}

func (lc *lifeCluster) cli(cmd string, args ...string) (string, string, int) {
	var out, errb strings.Builder
	code := run(append(append([]string{cmd}, lc.c.CLIFlags()...), append(args, "--admin", lc.addr)...), &out, &errb)
	return out.String(), errb.String(), code
}

func (lc *lifeCluster) load(prefix string, segments int) {
	lc.t.Helper()
	if out, errs, code := lc.cli("load", "--segments", fmt.Sprint(segments), "--records", "4", "--size", "1KiB", "--prefix", prefix); code != 0 {
		lc.t.Fatalf("load %s: exit %d: %s%s", prefix, code, out, errs)
	}
}

// followers are the brokers other than the leader, in id order.
func (lc *lifeCluster) followers() []meta.BrokerID {
	var out []meta.BrokerID
	for _, b := range lc.c.Brokers() {
		if b.ID != lc.leader {
			out = append(out, b.ID)
		}
	}
	return out
}

// follow reads the leader's pass history from the pass after since,
// calling each on every pass in order, until each says done; it waits for
// new passes with a generous bound (within) and fails with each's last
// account. It fails if the history dropped or skipped a pass, or if the
// broker stopped running the coordinator: no pass goes unread. It returns
// the last pass read.
func (lc *lifeCluster) follow(since uint64, within time.Duration, each func(p plugin.PassRecord) (bool, string)) plugin.PassRecord {
	lc.t.Helper()
	deadline := time.Now().Add(within)
	why := fmt.Sprintf("no pass after %d in the leader's history", since)
	var last plugin.PassRecord
	for next := since; ; {
		h, err := lc.client.Passes(context.Background(), next, 0)
		if err != nil {
			lc.t.Fatalf("pass history after %d: %v", next, err)
		}
		if h.Dropped > 0 {
			lc.t.Fatalf("the pass history dropped %d passes after %d before they were read", h.Dropped, next)
		}
		if !h.Leader {
			lc.t.Fatalf("broker %d no longer runs the coordinator (pass %d read last): the test's passes would go unread", h.Broker, next)
		}
		for _, p := range h.Passes {
			if p.Seq != next+1 {
				lc.t.Fatalf("pass history: pass %d after %d", p.Seq, next)
			}
			next, last = p.Seq, p
			done, w := each(p)
			if done {
				return p
			}
			why = w
		}
		if h.More {
			continue
		}
		if time.Now().After(deadline) {
			lc.t.Fatalf("after %v (last pass read %d): %s", within, last.Seq, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lastPass is the newest pass in the leader's history (0: none yet).
func (lc *lifeCluster) lastPass() uint64 {
	lc.t.Helper()
	h, err := lc.client.Passes(context.Background(), 0, 1)
	if err != nil {
		lc.t.Fatal(err)
	}
	return h.Last
}

// metadata reads the leader's metadata.
func (lc *lifeCluster) metadata() meta.Snapshot {
	lc.t.Helper()
	snap, err := lc.client.Metadata(context.Background())
	if err != nil {
		lc.t.Fatal(err)
	}
	return snap
}

// checkCommands fails if a command the pass applied leaves a set with
// fewer than rf members: every replica set change goes through a pass's
// commands, so this sees every set the metadata ever had.
func checkCommands(t *testing.T, p plugin.PassRecord, rf int) {
	t.Helper()
	for _, c := range p.Report.Ready {
		if len(c.Replicas) < rf {
			t.Fatalf("pass %d applied %s %v -> %v: below the factor %d", p.Seq, c.ID, c.Expected, c.Replicas, rf)
		}
	}
}

// belowFactor names the sets of snap with fewer than rf members.
func belowFactor(snap meta.Snapshot, rf int) []string {
	var out []string
	for _, s := range snap.Segments {
		if len(s.Replicas) < rf {
			out = append(out, fmt.Sprintf("%s %v", s.ID, s.Replicas))
		}
	}
	return out
}

// TestDecommissionUnderWriteLoadEndToEnd: 4 real brokers at RF 3; a
// follower is decommissioned while a writer keeps loading new segments.
// Every pass the leader ran from the decommission on is read from its pass
// history: no pass counts a segment under-replicated, and no command a
// pass applied leaves a set with fewer than 3 members (every replica set
// change is a pass's command, so no set the metadata ever had was below
// the factor). No new segment is created on the decommissioning broker (no
// command moves a new segment off it). The writes must overlap the drain
// (at least 2 loads finish before the pass that reports it drained), and
// the drain must end: every set at 3 without the broker.
func TestDecommissionUnderWriteLoadEndToEnd(t *testing.T) {
	lc := startLifeCluster(t, harness.Config{Brokers: 4, RF: 3, Tick: 500 * time.Millisecond, Grace: 2 * time.Second, HealExtra: "pass_backfills = 1"})
	lc.load("dl", 12)
	d := lc.followers()[0]
	from := lc.lastPass()
	if out, errs, code := lc.cli("decommission", d.String()); code != 0 {
		t.Fatalf("decommission %d: exit %d: %s%s", d, code, out, errs)
	}
	w := startWriter(lc, 10)
	defer w.stop() // idempotent: ends the writer if the test fails first
	var (
		writtenAt uint64 // the metadata index once the writer stopped
		moves     int
		read      int
		offD      = map[meta.SegmentID]bool{} // new segments a command moved off d
	)
	drained := lc.follow(from, 180*time.Second, func(p plugin.PassRecord) (bool, string) {
		read++
		checkCommands(t, p, 3)
		if p.Report.UnderReplicated != 0 {
			t.Fatalf("pass %d reports %d under-replicated", p.Seq, p.Report.UnderReplicated)
		}
		for _, c := range p.Report.Ready {
			if strings.HasPrefix(string(c.ID), "w") && slices.Contains(c.Expected, d) {
				offD[c.ID] = true
			}
		}
		dr := p.Report.DrainOf(d)
		if dr != nil {
			moves += dr.Moving
		}
		if writtenAt == 0 && w.count() >= 4 {
			w.stop()
			writtenAt = lc.metadata().Index
		}
		switch {
		case writtenAt == 0:
			return false, fmt.Sprintf("pass %d: the writer has done %d loads of 4", p.Seq, w.count())
		case dr == nil:
			return false, fmt.Sprintf("pass %d does not report the decommission", p.Seq)
		case !dr.Drained || p.Report.Index < writtenAt:
			return false, fmt.Sprintf("pass %d (index %d, writer done at %d): drain %+v", p.Seq, p.Report.Index, writtenAt, *dr)
		}
		return true, ""
	})
	loadsDone, loadErr := w.stop()
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	// The writes overlapped the drain.
	during := 0
	for _, at := range loadsDone {
		if at.Before(drained.Ended) {
			during++
		}
	}
	if during < 2 {
		t.Fatalf("only %d loads finished before the drain did: the writes did not overlap it", during)
	}
	snap := lc.metadata()
	if want := 12 + 2*len(loadsDone); len(snap.Segments) != want {
		t.Fatalf("%d segments, want %d (12 + 2 per load, %d loads)", len(snap.Segments), want, len(loadsDone))
	}
	for _, s := range snap.Segments {
		if len(s.Replicas) != 3 || s.HasReplica(d) {
			t.Fatalf("after the drain, segment %s has %v", s.ID, s.Replicas)
		}
	}
	t.Logf("drained broker %d under %d loads (%d before the drain ended): every one of the %d passes %d..%d read, %d moves planned",
		d, len(loadsDone), during, read, from+1, drained.Seq, moves)
	if len(offD) > 0 {
		t.Fatalf("%d new segments were created with a replica on the decommissioning broker %d (3 others were live): %v", len(offD), d, sortedIDs(offD))
	}
}

// TestDecommissionCancelledEndToEnd: 4 real brokers at RF 3, one move per
// pass (pass_backfills = 1), no rebalancer refilling the broker. A
// decommission cancelled once a replica has moved off the broker stops
// moving them: from the first pass that no longer reports it, no pass
// takes the broker out of a set over 3 passes, it keeps the replicas it
// had, it is active, and every set keeps 3 members. The drain to the end
// is the fault suite's decommission stage (testbed/stage).
func TestDecommissionCancelledEndToEnd(t *testing.T) {
	lc := startLifeCluster(t, harness.Config{Brokers: 4, RF: 3, Tick: 200 * time.Millisecond, Grace: 2 * time.Second, HealExtra: "pass_backfills = 1\nrebalance = false\n"})
	lc.load("dc", 12)
	d := lc.followers()[0]
	held := func() int {
		t.Helper()
		snap := lc.metadata()
		if bad := belowFactor(snap, 3); len(bad) > 0 {
			t.Fatalf("sets below the factor: %v", bad)
		}
		return harness.HeldBy(&snap, d)
	}
	before, from := held(), lc.lastPass()
	if out, errs, code := lc.cli("decommission", d.String()); code != 0 {
		t.Fatalf("decommission %d: exit %d: %s%s", d, code, out, errs)
	}
	moved := lc.follow(from, 60*time.Second, func(p plugin.PassRecord) (bool, string) {
		return held() < before, fmt.Sprintf("after pass %d no replica moved off the decommissioning broker", p.Seq)
	})
	if out, errs, code := lc.cli("decommission", d.String(), "--cancel"); code != 0 {
		t.Fatalf("decommission --cancel %d: exit %d: %s%s", d, code, out, errs)
	}
	cancelled := lc.metadata().Index
	clear := lc.follow(moved.Seq, 60*time.Second, func(p plugin.PassRecord) (bool, string) {
		return p.Report.Index >= cancelled && p.Report.DrainOf(d) == nil, fmt.Sprintf("pass %d still reports the cancelled decommission", p.Seq)
	})
	left := held()
	lc.follow(clear.Seq, 60*time.Second, func(p plugin.PassRecord) (bool, string) {
		for _, c := range p.Report.Ready {
			if slices.Contains(c.Expected, d) && !slices.Contains(c.Replicas, d) {
				t.Fatalf("pass %d, after the cancel: %s %v -> %v takes broker %d out", p.Seq, c.ID, c.Expected, c.Replicas, d)
			}
		}
		return p.Seq >= clear.Seq+3, fmt.Sprintf("pass %d of %d", p.Seq, clear.Seq+3)
	})
	snap := lc.metadata()
	if n := harness.HeldBy(&snap, d); n != left {
		t.Fatalf("broker %d went from %d to %d replicas after its decommission was cancelled", d, left, n)
	}
	if b, _ := snap.Broker(d); !b.Is(meta.ModeActive) {
		t.Fatalf("broker %d after the cancel: %+v", d, b)
	}
	t.Logf("cancelled midway: broker %d kept %d of %d replicas", d, left, before)
}

// writer loads 2 new segments at a time until stopped (or n loads).
type writer struct {
	mu    sync.Mutex
	done  []time.Time // when each load finished
	err   error
	quit  chan struct{}
	ended chan struct{}
	once  sync.Once
}

func startWriter(lc *lifeCluster, n int) *writer {
	w := &writer{quit: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		for i := 1; i <= n; i++ {
			select {
			case <-w.quit:
				return
			default:
			}
			var out, errb strings.Builder
			args := append(append([]string{"load"}, lc.c.CLIFlags()...), "--admin", lc.addr, "--segments", "2", "--records", "4", "--size", "1KiB", "--prefix", fmt.Sprintf("w%d", i))
			code := run(args, &out, &errb)
			w.mu.Lock()
			if code != 0 {
				w.err = fmt.Errorf("load %d: exit %d: %s%s", i, code, out.String(), errb.String())
				w.mu.Unlock()
				return
			}
			w.done = append(w.done, time.Now())
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.done)
}

// stop ends the writer after its load in progress and returns when each
// load finished, and its error.
func (w *writer) stop() ([]time.Time, error) {
	w.once.Do(func() { close(w.quit) })
	<-w.ended
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.done), w.err
}

func sortedIDs(m map[meta.SegmentID]bool) []meta.SegmentID {
	out := make([]meta.SegmentID, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// TestDecommissionBlockedEndToEnd: 3 real brokers at RF 3; decommissioning
// one cannot finish (no spare broker). Every pass for 15 passes after the
// first that reports the drain blocked, each read from the leader's pass
// history,
// reports the drain with every segment blocked as no_spare_broker, nothing
// moving, not drained, and applies no command; every set still has its 3
// members including the broker. The cancel then clears it.
func TestDecommissionBlockedEndToEnd(t *testing.T) {
	lc := startLifeCluster(t, harness.Config{Brokers: 3, RF: 3, Tick: 300 * time.Millisecond, Grace: 2 * time.Second})
	lc.load("db", 6)
	d := lc.followers()[0]
	from := lc.lastPass()
	if out, errs, code := lc.cli("decommission", d.String()); code != 0 {
		t.Fatalf("decommission %d: exit %d: %s%s", d, code, out, errs)
	}
	asked := lc.metadata().Index // the decommission is recorded at or before it
	var first uint64
	last := lc.follow(from, 120*time.Second, func(p plugin.PassRecord) (bool, string) {
		dr := p.Report.DrainOf(d)
		if first == 0 {
			// Until the first pass has confirmed the new copies, a drain's
			// segments may be blocked as healing; from the first pass
			// that blocks them all on the missing spare, every pass must.
			if dr == nil || p.Report.Index < asked || dr.Blocked[DrainNoSpare] != 6 {
				return false, fmt.Sprintf("no pass reports the decommission blocked on %s yet (pass %d: %+v)", DrainNoSpare, p.Seq, dr)
			}
			first = p.Seq
		}
		switch {
		case len(p.Report.Ready) > 0:
			t.Fatalf("pass %d applied %v with no spare broker", p.Seq, p.Report.Ready)
		case dr == nil:
			t.Fatalf("pass %d does not report the decommission of broker %d", p.Seq, d)
		case dr.Drained || dr.Moving != 0 || dr.Segments != 6 || dr.Blocked[DrainNoSpare] != 6:
			t.Fatalf("pass %d: drain %+v, want 6 segments all blocked %s, none moving", p.Seq, *dr, DrainNoSpare)
		case len(dr.Examples) == 0 || dr.Examples[0].Reason != DrainNoSpare:
			t.Fatalf("pass %d: drain examples %+v", p.Seq, dr.Examples)
		}
		return p.Seq >= first+15, fmt.Sprintf("pass %d of %d", p.Seq, first+15)
	})
	snap := lc.metadata()
	if bad := belowFactor(snap, 3); len(bad) > 0 {
		t.Fatalf("after pass %d: sets below the factor: %v", last.Seq, bad)
	}
	for _, seg := range snap.Segments {
		if !seg.HasReplica(d) {
			t.Fatalf("after pass %d: segment %s %v left the decommissioning broker with no spare broker", last.Seq, seg.ID, seg.Replicas)
		}
	}
	t.Logf("blocked decommission: every pass %d..%d read, each blocked on %s", first, last.Seq, DrainNoSpare)
	out, _, _ := lc.cli("status")
	if !strings.Contains(out, "no_spare_broker 6") {
		t.Fatalf("status does not give the reason:\n%s", out)
	}
	if out, errs, code := lc.cli("decommission", d.String(), "--cancel"); code != 0 {
		t.Fatalf("cancel: exit %d: %s%s", code, out, errs)
	}
	cancelled := lc.metadata().Index
	lc.follow(last.Seq, 60*time.Second, func(p plugin.PassRecord) (bool, string) {
		return p.Report.Index >= cancelled && p.Report.DrainOf(d) == nil, fmt.Sprintf("pass %d still reports the cancelled decommission", p.Seq)
	})
}

// DrainNoSpare is heal.DrainNoSpareBroker as the status serves it.
const DrainNoSpare = "no_spare_broker"

// TestMaintenanceThenGraceEndToEnd: 4 real brokers at RF 3, grace 2 s; a
// follower enters an 8 s maintenance window and is killed at once, and
// stays down. Every pass the leader ran from the kill on is read from its
// pass history (GET /v1/passes), none sampled. Ordering asserted, never a
// duration: no pass that ended before the window's end lists the broker
// suspect or dead; no pass that ended before end + grace lists it dead;
// some pass lists it suspect (the grace running) before the first that
// lists it dead; no pass that ended before end + grace applied a command;
// in the end every set has 3 members without it.
func TestMaintenanceThenGraceEndToEnd(t *testing.T) {
	const grace = 2 * time.Second
	lc := startLifeCluster(t, harness.Config{Brokers: 4, RF: 3, Tick: 400 * time.Millisecond, Grace: grace})
	lc.load("mg", 8)
	ctx := context.Background()
	m := lc.followers()[0]
	mode, err := lc.client.Maintenance(ctx, m, 8*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Every pass after from is judged, but for one that read the metadata
	// before the window was recorded (it was running when the window was
	// asked for: the broker it finds down is not in maintenance to it).
	from, windowAt := lc.lastPass(), lc.metadata().Index
	if err := lc.c.Kill(lc.c.Broker(m)); err != nil {
		t.Fatal(err)
	}
	until := mode.Until
	replaced := func(snap meta.Snapshot) bool {
		for _, s := range snap.Segments {
			if s.HasReplica(m) || len(s.Replicas) != 3 {
				return false
			}
		}
		return true
	}
	var passes []plugin.PassRecord
	lc.follow(from, 120*time.Second, func(p plugin.PassRecord) (bool, string) {
		if p.Report.Index < windowAt {
			return false, fmt.Sprintf("pass %d read index %d, before the window (%d)", p.Seq, p.Report.Index, windowAt)
		}
		passes = append(passes, p)
		if p.Ended.Before(until.Add(grace)) && len(p.Report.Ready) > 0 {
			t.Fatalf("pass %d ended %s (window ends %s, + grace %s) and applied %v", p.Seq, p.Ended.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano), until.Add(grace).Format(time.RFC3339Nano), p.Report.Ready)
		}
		if p.AppliedIndex == 0 {
			return false, fmt.Sprintf("pass %d applied nothing", p.Seq)
		}
		snap := lc.metadata()
		return replaced(snap), fmt.Sprintf("after pass %d broker %d is not replaced everywhere: %v", p.Seq, m, snap.Segments)
	})
	var inWindow, suspect int
	firstSuspect, firstDead := uint64(0), uint64(0)
	for _, p := range passes {
		isS, isD := slices.Contains(p.Report.Suspect, m), slices.Contains(p.Report.Dead, m)
		if p.Ended.Before(until) {
			inWindow++
			if isS || isD {
				t.Fatalf("pass %d ended %s, inside the window (until %s), lists broker %d suspect %v dead %v", p.Seq, p.Ended, until, m, isS, isD)
			}
		}
		if isD && p.Ended.Before(until.Add(grace)) {
			t.Fatalf("pass %d ended %s, before the window's end + grace (%s), lists broker %d dead", p.Seq, p.Ended, until.Add(grace), m)
		}
		if isS && firstSuspect == 0 {
			firstSuspect = p.Seq
		}
		if isS && firstDead == 0 {
			suspect++
		}
		if isD && firstDead == 0 {
			firstDead = p.Seq
		}
	}
	if inWindow == 0 {
		t.Fatalf("no pass of the %d read from %d on ended inside the window (until %s)", len(passes), from+1, until)
	}
	if firstSuspect == 0 || firstDead == 0 || firstSuspect >= firstDead {
		t.Fatalf("want passes listing broker %d suspect before the first listing it dead: first suspect %d, first dead %d", m, firstSuspect, firstDead)
	}
	t.Logf("%d passes read (%d to %d): %d inside the window, %d with broker %d suspect (from pass %d), dead from pass %d, then replaced",
		len(passes), passes[0].Seq, passes[len(passes)-1].Seq, inWindow, suspect, m, firstSuspect, firstDead)
}

// TestMaintenanceSecondFailureEndToEnd: 5 real brokers at RF 3; broker M
// enters a 10 min window and is killed, then broker F (not in
// maintenance) is killed. F's segments are healed: every set ends without
// F at 3 members. A segment that held both M and F was down to one healthy
// copy: some pass reports it in maintenance_floor (broker M,
// one_healthy_copy) and its set ends without M too. Every pass is read
// from the leader's pass history. A segment with M and not F keeps M (its
// window holds): no pass, up to 10 passes after the heal, applies a
// command taking M out of its set.
func TestMaintenanceSecondFailureEndToEnd(t *testing.T) {
	lc := startLifeCluster(t, harness.Config{Brokers: 5, RF: 3, Tick: 400 * time.Millisecond, Grace: time.Second})
	lc.load("m2", 10)
	ctx := context.Background()
	snap, err := lc.client.Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Pick M and F among the followers sharing at least one segment, and
	// leaving at least one segment with M and not F.
	var m, f meta.BrokerID
	var both, onlyM []meta.SegmentID
	fs := lc.followers()
	for _, a := range fs {
		for _, b := range fs {
			if a == b || m != 0 {
				continue
			}
			var bo, om []meta.SegmentID
			for _, s := range snap.Segments {
				switch {
				case s.HasReplica(a) && s.HasReplica(b):
					bo = append(bo, s.ID)
				case s.HasReplica(a):
					om = append(om, s.ID)
				}
			}
			if len(bo) > 0 && len(om) > 0 {
				m, f, both, onlyM = a, b, bo, om
			}
		}
	}
	if m == 0 {
		t.Fatalf("no two followers share a segment with one holding another alone: %v", snap.Segments)
	}
	if _, err := lc.client.Maintenance(ctx, m, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	from := lc.lastPass() // every pass after the kills' start is read
	if err := lc.c.Kill(lc.c.Broker(m)); err != nil {
		t.Fatal(err)
	}
	if err := lc.c.Kill(lc.c.Broker(f)); err != nil {
		t.Fatal(err)
	}
	floor := map[meta.SegmentID]heal.MaintenanceFloor{}
	// keepsM fails if a pass applied a command taking M out of a set that
	// held M and not F (its window holds there: two healthy copies left).
	keepsM := func(p plugin.PassRecord) {
		for _, c := range p.Report.Ready {
			if slices.Contains(onlyM, c.ID) && slices.Contains(c.Expected, m) && !slices.Contains(c.Replicas, m) {
				t.Fatalf("pass %d: %s %v -> %v: the maintenance broker's copy was replaced though two healthy copies were left", p.Seq, c.ID, c.Expected, c.Replicas)
			}
		}
	}
	var healedAt uint64 // the metadata index that first showed every set healed
	healed := lc.follow(from, 120*time.Second, func(p plugin.PassRecord) (bool, string) {
		checkCommands(t, p, 3)
		keepsM(p)
		for _, fl := range p.Report.MaintenanceFloor {
			floor[fl.Segment] = fl
		}
		switch {
		case healedAt > 0:
			// Read on until a pass whose view holds the healed sets: every
			// pass that applied a command up to it was then read.
			return p.Report.Index >= healedAt, fmt.Sprintf("pass %d read index %d, healed at %d", p.Seq, p.Report.Index, healedAt)
		case p.AppliedIndex == 0:
			return false, fmt.Sprintf("pass %d applied nothing", p.Seq)
		}
		snap := lc.metadata()
		for _, seg := range snap.Segments {
			if seg.HasReplica(f) || len(seg.Replicas) != 3 {
				return false, fmt.Sprintf("pass %d: %s %v", p.Seq, seg.ID, seg.Replicas)
			}
			if slices.Contains(both, seg.ID) && seg.HasReplica(m) {
				return false, fmt.Sprintf("pass %d: %s %v still names the maintenance broker though down to one healthy copy", p.Seq, seg.ID, seg.Replicas)
			}
		}
		healedAt = snap.Index
		return p.Report.Index >= healedAt, "healed"
	})
	for _, id := range both {
		if fl, ok := floor[id]; !ok || fl.Broker != m || fl.Reason != "one_healthy_copy" {
			t.Fatalf("segment %s (on both %d and %d) not reported in maintenance_floor for broker %d by any pass %d..%d: %+v (all: %v)", id, m, f, m, from+1, healed.Seq, fl, floor)
		}
	}
	for id, fl := range floor {
		if !slices.Contains(both, id) {
			t.Fatalf("segment %s reported in maintenance_floor (%+v) though it did not hold both brokers %d and %d", id, fl, m, f)
		}
	}
	// The window holds for the others: M stays in their sets over 10
	// further passes.
	lc.follow(healed.Seq, 60*time.Second, func(p plugin.PassRecord) (bool, string) {
		keepsM(p)
		return p.Seq >= healed.Seq+10, fmt.Sprintf("pass %d of %d", p.Seq, healed.Seq+10)
	})
	end := lc.metadata()
	for _, id := range onlyM {
		if seg, _ := end.Segment(id); !seg.HasReplica(m) {
			t.Fatalf("%s %v: the maintenance broker's copy was replaced though two healthy copies were left", id, seg.Replicas)
		}
	}
	t.Logf("maintenance broker %d, second failure %d: %d segments healed through the floor %v, %d kept on %d", m, f, len(both), both, len(onlyM), m)
}
