package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/netns"
)

// The network tests run every broker in a network namespace of its own
// (testbed/netns, root only; skipped elsewhere) and cut the network
// between them with nftables or cap it with tc. Each ends with netFinal:
// no acknowledged segment lost, every copy of every replica audited
// against its segment's checksum, and no replica set changed more times
// than the losses the test caused require (Segment.Version counts the
// changes).

// netRaft are the [raft] timings of the network tests: a link shared
// with bulk transfers (capped, or queueing behind a backfill) delays
// heartbeats by hundreds of milliseconds, so e2eRaft's 300 ms would lose
// the leader on every capped transfer (seen: "lost leadership", every
// backfill of the pass cancelled). A second, as the demo's.
var netRaft = harness.DemoRaft(time.Second)

// netCluster starts n brokers on hosts of their own at RF 3 and loads
// segs segments of 32 records of 1 KiB through the leader.
func netCluster(t *testing.T, n, segs int, extra string) (*cluster, int, meta.Snapshot) {
	t.Helper()
	return netClusterOpts(t, clusterOpts{n: n, extra: extra}, segs)
}

// netClusterOpts is netCluster with o's grace and tick (o.n brokers, o.extra).
func netClusterOpts(t *testing.T, o clusterOpts, segs int) (*cluster, int, meta.Snapshot) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the network tests run real brokers")
	}
	o.rf, o.heal, o.hosts, o.raft = 3, true, true, &netRaft
	c := startCluster(t, o)
	leader := c.waitLeader(20 * time.Second)
	c.load(leader, segs, 32, 1024, "n")
	c.loaded = time.Now()
	before, err := c.metadata(leader)
	if err != nil || len(before.Segments) != segs {
		t.Fatalf("after the load: %d segments, %v", len(before.Segments), err)
	}
	return c, leader, before
}

// net is the cluster's fault injector.
func (c *cluster) net() *netns.Net { return c.h.Net() }

// undoLater registers undo to run at the end too (a failed test heals).
func (c *cluster) undoLater(undo netns.Undo, err error) netns.Undo {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { undo() })
	return undo
}

// healedOff waits until broker from's metadata shows every segment at RF
// 3 with no replica on the brokers of dead.
func (c *cluster) healedOff(from int, dead map[meta.BrokerID]bool, timeout time.Duration, what string) meta.Snapshot {
	c.t.Helper()
	var snap meta.Snapshot
	c.eventually(timeout, what, func() bool {
		s, err := c.metadata(from)
		if err != nil {
			return false
		}
		ok, _ := c.fullyHealed(s, 3, dead)
		snap = s
		return ok
	})
	return snap
}

// caughtUp waits until broker id's metadata is at least at index.
func (c *cluster) caughtUp(id int, index uint64, timeout time.Duration) {
	c.t.Helper()
	c.eventually(timeout, "broker caught up with the metadata", func() bool {
		s, err := c.metadata(id)
		return err == nil && s.Index >= index
	})
}

// netFinal waits until the cluster is healthy (every segment at RF on live
// brokers, the leader's last pass clean), then checks what every network
// test asserts: each segment of before still there and sealed, changed at
// most allowed(segment) times, and every replica's copy audited against
// the segment's checksum. It returns the final metadata.
func (c *cluster) netFinal(before meta.Snapshot, allowed func(meta.Segment) int) meta.Snapshot {
	c.t.Helper()
	dead := map[meta.BrokerID]bool{}
	for _, b := range c.brokers {
		if !c.alive(b.id) {
			dead[meta.BrokerID(b.id)] = true
		}
	}
	leader := c.waitLeader(30 * time.Second)
	snap := c.healedOff(leader, dead, 60*time.Second, "every segment at RF 3 on live brokers")
	// Every pass since the load, up to a clean one after the last change:
	// a segment a pass reported no_spare_broker had its lost replica moved
	// behind the others (Place), a version that changes no membership.
	reordered := map[meta.SegmentID]bool{}
	c.untilPass(harness.NewPassFeed(c.loaded), 30*time.Second, "a clean heal pass after the last change", func(p *plugin.PassRecord) (bool, string) {
		r := &p.Report
		for _, f := range r.Failed {
			if f.Reason == heal.NoSpareBroker {
				reordered[f.Segment] = true
			}
		}
		return r.Index >= snap.Index && r.UnderReplicated == 0 && len(r.Failed) == 0 && r.HoldReason == "",
			fmt.Sprintf("%s; want index %d or later", passLine(p), snap.Index)
	})
	snap, err := c.metadata(leader)
	if err != nil {
		c.t.Fatal(err)
	}
	audited := 0
	for _, old := range before.Segments {
		s, ok := snap.Segment(old.ID)
		if !ok || !s.Sealed || s.Checksum != old.Checksum || s.ByteSize != old.ByteSize {
			c.t.Errorf("acknowledged segment %s lost or changed: %+v (present %v), was %+v", old.ID, s, ok, old)
			continue
		}
		changes, max, why := s.Version-old.Version, allowed(old), ""
		if reordered[old.ID] {
			max, why = max+1, " and a reorder (no spare broker)"
		}
		if changes > uint64(max) {
			c.t.Errorf("segment %s: replica set changed %d times (%v -> %v), its losses%s require at most %d", old.ID, changes, old.Replicas, s.Replicas, why, max)
		}
		for _, r := range s.Replicas {
			path, err := c.b(int(r)).CopyPath(s.ID)
			if err == nil {
				err = harness.AuditCopy(path, *s)
			}
			if err != nil {
				c.t.Errorf("segment %s on broker %d: %v", s.ID, r, err)
			}
			audited++
		}
	}
	c.checkCopies(snap)
	left := 0
	for _, b := range c.brokers {
		files, _ := b.CopyFiles()
		for id := range files {
			if s, ok := snap.Segment(id); ok && !s.HasReplica(meta.BrokerID(b.id)) {
				left++
			}
		}
	}
	c.t.Logf("final: %d segments, %d copies audited against their checksums; %d copies left outside their replica sets", len(snap.Segments), audited, left)
	return snap
}

// holds is allowed for a segment that held one of ids when before was read.
func holds(ids ...int) func(meta.Segment) int {
	return func(s meta.Segment) int {
		n := 0
		for _, id := range ids {
			if s.HasReplica(meta.BrokerID(id)) {
				n++
			}
		}
		return n
	}
}

// TestNetIsolateFollower cuts a follower off from every other broker: its
// replicas are healed elsewhere after the grace delay; when it returns it
// catches up and nothing is lost or moved again.
func TestNetIsolateFollower(t *testing.T) {
	t.Parallel() // own namespaces and subnet: independent of every other test
	c, leader, before := netCluster(t, 4, 16, "")
	f := victim(c, before, leader)
	undo := c.undoLater(c.net().Isolate(f))
	c.healedOff(leader, map[meta.BrokerID]bool{meta.BrokerID(f): true}, 60*time.Second, "segments healed off the isolated follower")
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	after := c.netFinal(before, holds(f))
	c.caughtUp(f, after.Index, 30*time.Second)
}

// TestNetIsolateLeader cuts the leader off: the minority side (the old
// leader alone) stops coordinating — its plugin steps down and records no
// replica set — while the majority elects a leader and heals.
func TestNetIsolateLeader(t *testing.T) {
	t.Parallel() // own namespaces and subnet: independent of every other test
	c, old, before := netCluster(t, 4, 16, "")
	healedBefore := c.metric(old, "malachi_heal_segments_healed_total")
	undo := c.undoLater(c.net().Isolate(old))
	var next int
	c.eventually(30*time.Second, "the majority elects another leader", func() bool {
		for _, b := range c.brokers {
			if b.id == old {
				continue
			}
			var h health
			if c.get(b.id, "/v1/health", &h) == nil && h.IsLeader {
				next = b.id
				return true
			}
		}
		return false
	})
	c.eventually(30*time.Second, "the isolated old leader's plugin stops coordinating", func() bool {
		return c.metric(old, "malachi_heal_leader") == 0
	})
	c.healedOff(next, map[meta.BrokerID]bool{meta.BrokerID(old): true}, 60*time.Second, "the majority heals the old leader's replicas")
	if got := c.metric(old, "malachi_heal_segments_healed_total"); got != healedBefore {
		t.Errorf("the isolated old leader recorded %v replica sets while cut off (was %v)", got, healedBefore)
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	after := c.netFinal(before, holds(old))
	c.caughtUp(old, after.Index, 30*time.Second)
	if got := c.metric(old, "malachi_heal_segments_healed_total"); got != healedBefore {
		t.Errorf("the old leader recorded %v replica sets after it returned (was %v)", got, healedBefore)
	}
}

// TestNetSplit32 splits five brokers 3|2 (the leader on the three): two
// of five missing at once is a mass failure (hold_share 0.25), so the
// brake holds, says why, and no replica set changes; after the split
// heals everything is as it was.
func TestNetSplit32(t *testing.T) {
	t.Parallel() // own namespaces and subnet: independent of every other test
	c, leader, before := netCluster(t, 5, 16, "")
	var major, minor []int
	for _, b := range c.brokers {
		if b.id == leader || len(major) < 2 {
			major = append(major, b.id)
		} else {
			minor = append(minor, b.id)
		}
	}
	if len(major) != 3 {
		major, minor = append(major, minor[0]), minor[1:]
	}
	// Every pass of the leader from the split on is read from its history:
	// up to the first that holds, then three more, each of which must hold.
	feed := c.leaderFeed()
	undo := c.undoLater(c.net().Partition(major, minor))
	first := c.untilPass(feed, 30*time.Second, "the brake holds on the majority's leader", func(p *plugin.PassRecord) (bool, string) {
		return p.Report.HoldReason != "", passLine(p)
	})
	reason := first.Report.HoldReason
	if !strings.Contains(reason, "brokers_missing: 2 of 5") {
		t.Errorf("hold reason %q: want brokers_missing: 2 of 5", reason)
	}
	more := 0
	c.untilPass(feed, 30*time.Second, "three more held passes", func(p *plugin.PassRecord) (bool, string) {
		if p.Report.HoldReason == "" {
			t.Fatalf("pass %d of broker %d: the hold lifted on its own with the brokers still split %v | %v: %+v", p.Seq, p.Broker, major, minor, p.Report)
		}
		more++
		return more == 3, fmt.Sprintf("%d held passes after pass %d of broker %d", more, first.Seq, first.Broker)
	})
	held, err := c.metadata(leader)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range held.Segments {
		if old, _ := before.Segment(s.ID); s.Version != old.Version {
			t.Errorf("segment %s changed during the hold: %v -> %v", s.ID, old.Replicas, s.Replicas)
		}
	}
	t.Logf("split %v | %v: held with %q", major, minor, reason)
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	c.netFinal(before, holds())
}

// TestNetOneWay loses, in turn, everything one follower sends and then
// everything another receives: each looks dead to the leader, is healed
// around, and comes back without loss.
func TestNetOneWay(t *testing.T) {
	t.Parallel() // own namespaces and subnet: independent of every other test
	c, leader, before := netCluster(t, 4, 16, "")
	out := victim(c, before, leader)
	undo := c.undoLater(c.net().DropOutbound(out, nil))
	c.healedOff(leader, map[meta.BrokerID]bool{meta.BrokerID(out): true}, 60*time.Second, "healed off the follower whose packets are lost")
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	mid := c.netFinal(before, holds(out))
	in := 0
	for _, b := range c.brokers {
		if b.id != leader && b.id != out && (in == 0 || countOn(mid, b.id) > countOn(mid, in)) {
			in = b.id
		}
	}
	undo = c.undoLater(c.net().DropInbound(in, nil))
	c.healedOff(c.waitLeader(10*time.Second), map[meta.BrokerID]bool{meta.BrokerID(in): true}, 60*time.Second, "healed off the follower that receives nothing")
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	c.netFinal(before, func(s meta.Segment) int {
		m, _ := mid.Segment(s.ID)
		return holds(out)(s) + holds(in)(*m)
	})
}

// countOn is the number of segments with a replica on broker id.
func countOn(snap meta.Snapshot, id int) int {
	n := 0
	for _, s := range snap.Segments {
		if s.HasReplica(meta.BrokerID(id)) {
			n++
		}
	}
	return n
}

// sumMetric adds metric name over every live broker.
func (c *cluster) sumMetric(name string) float64 {
	var sum float64
	for _, b := range c.brokers {
		if c.alive(b.id) {
			sum += max(c.metric(b.id, name), 0)
		}
	}
	return sum
}

// TestNetCappedLink kills a follower with every survivor's link capped at
// 256 KiB/s: healing goes on, throttled by the network, and no backfill
// fails (no storm of timeouts).
func TestNetCappedLink(t *testing.T) {
	t.Parallel() // own namespaces and subnet: independent of every other test
	c, leader, before := netCluster(t, 4, 24, "")
	v := victim(c, before, leader)
	errorsBefore := c.sumMetric("malachi_heal_backfill_errors_total")
	for _, b := range c.brokers {
		if b.id != v {
			c.undoLater(c.net().Cap(b.id, 256<<10))
		}
	}
	c.kill(v)
	start := time.Now()
	c.healedOff(leader, map[meta.BrokerID]bool{meta.BrokerID(v): true}, 90*time.Second, "healed over capped links")
	took := time.Since(start)
	bytes := c.sumMetric("malachi_heal_backfill_bytes_total")
	if errs := c.sumMetric("malachi_heal_backfill_errors_total") - errorsBefore; errs > 0 {
		t.Errorf("%v backfills failed over the capped links", errs)
	}
	t.Logf("healed %d segments (%.0f KiB by backfill) in %v over links capped at 256 KiB/s", countOn(before, v), bytes/1024, took.Round(time.Millisecond))
	if err := c.net().HealAll(); err != nil {
		t.Fatal(err)
	}
	c.netFinal(before, holds(v))
}

// TestNetPartitionCutsBackfill kills a follower of four brokers, so that
// each of its segments is backfilled to the one spare broker with the
// catch-up throttled (the transfers last seconds), and isolates the spare
// while the metrics show bytes moving to it: the test FAILS when the
// transfer was not in flight at the cut. The brake holds (two of four
// missing); once the spare returns everything heals from the stall.
func TestNetPartitionCutsBackfill(t *testing.T) {
	t.Parallel() // own namespaces and subnet: independent of every other test
	c, leader, before := netCluster(t, 4, 12, "backfill_bytes_per_second = 65536\n")
	v := victim(c, before, leader)
	spare := 0
	var segs []meta.Segment
	for _, s := range before.Segments {
		if s.HasReplica(meta.BrokerID(v)) {
			segs = append(segs, s)
		}
	}
	for _, b := range c.brokers {
		if !segs[0].HasReplica(meta.BrokerID(b.id)) {
			spare = b.id
		}
	}
	c.kill(v)
	seg := c.strikeBackfill(spare, segs) // bytes moving to the spare
	undo := c.undoLater(c.net().Isolate(spare))
	p, _ := c.b(spare).CopyPath(seg.ID)
	fi, err := os.Stat(p)
	if err != nil || fi.Size() >= seg.ByteSize+40 {
		t.Fatalf("the cut missed the transfer: %s on broker %d was %v after the cut (%v), sealed size %d", seg.ID, spare, fi, err, seg.ByteSize+40)
	}
	t.Logf("cut broker %d off with %s at %d of %d bytes", spare, seg.ID, fi.Size(), seg.ByteSize+40)
	// Hold the cut three seconds (three grace delays: the spare counts as
	// missing; the pass that started the transfer waits on it), then heal.
	time.Sleep(3 * time.Second)
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	c.netFinal(before, holds(v))
}

// flapFor is how long TestNetFlap's link flaps.
const flapFor = 30 * time.Second

// flapped is what the leader said while a link flapped.
type flapped struct {
	passes  int     // heal passes of the leader's that ended while the link flapped, every one
	suspect int     // of which listed the flapping broker suspect
	dead    int     // of which listed it dead
	silent  float64 // the longest silence of the flapping broker the leader's raft reported, seconds
}

// flapStatus is the part of /v1/status flap reads.
type flapStatus struct {
	Leader  bool `json:"leader"`
	Members []struct {
		ID     meta.BrokerID `json:"id"`
		Silent float64       `json:"silent_seconds"`
	} `json:"members"`
}

// flap flaps broker f's link for flapFor (FlapPlan(f, flapFor, seed)),
// polling the leader's status meanwhile for raft silences and reading
// from the leader's history every heal pass that ends while it flaps (up
// to the first that ends after). The flap lasts until it has made every
// planned change (bounded by twice flapFor and 10 s), not a fixed time:
// nft changes on a loaded machine fall behind the plan's offsets. It fails the test if the flap met an error,
// made fewer changes than planned, or the leader never heard f silent for
// half the longest planned down phase (the cuts did not reach the
// brokers).
func (c *cluster) flap(f int, seed uint64) flapped {
	c.t.Helper()
	plan := netns.FlapPlan(f, flapFor, seed)
	var longest time.Duration
	for k := 1; k < len(plan); k++ {
		if plan[k-1].Down {
			longest = max(longest, plan[k].At-plan[k-1].At)
		}
	}
	var out flapped
	var end time.Time
	judge := func(p *plugin.PassRecord) {
		if p.Ended.After(end) {
			return
		}
		out.passes++
		if slices.Contains(p.Report.Suspect, meta.BrokerID(f)) {
			out.suspect++
		}
		if slices.Contains(p.Report.Dead, meta.BrokerID(f)) {
			out.dead++
		}
	}
	feed := c.leaderFeed()
	undo, events, err := c.net().Flap(f, flapFor, seed)
	c.undoLater(undo, err)
	lead := 0
	// Every pass counts while the link flaps, which lasts at least
	// flapFor and until the flap has made every planned change: on a
	// loaded machine each nft change takes up to a second or more, and
	// the plan falls behind its offsets.
	end = time.Now().Add(time.Hour)
	planned := time.Now().Add(flapFor + time.Second)
	giveUp := time.Now().Add(2*flapFor + 10*time.Second)
	flapping := func() bool {
		now := time.Now()
		return now.Before(planned) || (len(events()) < len(plan) && now.Before(giveUp))
	}
	for ; flapping(); time.Sleep(20 * time.Millisecond) {
		for _, p := range c.readPasses(feed) {
			judge(&p)
		}
		if lead == 0 {
			for _, b := range c.brokers {
				var h health
				if b.id != f && c.alive(b.id) && c.get(b.id, "/v1/health", &h) == nil && h.IsLeader {
					lead = b.id
				}
			}
			if lead == 0 {
				continue
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var st flapStatus
		err := c.b(lead).Client.Call(ctx, http.MethodGet, "/v1/status", nil, &st)
		cancel()
		if err != nil || !st.Leader {
			lead = 0
			continue
		}
		for _, m := range st.Members {
			if m.ID == meta.BrokerID(f) {
				out.silent = max(out.silent, m.Silent)
			}
		}
	}
	end = time.Now()
	c.untilPass(feed, 30*time.Second, "a heal pass that ended after the flap", func(p *plugin.PassRecord) (bool, string) {
		judge(p)
		return p.Ended.After(end), passLine(p)
	})
	if err := undo(); err != nil {
		c.t.Errorf("the flap of broker %d: %v", f, err)
	}
	done := events()
	if len(done) < len(plan) {
		c.t.Fatalf("the link of broker %d changed %d times, %d planned (FlapPlan seed %d): %v", f, len(done), len(plan), seed, done)
	}
	c.t.Logf("broker %d's link changed %d times in %v (planned %d, longest cut %v); the leader heard it silent for up to %.2f s; %d heal passes ended while it flapped, %d listing it suspect, %d dead (%s)",
		f, len(done), flapFor, len(plan), longest, out.silent, out.passes, out.suspect, out.dead, feed.Summary())
	if out.silent < longest.Seconds()/2 {
		c.t.Errorf("the leader heard broker %d silent for at most %.2f s, the longest cut lasted %v: the flap did not cut it off", f, out.silent, longest)
	}
	return out
}

// TestNetFlap flaps a follower's link (cut off from every other broker
// and restored, every 0.5–2 s, for 30 s). What the heal may do depends on
// the grace delay:
//
//   - grace 10 s, longer than any phase: the broker is never away past
//     the grace delay, so it is never listed dead and no replica set
//     changes at all;
//   - grace 1 s, shorter than most down phases: it may be listed dead and
//     replaced, but each segment it held changes at most once (its
//     replacement; a return during the backfill cancels it, changing
//     nothing) and no other segment changes.
//
// Both end with every segment at RF 3 and every copy audited.
func TestNetFlap(t *testing.T) {
	t.Parallel() // own namespaces and subnet: independent of every other test
	for _, tc := range []struct {
		name, grace string
		seed        uint64
	}{{"within-grace", "10s", 5}, {"past-grace", "1s", 6}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, leader, before := netClusterOpts(t, clusterOpts{n: 4, grace: tc.grace}, 16)
			f := victim(c, before, leader)
			got := c.flap(f, tc.seed)
			if got.passes == 0 {
				t.Fatal("no heal pass read while the link flapped")
			}
			if tc.name == "within-grace" {
				if got.dead > 0 {
					t.Errorf("%d passes listed broker %d dead: it was never away past the 10 s grace delay", got.dead, f)
				}
				c.netFinal(before, holds())
				return
			}
			c.netFinal(before, holds(f))
		})
	}
}
