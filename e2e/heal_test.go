package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
)

// victim returns a live non-leader broker that holds at least one replica.
func victim(c *cluster, snap meta.Snapshot, leader int) int {
	for _, s := range snap.Segments {
		for _, r := range s.Replicas {
			if int(r) != leader && c.alive(int(r)) {
				return int(r)
			}
		}
	}
	c.t.Fatal("no non-leader replica")
	return 0
}

// A broker killed: its sealed segments are re-replicated onto the others,
// and the SetSegmentReplicas commands are in the replicated metadata of
// every live broker, with exact copies on every new replica.
func TestBrokerKilledIsHealed(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 4, rf: 3, heal: true})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 24, 32, 1024, "k")
	before, err := c.metadata(leader)
	if err != nil {
		t.Fatal(err)
	}
	v := victim(c, before, leader)
	affected := map[meta.SegmentID]bool{}
	for _, s := range before.Segments {
		if !s.Sealed || len(s.Replicas) != 3 {
			t.Fatalf("after load: %+v", s)
		}
		if s.HasReplica(meta.BrokerID(v)) {
			affected[s.ID] = true
		}
	}
	if len(affected) == 0 {
		t.Fatal("victim holds nothing")
	}
	c.kill(v)
	dead := map[meta.BrokerID]bool{meta.BrokerID(v): true}
	var last string
	c.eventually(60*time.Second, "segments re-replicated off the killed broker", func() bool {
		snap, err := c.metadata(c.anyAlive())
		if err != nil {
			return false
		}
		ok, why := c.fullyHealed(snap, 3, dead)
		last = why
		return ok
	})
	_ = last
	// Every live broker's replicated metadata shows the new sets.
	for _, b := range c.brokers {
		if !c.alive(b.id) {
			continue
		}
		c.eventually(10*time.Second, "metadata replicated to every broker", func() bool {
			snap, err := c.metadata(b.id)
			ok, _ := c.fullyHealed(snap, 3, dead)
			return err == nil && ok
		})
		snap, _ := c.metadata(b.id)
		for _, s := range snap.Segments {
			old, _ := before.Segment(s.ID)
			switch {
			case affected[s.ID] && s.Version != old.Version+1:
				t.Errorf("broker %d: %s version %d, want %d (one SetSegmentReplicas)", b.id, s.ID, s.Version, old.Version+1)
			case !affected[s.ID] && s.Version != old.Version:
				t.Errorf("broker %d: %s untouched segment changed: version %d -> %d", b.id, s.ID, old.Version, s.Version)
			}
		}
	}
	snap, _ := c.metadata(c.anyAlive())
	c.checkCopies(snap)
}

// The leader killed in the middle of a pass: a new leader finishes the
// healing, and no command is applied twice (the compare-and-set refuses a
// replayed one).
func TestLeaderKilledMidPass(t *testing.T) {
	// Larger segments and a throttle so the first pass is still running
	// when the leader dies.
	c := startCluster(t, clusterOpts{n: 5, rf: 3, heal: true, grace: "1s",
		// Two of five brokers die here, within one grace delay as a fresh
		// leader sees it: above the default brake (0.25), which would hold
		// placement for an operator. This test is about the failover.
		extra: "backfill_bytes_per_second = 2000000\nhold_share = 0.5"})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 30, 64, 4096, "m")
	before, _ := c.metadata(leader)
	v := victim(c, before, leader)
	c.kill(v)
	// Wait until the leader's coordinator has started backfilling, then
	// kill it mid-pass.
	// A backfill committed on some target while the metadata is not healed
	// yet: the pass is in its backfill phase (its commands come after).
	c.eventually(30*time.Second, "a backfill committed mid-pass", func() bool {
		for _, b := range c.brokers {
			if c.alive(b.id) && c.metric(b.id, "malachi_heal_backfill_bytes_total") > 0 {
				return true
			}
		}
		return false
	})
	mid, _ := c.metadata(leader)
	if ok, _ := c.fullyHealed(mid, 3, map[meta.BrokerID]bool{meta.BrokerID(v): true}); ok {
		t.Log("the pass finished before the leader could be killed; the test still checks the new leader's passes")
	}
	feed := harness.NewPassFeed(time.Now())
	c.kill(leader)
	dead := map[meta.BrokerID]bool{meta.BrokerID(v): true, meta.BrokerID(leader): true}
	newLeader := c.waitLeader(20 * time.Second)
	if newLeader == leader {
		t.Fatal("killed leader still leads")
	}
	c.eventually(90*time.Second, "the new leader finishes the healing", func() bool {
		snap, err := c.metadata(newLeader)
		if err != nil {
			return false
		}
		ok, _ := c.fullyHealed(snap, 3, dead)
		return ok
	})
	snap, _ := c.metadata(newLeader)
	for _, s := range snap.Segments {
		old, _ := before.Segment(s.ID)
		lost := 0
		for _, r := range old.Replicas {
			if dead[r] {
				lost++
			}
		}
		// A copy the killed leader received mid-pass (it was a backfill
		// target of its own pass) may have been recorded before it died:
		// that replica is lost too, and replacing it is one more command.
		if !old.HasReplica(meta.BrokerID(leader)) && hasCopy(c.brokers[leader-1], s.ID) {
			lost++
		}
		// Each SetSegmentReplicas bumps the version once; a segment needs at
		// most one command per lost replica. A replayed command would show
		// as an extra bump or a duplicated broker.
		changes := int(s.Version - old.Version)
		if lost > 0 && (changes < 1 || changes > lost) {
			t.Errorf("%s: lost %d replicas, %d commands applied (version %d -> %d)", s.ID, lost, changes, old.Version, s.Version)
		}
		if lost == 0 && changes != 0 {
			t.Errorf("%s: no replica lost but %d commands applied", s.ID, changes)
		}
		if err := meta.ValidateReplicas(s.Replicas); err != nil {
			t.Errorf("%s: %v", s.ID, err)
		}
	}
	c.checkCopies(snap)
	// A live broker runs the passes: a pass of one other than the killed
	// leader after the kill, read from its history, which says it leads.
	// (Not necessarily newLeader: at load, leadership can move again
	// between the election the test saw and the pass.)
	c.untilPass(feed, 30*time.Second, "a heal pass of a new leader", func(p *plugin.PassRecord) (bool, string) {
		return p.Broker != meta.BrokerID(leader), passLine(p)
	})
	if l := feed.Leaders; len(l) == 0 || l[len(l)-1] == meta.BrokerID(leader) {
		t.Fatalf("the pass histories read say brokers %v led, the last the killed leader %d", l, leader)
	}
}

// A copy latched on a broker with no spare to replace it stays in its set
// and is reported failed (no_spare_broker); once that broker restarts, the
// latch is gone and the intact copy serves again: nothing failed, nothing
// moved.
func TestRestartClearsLatch(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 3, rf: 3, heal: true})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 6, 16, 512, "l")
	before, _ := c.metadata(leader)
	target := 1
	if target == leader {
		target = 2
	}
	seg := before.Segments[0]
	// Every pass of the leader from the latch on is read from its history.
	feed := harness.NewPassFeed(time.Now())
	if err := c.b(target).Client.Latch(context.Background(), seg.ID); err != nil {
		t.Fatal(err)
	}
	if ci := c.copies(target)[string(seg.ID)]; !ci.Latched {
		t.Fatalf("copy not latched: %+v", ci)
	}
	c.untilPass(feed, 20*time.Second, "the latched copy reported no_spare_broker", func(p *plugin.PassRecord) (bool, string) {
		for _, f := range p.Report.Failed {
			if f.Segment == seg.ID && f.Reason.String() == "no_spare_broker" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s; failed %+v", passLine(p), p.Report.Failed)
	})
	snap, _ := c.metadata(leader)
	cur, _ := snap.Segment(seg.ID)
	if !cur.HasReplica(meta.BrokerID(target)) {
		t.Fatalf("latched copy dropped from its set with no spare: %v", cur.Replicas)
	}
	// Restart the broker: the latch lives in memory only.
	if err := c.term(target); err != nil {
		t.Fatalf("SIGTERM: exit %v, want a clean exit", err)
	}
	c.start(target)
	restarted := time.Now()
	c.waitRegistered(10 * time.Second)
	if ci := c.copies(target)[string(seg.ID)]; ci.Latched || !ci.Sealed || ci.Size != seg.ByteSize+40 {
		t.Fatalf("after restart: %+v, want an unlatched sealed copy of %d bytes", ci, seg.ByteSize+40)
	}
	c.untilPass(feed, 20*time.Second, "a pass with nothing failed and nothing under-replicated", func(p *plugin.PassRecord) (bool, string) {
		r := &p.Report
		return p.Started.After(restarted) && len(r.Failed) == 0 && r.UnderReplicated == 0 && r.Anomalies == 0, fmt.Sprintf("%s; failed %+v", passLine(p), r.Failed)
	})
	after, _ := c.metadata(c.waitLeader(10 * time.Second))
	for _, s := range after.Segments {
		old, _ := before.Segment(s.ID)
		// The latched copy may have been moved behind the healthy ones
		// (reads avoid it); the set itself must be the same.
		if !harness.SameSet(s.Replicas, old.Replicas) {
			t.Errorf("%s moved: %v -> %v", s.ID, old.Replicas, s.Replicas)
		}
	}
	c.checkCopies(after)
}

// The flag off: no plugin listener, no plugin goroutine doing anything, no
// healing when a broker dies.
func TestHealDisabled(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 4, rf: 3, heal: false, tick: "100ms", grace: "200ms"})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 8, 8, 256, "d")
	for _, b := range c.brokers {
		if dialable(b.rpc) || dialable(b.data) {
			t.Errorf("broker %d: a heal listener is open (rpc %s %v, data %s %v)", b.id, b.rpc, dialable(b.rpc), b.data, dialable(b.data))
		}
		var st map[string]any
		if err := c.get(b.id, "/v1/status", &st); err != nil || st["heal"] != "disabled" {
			t.Errorf("broker %d status: %v %v", b.id, st, err)
		}
		// Only the broker's own state: copies/, confirm/ and LOCK (the
		// store) and raft/ (the control plane). The plugin created nothing.
		ents, err := os.ReadDir(b.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			switch e.Name() {
			case "copies", "confirm", "LOCK", "FORMAT", "raft":
			default:
				t.Errorf("broker %d: unexpected %s in its data dir", b.id, filepath.Join(b.dir, e.Name()))
			}
		}
	}
	before, _ := c.metadata(leader)
	v := victim(c, before, leader)
	c.kill(v)
	time.Sleep(3 * time.Second) // 15 grace delays, 30 ticks
	after, err := c.metadata(c.anyAlive())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range after.Segments {
		old, _ := before.Segment(s.ID)
		if s.Version != old.Version || !meta.SameReplicas(s.Replicas, old.Replicas) {
			t.Errorf("%s changed with heal disabled: %v v%d -> %v v%d", s.ID, old.Replicas, old.Version, s.Replicas, s.Version)
		}
	}
}

// A bad configuration exits with status 2 and names the key and value:
// among them a broker without certificates that is not in insecure mode,
// insecure mode on an address other than loopback, and another broker's
// certificate.
func TestBadConfigExit2(t *testing.T) {
	l, err := pki.CreateLocal(filepath.Join(t.TempDir(), "certs"), []meta.BrokerID{1, 2}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	noCerts := t.TempDir()
	oldSecret := filepath.Join(t.TempDir(), "old.toml")
	if err := os.WriteFile(oldSecret, []byte("insecure = true\n[heal]\nsecret = \"0123456789abcdef0123\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--data_dir", t.TempDir(), "--insecure", "--heal.enabled", "--heal.tick", "0s"}, `heal.tick = "0s"`},
		{[]string{"--data_dir", noCerts}, fmt.Sprintf("certs_dir = %q", filepath.Join(noCerts, "certs"))},
		{[]string{"--data_dir", t.TempDir(), "--insecure", "--admin_listen", "10.1.2.3:7001"}, `insecure = true with admin_listen = "10.1.2.3:7001"`},
		{[]string{"--data_dir", t.TempDir(), "--insecure", "--admin_listen", "0.0.0.0:0"}, `insecure = true with admin_listen = "0.0.0.0:0"`},
		{[]string{"--data_dir", t.TempDir(), "--certs_dir", l.BrokerDir(2)}, "names broker 2, but this is broker 1"},
		{[]string{"--data_dir", t.TempDir(), "--certs_dir", l.BrokerDir(1), "--replication_factor", "zero"}, `--replication_factor = "zero"`},
		{[]string{"--data_dir", t.TempDir(), "--nonsense"}, "nonsense"},
		// heal.secret is not a key: the brokers authenticate by certificate.
		{[]string{"--config", oldSecret}, `unknown key "heal.secret"`},
	} {
		cmd := exec.Command(binary, tc.args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: exit %v, output %q; want exit 2 naming %s", tc.args, err, out, tc.want)
		}
	}
}

// The performance goal: 5 brokers, sealed segments of 1 MiB at
// replication factor 3, one broker killed; seconds_to_heal runs from the
// moment the broker counts as dead (kill + grace) to every segment back at
// its replication factor with every copy verified (settled and confirmed).
// It logs the time (the goal is under 5 s for 500 segments); it asserts
// only the outcome. 100 segments by default, MALACHI_E2E_SEGMENTS to
// change; MALACHI_E2E_DIR=/dev/shm to take the disk out of the picture.
func TestHealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 100+ MiB; skipped with -short")
	}
	segments := 100
	if s := os.Getenv("MALACHI_E2E_SEGMENTS"); s != "" {
		if _, err := fmt.Sscan(s, &segments); err != nil {
			t.Fatalf("MALACHI_E2E_SEGMENTS=%q: %v", s, err)
		}
	}
	const grace = time.Second
	c := startCluster(t, clusterOpts{n: 5, rf: 3, heal: true, tick: "200ms", grace: grace.String(),
		extra: "settle_batch = 4096\nmax_backfills = 64\nmax_backfills_per_broker = 16"})
	leader := c.waitLeader(10 * time.Second)
	loadStart := time.Now()
	c.load(leader, segments, 256, 4096, "p")
	t.Logf("loaded %d segments of 1 MiB in %v", segments, time.Since(loadStart).Round(time.Millisecond))
	loaded, err := c.metadata(leader)
	if err != nil {
		t.Fatal(err)
	}
	// verified: a pass that read index or later found every copy intact,
	// settled and confirmed.
	verified := func(p *plugin.PassRecord, index uint64) (bool, string) {
		r := &p.Report
		return r.UnderReplicated == 0 && r.Anomalies == 0 && len(r.Unsettled) == 0 && len(r.Failed) == 0 && r.Index >= index,
			fmt.Sprintf("%s; want index %d or later", passLine(p), index)
	}
	// Every pass of the leader from here on is read from its history.
	feed := harness.NewPassFeed(time.Now())
	c.untilPass(feed, 60*time.Second, "every loaded copy confirmed", func(p *plugin.PassRecord) (bool, string) {
		return verified(p, loaded.Index)
	})
	before, _ := c.metadata(leader)
	v := victim(c, before, leader)
	killed := time.Now()
	c.kill(v)
	deadAt := killed.Add(grace)
	dead := map[meta.BrokerID]bool{meta.BrokerID(v): true}
	var healed meta.Snapshot
	var healedAt time.Time
	c.eventually(120*time.Second, "the metadata healed off the killed broker", func() bool {
		lb := c.h.Leader(context.Background())
		if lb == nil {
			return false
		}
		snap, err := c.metadata(int(lb.ID))
		if full, _ := c.fullyHealed(snap, 3, dead); err != nil || !full {
			return false
		}
		healed, healedAt = snap, time.Now()
		return true
	})
	p := c.untilPass(feed, 60*time.Second, "a pass over the healed metadata that verified every copy", func(p *plugin.PassRecord) (bool, string) {
		return verified(p, healed.Index)
	})
	// Healed and verified when that pass ended; the metadata, polled, may
	// have been seen healed later than that.
	done := p.Ended
	if healedAt.After(done) {
		healedAt = done
	}
	t.Logf("seconds_to_heal=%.2f (metadata healed %.2f s after dead; grace waited %.2f s; %d segments)",
		done.Sub(deadAt).Seconds(), healedAt.Sub(deadAt).Seconds(), grace.Seconds(), segments)
	l := c.waitLeader(10 * time.Second)
	t.Logf("leader %d: %v passes taking %.2f s in all; %v commands taking %.2f s (sequential); barrier %.3f s",
		l, c.metric(l, "malachi_heal_pass_duration_seconds_count"), c.metric(l, "malachi_heal_pass_duration_seconds_sum"),
		c.metric(l, "malachi_heal_command_duration_seconds_count"), c.metric(l, "malachi_heal_command_duration_seconds_sum"),
		c.metric(l, "malachi_heal_barrier_duration_seconds_sum"))
	for _, b := range c.brokers {
		if c.alive(b.id) {
			t.Logf("broker %d received %.0f backfill bytes in %v backfills taking %.2f s in all", b.id,
				c.metric(b.id, "malachi_heal_backfill_bytes_total"), c.metric(b.id, "malachi_heal_backfill_duration_seconds_count"),
				c.metric(b.id, "malachi_heal_backfill_duration_seconds_sum"))
		}
	}
	snap, _ := c.metadata(l)
	c.checkCopies(snap)
}

// A bit flipped inside a sealed copy keeps its size, so the probe cannot
// see it; the scrubber can: the copy is reported corrupt, replaced from an
// intact replica and deleted.
func TestScrubberReplacesFlippedCopy(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 4, rf: 3, heal: true, extra: "scrub_interval = \"200ms\"\nscrub_bytes_per_second = 0"})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 6, 32, 1024, "f")
	before, _ := c.metadata(leader)
	seg := before.Segments[2]
	victim := int(seg.Replicas[0])
	if err := c.fault(victim, "flip", seg.ID, seg.ByteSize/2); err != nil {
		t.Fatal(err)
	}
	if ci := c.copies(victim)[string(seg.ID)]; ci.Size != seg.ByteSize+40 {
		t.Fatalf("the flip changed the size: %+v", ci)
	}
	c.eventually(30*time.Second, "the flipped copy replaced", func() bool {
		snap, err := c.metadata(c.anyAlive())
		if err != nil {
			return false
		}
		s, _ := snap.Segment(seg.ID)
		return s != nil && !s.HasReplica(meta.BrokerID(victim)) && len(s.Replicas) == 3
	})
	c.eventually(10*time.Second, "the corrupt copy deleted", func() bool {
		_, ok := c.copies(victim)[string(seg.ID)]
		return !ok
	})
	snap, _ := c.metadata(c.anyAlive())
	c.checkCopies(snap)
}

// The integrity pass on live brokers: a deleted copy and a truncated one
// are backfilled in place (resuming at the durable end), an extended one is
// settled back to its sealed size; no replica set changes.
func TestIntegrityPassHealsInPlace(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 3, rf: 3, heal: true})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 6, 64, 2048, "i")
	c.waitConfirmed(6)
	before, _ := c.metadata(leader)
	segs := before.Segments
	faults := []struct {
		kind string
		seg  meta.Segment
		on   int
		arg  int64
	}{
		{"delete", segs[0], int(segs[0].Replicas[0]), 0},
		{"truncate", segs[1], int(segs[1].Replicas[1]), segs[1].ByteSize / 3},
		{"extend", segs[2], int(segs[2].Replicas[2]), 5000},
	}
	start := time.Now()
	for _, f := range faults {
		if err := c.fault(f.on, f.kind, f.seg.ID, f.arg); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually(30*time.Second, "every damaged copy exact again", func() bool {
		for _, f := range faults {
			ci, ok := c.copies(f.on)[string(f.seg.ID)]
			if !ok || !ci.Sealed || ci.Size != f.seg.ByteSize+40 {
				return false
			}
		}
		return true
	})
	t.Logf("delete, truncate and extend healed in place in %v", time.Since(start).Round(time.Millisecond))
	after, _ := c.metadata(c.waitLeader(10 * time.Second))
	for _, s := range after.Segments {
		old, _ := before.Segment(s.ID)
		if s.Version != old.Version {
			t.Errorf("%s: replica set changed (%v v%d -> %v v%d); in-place repairs need no command", s.ID, old.Replicas, old.Version, s.Replicas, s.Version)
		}
	}
	c.checkCopies(after)
}

// Honest loss reporting: a segment whose every copy is gone is
// reported lost on every pass with its replicas, counted in the lost
// gauges, and an operator's acknowledgement (sent to a follower, forwarded
// to the leader) keeps it listed, marked acknowledged. The other segments
// stay healthy and nothing is deleted or re-recorded for the lost one.
func TestLostSegmentReportedAndAcknowledged(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 3, rf: 3, heal: true})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 4, 32, 1024, "l")
	c.waitConfirmed(4)
	before, _ := c.metadata(leader)
	lost := before.Segments[0]
	// Every pass of the leader from the deletes on is read from its history.
	// The copies are deleted with every broker stopped, so the loss lands
	// as one event: a pass between two deletes would rightly replace the
	// first copy from one not yet deleted, and the segment would not be
	// lost with the replicas this test expects.
	feed := harness.NewPassFeed(time.Now())
	if err := c.h.Frozen(func() error {
		for _, r := range lost.Replicas {
			if err := c.fault(int(r), "delete", lost.ID, 0); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	lostIn := func(r *heal.Report) (heal.LostSegment, bool) {
		for _, l := range r.Lost {
			if l.Segment == lost.ID {
				return l, true
			}
		}
		return heal.LostSegment{}, false
	}
	first := c.untilPass(feed, 20*time.Second, "the segment reported lost", func(p *plugin.PassRecord) (bool, string) {
		l, ok := lostIn(&p.Report)
		return ok && meta.SameReplicas(l.Replicas, lost.Replicas) && l.ByteSize == lost.ByteSize, fmt.Sprintf("%s; lost %+v", passLine(p), p.Report.Lost)
	})
	// Reported again on every later pass, not once: judged as the demo's
	// lost stage judges it (harness.PassTally), through the acknowledgement.
	tally := harness.NewPassTally([]meta.SegmentID{lost.ID}, func(r *heal.Report, _ meta.SegmentID) bool {
		_, ok := lostIn(r)
		return ok
	}, feed)
	tally.Observe(&first)
	c.untilPass(feed, 20*time.Second, "still reported lost two passes later", func(p *plugin.PassRecord) (bool, string) {
		tally.Observe(p)
		return tally.Hits[lost.ID] == 3, fmt.Sprintf("%d passes from pass %d of broker %d", tally.Observed, first.Seq, first.Broker)
	})
	ld := c.waitLeader(10 * time.Second)
	if got := c.metric(ld, "malachi_heal_lost_segments"); got != 1 {
		t.Fatalf("lost_segments gauge = %v, want 1", got)
	}
	if got := c.metric(ld, "malachi_heal_lost_bytes"); got != float64(lost.ByteSize) {
		t.Fatalf("lost_bytes gauge = %v, want %d", got, lost.ByteSize)
	}
	follower := c.anyAlive(ld)
	if err := c.post(follower, "/v1/heal/acknowledge/"+string(lost.ID), nil, nil); err != nil {
		t.Fatalf("acknowledge through follower %d: %v", follower, err)
	}
	if err := c.post(follower, "/v1/heal/acknowledge/"+string(before.Segments[1].ID), nil, nil); err == nil {
		t.Fatal("acknowledging a healthy segment was accepted")
	}
	c.untilPass(feed, 10*time.Second, "the lost segment marked acknowledged", func(p *plugin.PassRecord) (bool, string) {
		tally.Observe(p)
		l, _ := lostIn(&p.Report)
		return l.Acknowledged, fmt.Sprintf("%s; lost %+v", passLine(p), l)
	})
	if !tally.Held(3) {
		t.Fatalf("not reported lost on every pass from pass %d of broker %d on: %s", first.Seq, first.Broker, strings.Join(tally.Shortfall("lost", 3, 30*time.Second), "; "))
	}
	// The dry run asked of a follower comes from the leader's coordinator
	// and still reports the segment lost.
	var dry heal.Plan
	if err := c.get(follower, "/v1/plan", &dry); err != nil {
		t.Fatalf("dry run through follower %d: %v", follower, err)
	}
	if l, ok := lostIn(&dry.Report); !ok || !l.Acknowledged {
		t.Fatalf("dry run through follower %d: lost %+v, want %s listed acknowledged", follower, dry.Report.Lost, lost.ID)
	}
	after, _ := c.metadata(c.waitLeader(10 * time.Second))
	if s, _ := after.Segment(lost.ID); s.Version != lost.Version {
		t.Fatalf("lost segment re-recorded: %v v%d -> %v v%d", lost.Replicas, lost.Version, s.Replicas, s.Version)
	}
}
