package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
)

// followers returns up to n running brokers other than the leader.
func (c *cluster) followers(leader, n int) []int {
	var out []int
	for _, b := range c.brokers {
		if b.id != leader && c.alive(b.id) && len(out) < n {
			out = append(out, b.id)
		}
	}
	return out
}

// backfillBytes sums the backfill bytes received by the given brokers.
func (c *cluster) backfillBytes(ids ...int) float64 {
	var sum float64
	for _, id := range ids {
		sum += c.metric(id, "malachi_heal_backfill_bytes_total")
	}
	return sum
}

// waitConfirmed waits for a pass of the leader's, read from its pass
// history from the call on, that saw n sealed segments with every copy
// intact and confirmed. (A pass from before the load also shows no
// anomaly: the count of sealed segments tells them apart.)
func (c *cluster) waitConfirmed(n int) {
	c.t.Helper()
	// A generous bound: the wait ends on the pass that finds it. In a
	// fresh-clone run at load 17 the leadership moved 4 → 2 → 4 right after
	// the load, the new leader re-replicated 8 segments at the test's
	// throttled rate, and 30 s held only 3 passes.
	c.untilPass(harness.NewPassFeed(time.Now()), 2*time.Minute, "every loaded copy confirmed", func(p *plugin.PassRecord) (bool, string) {
		r := &p.Report
		return r.Sealed == n && r.Anomalies == 0 && len(r.Unsettled) == 0, passLine(p)
	})
}

// The mass-failure brake with real processes: two of five
// brokers (more than the default quarter) killed within one grace delay.
// The leader holds: no backfill starts and no replica set changes over
// several passes, and every pass says why. An operator's release through a
// follower lifts it and the cluster heals onto the three survivors.
func TestMassFailureBrakeHoldsThenReleases(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 5, rf: 3, heal: true})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 20, 16, 1024, "m")
	c.waitConfirmed(20)
	before, _ := c.metadata(leader)
	victims := c.followers(leader, 2)
	killed := time.Now()
	for _, v := range victims {
		c.kill(v)
	}
	var live []int
	for _, b := range c.brokers {
		if c.alive(b.id) {
			live = append(live, b.id)
		}
	}
	bytes0 := c.backfillBytes(live...)
	// Every pass of the leader from the kills on is read from its history:
	// up to the first that holds, then each one after it must hold.
	feed := harness.NewPassFeed(killed)
	first := c.untilPass(feed, 20*time.Second, "the hold reported", func(p *plugin.PassRecord) (bool, string) {
		return p.Report.HoldReason != "", passLine(p)
	})
	holds := func(p *plugin.PassRecord) {
		if p.Report.HoldReason == "" {
			t.Fatalf("pass %d of broker %d: the hold lifted on its own with both brokers still dead: %+v", p.Seq, p.Broker, p.Report)
		}
	}
	// Three more passes, all held, nothing copied, nothing recorded.
	more := 0
	c.untilPass(feed, 20*time.Second, "three more held passes", func(p *plugin.PassRecord) (bool, string) {
		holds(p)
		more++
		return more == 3, fmt.Sprintf("%d held passes after pass %d of broker %d", more, first.Seq, first.Broker)
	})
	if got := c.backfillBytes(live...); got != bytes0 {
		t.Fatalf("backfill bytes went from %v to %v under the hold", bytes0, got)
	}
	during, _ := c.metadata(c.waitLeader(10 * time.Second))
	for _, s := range during.Segments {
		if old, _ := before.Segment(s.ID); s.Version != old.Version {
			t.Fatalf("%s changed under the hold: %v v%d -> %v v%d", s.ID, old.Replicas, old.Version, s.Replicas, s.Version)
		}
	}
	// And every pass up to the release: through the first that ends after
	// the checks above.
	checked := time.Now()
	last := c.untilPass(feed, 20*time.Second, "the passes up to the release held", func(p *plugin.PassRecord) (bool, string) {
		holds(p)
		return p.Ended.After(checked), passLine(p)
	})
	t.Logf("held: %q (%s)", last.Report.HoldReason, feed.Summary())

	follower := c.followers(c.waitLeader(10*time.Second), 1)[0]
	if err := c.post(follower, "/v1/heal/release", nil, nil); err != nil {
		t.Fatalf("release through follower %d: %v", follower, err)
	}
	dead := map[meta.BrokerID]bool{}
	for _, v := range victims {
		dead[meta.BrokerID(v)] = true
	}
	c.eventually(60*time.Second, "healed onto the survivors after the release", func() bool {
		lb := c.h.Leader(context.Background())
		if lb == nil {
			return false
		}
		snap, err := c.metadata(int(lb.ID))
		if err != nil {
			return false
		}
		ok, _ := c.fullyHealed(snap, 3, dead)
		return ok
	})
	after, _ := c.metadata(c.waitLeader(10 * time.Second))
	c.checkCopies(after)
	if got := c.backfillBytes(live...); got <= bytes0 {
		t.Fatalf("no backfill after the release (bytes %v)", got)
	}
}

// throttledCluster starts 4 brokers at RF 3 whose catch-up is capped at
// 256 KiB/s a broker, loads 12 sealed segments of 512 KiB, waits until
// every copy is confirmed, and returns the cluster, its leader and the
// metadata then: a heal of one broker's replicas lasts seconds.
func throttledCluster(t *testing.T) (*cluster, int, meta.Snapshot) {
	return throttledClusterAt(t, 262144)
}

// throttledClusterAt is throttledCluster with catch-up capped at rate
// bytes a second a broker.
func throttledClusterAt(t *testing.T, rate int) (*cluster, int, meta.Snapshot) {
	c := startCluster(t, clusterOpts{n: 4, rf: 3, heal: true,
		extra: fmt.Sprintf("backfill_bytes_per_second = %d\nmax_backfills = 64\nmax_backfills_per_broker = 16\n", rate)})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 12, 128, 4096, "r") // 12 × 512 KiB
	c.waitConfirmed(12)
	before, _ := c.metadata(leader)
	return c, leader, before
}

// A returning broker with real processes: a broker paused
// (SIGSTOP) past the grace delay counts as dead and its segments start
// backfilling, slowly (a per-broker rate cap); it resumes (SIGCONT) before
// they finish. The backfills replacing it are cancelled, its intact copies
// count again, no replica set changes, and the bytes saved are reported.
func TestReturningBrokerCancelsBackfills(t *testing.T) {
	c, leader, before := throttledCluster(t)
	v := c.followers(leader, 1)[0]
	var held int
	for _, s := range before.Segments {
		if s.HasReplica(meta.BrokerID(v)) {
			held++
		}
	}
	var live []int
	for _, b := range c.brokers {
		if b.id != v {
			live = append(live, b.id)
		}
	}
	bytes0 := c.backfillBytes(live...)
	paused := c.b(v)
	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			paused.Resume()
		}
	}()
	// Past the grace delay (1s) it counts as dead and the pass replacing
	// it starts; its backfills (9 × 512 KiB at 256 KiB/s per broker) take
	// about ten seconds: it resumes once bytes are seen moving to a new
	// replica. (A finished pass's report only appears when its backfills
	// are done, so the test cannot wait for "dead" in a report: that would
	// be too late.)
	var segs []meta.Segment
	for _, s := range before.Segments {
		if s.HasReplica(meta.BrokerID(v)) {
			segs = append(segs, s)
		}
	}
	seg, to := c.strikeBackfillAny(live, segs)
	t.Logf("resuming broker %d with %s moving to broker %d", v, seg.ID, to)
	if !c.alive(v) {
		t.Fatal("the paused broker exited")
	}
	if err := paused.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	resumedAt := time.Now()
	// Healthy in a pass that started after the return, read from the
	// leader's history (a pass that started before may list the broker
	// dead or suspect).
	c.untilPass(harness.NewPassFeed(resumedAt), 60*time.Second, "the cluster healthy again with the broker back", func(p *plugin.PassRecord) (bool, string) {
		r := &p.Report
		return p.Started.After(resumedAt) && r.Sealed == 12 && r.Anomalies == 0 && len(r.Dead) == 0 && len(r.Suspect) == 0 && r.UnderReplicated == 0,
			fmt.Sprintf("%s; dead %v, suspect %v", passLine(p), r.Dead, r.Suspect)
	})
	ld := c.waitLeader(10 * time.Second)
	returned := c.metric(ld, "malachi_heal_returned_segments_total")
	saved := c.metric(ld, "malachi_heal_returned_bytes_saved_total")
	if returned != float64(held) || saved <= 0 {
		t.Errorf("leader %d counted %v returned segments and %v bytes saved; want the %d the broker held, and > 0 bytes", ld, returned, saved, held)
	}
	if got := c.backfillBytes(live...); got != bytes0 {
		t.Errorf("backfills committed %v bytes; the returning broker's should all have been cancelled", got-bytes0)
	}
	after, _ := c.metadata(c.waitLeader(10 * time.Second))
	for _, s := range after.Segments {
		old, _ := before.Segment(s.ID)
		if !meta.SameReplicas(s.Replicas, old.Replicas) || s.Version != old.Version {
			t.Errorf("%s churned: %v v%d -> %v v%d", s.ID, old.Replicas, old.Version, s.Replicas, s.Version)
		}
	}
	c.checkCopies(after)
	t.Logf("broker %d held %d segments; %v backfills cancelled on its return, %v bytes saved", v, held, returned, saved)
}
