package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/harness"
)

// leftoverCluster is the e2e fixture of the leftover test: a cluster, its
// CLI and the polls the test makes.
type leftoverCluster struct {
	t    *testing.T
	c    *harness.Cluster
	ctx  context.Context
	feed *harness.PassFeed
}

// until polls cond every 200 ms until it holds, failing the test with
// what after limit (a bound on a hang, not an assertion of speed).
func (lc *leftoverCluster) until(limit time.Duration, what string, cond func() bool) {
	lc.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if err := lc.c.UnexpectedExit(); err != nil {
			lc.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			lc.t.Fatalf("still not %s after %v", what, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// meta is the metadata as the leader serves it (zero on an error).
func (lc *leftoverCluster) meta() meta.Snapshot {
	id, err := lc.c.AgreedLeader(lc.ctx, false)
	if err != nil {
		return meta.Snapshot{}
	}
	s, _ := lc.c.Broker(id).Client.Metadata(lc.ctx)
	return s
}

// passes reads the leader's heal passes not read yet from its pass
// history (lc.feed), failing the test when the history dropped or skipped
// one: every pass is judged. A history that does not answer is read on
// the next call.
func (lc *leftoverCluster) passes() []plugin.PassRecord {
	lc.t.Helper()
	recs, _ := lc.feed.Next(lc.ctx, lc.c)
	if p := lc.feed.Problem(); p != "" {
		lc.t.Fatal(p)
	}
	return recs
}

// group is r's group of broker b's leftovers of cause.
func group(r *heal.Report, b meta.BrokerID, cause heal.Cause) (heal.LeftoverGroup, bool) {
	for _, g := range r.Leftovers {
		if g.Broker == b && g.Cause == cause {
			return g, true
		}
	}
	return heal.LeftoverGroup{}, false
}

// A broker killed past its grace delay comes back holding copies of
// segments whose replicas were replaced: they are reported as
// returned_broker leftovers (not as its replicas), one cut short as
// partial_backfill, a copy of a segment the metadata never knew as
// failed_load, and all are deleted after the leftover delay, only once
// each segment is back at its factor. A copy
// whose delete fails (chattr +i: EPERM) is reported failed_delete with the
// errno text on every pass, and deleted once the attribute is removed.
func TestLeftoverCopiesCollected(t *testing.T) {
	malachid := binaries(t)
	c, err := harness.New(harness.Config{Bin: malachid, Root: t.TempDir(), Brokers: 4, RF: 3, Tick: 200 * time.Millisecond, Grace: time.Second,
		Raft: harness.DemoRaft(time.Second), HealExtra: "leftover_delay = \"3s\"\nrebalance = false"}) // the returned broker's replica count is asserted
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	lc := &leftoverCluster{t: t, c: c, ctx: context.Background()}
	if _, err := c.WaitReady(lc.ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRegistered(lc.ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	admin0 := c.Brokers()[0].Admin
	cli := func(cmd string, args ...string) []string {
		return append(append([]string{cmd}, c.CLIFlags()...), args...)
	}
	var out, errb strings.Builder
	if code := run(cli("load", "--admin", admin0, "--segments", "8", "--records", "8", "--size", "1KiB", "--prefix", "lo"), &out, &errb); code != 0 {
		t.Fatalf("load: exit %d: %s", code, errb.String())
	}
	leader, err := c.AgreedLeader(lc.ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	var victim *harness.Broker
	for _, b := range c.Brokers() {
		if b.ID != leader {
			victim = b
		}
	}
	var held []meta.SegmentID
	for _, s := range lc.meta().Segments {
		if slices.Contains(s.Replicas, victim.ID) {
			held = append(held, s.ID)
		}
	}
	if len(held) < 3 {
		t.Fatalf("broker %d holds %d of 8 segments, want at least 3", victim.ID, len(held))
	}
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	healed := func(s meta.Snapshot) bool {
		for _, seg := range s.Segments {
			if len(seg.Replicas) != 3 || slices.Contains(seg.Replicas, victim.ID) {
				return false
			}
		}
		return len(s.Segments) == 8
	}
	lc.until(2*time.Minute, "healed without the killed broker", func() bool { return healed(lc.meta()) })

	// One copy cannot be deleted while it is immutable.
	stuck := held[0]
	stuckPath, err := victim.CopyPath(stuck)
	if err != nil {
		t.Fatal(err)
	}
	immutable := exec.Command("chattr", "+i", stuckPath).Run() == nil
	if immutable {
		defer exec.Command("chattr", "-i", stuckPath).Run()
	} else {
		t.Logf("chattr +i %s failed (not root, or a file system without the attribute): the failed-delete stage is skipped", stuckPath)
	}
	// One copy is cut short, as a stalled backfill leaves it; one file is
	// a copy of a segment the metadata never recorded, as a failed load
	// leaves it.
	partial := held[1]
	partialPath, err := victim.CopyPath(partial)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := harness.TruncateCopyAt(partialPath, 100); err != nil {
		t.Fatal(err)
	}
	const leftover = meta.SegmentID("lo-leftover-00001")
	if err := os.WriteFile(store.CopyPath(victim.Dir, leftover), make([]byte, 300), 0o644); err != nil {
		t.Fatal(err)
	}
	lc.feed = harness.NewPassFeed(time.Now())
	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	held = append(held, leftover)
	sawReturned := false
	gone := func(id meta.SegmentID) bool {
		p, err := victim.CopyPath(id)
		if err != nil {
			return true
		}
		_, err = os.Stat(p)
		return os.IsNotExist(err)
	}
	// Every pass from the restart on is read: the files are looked at
	// first, so a pass that reported them before they went is read by then.
	lc.until(2*time.Minute, "collected the returned broker's copies", func() bool {
		snap := lc.meta()
		n := 0
		for _, id := range held {
			if !gone(id) {
				continue
			}
			n++
			// Sampled on every poll: a copy is gone only for a segment at
			// its factor without the victim.
			if seg, ok := snap.Segment(id); ok && (len(seg.Replicas) < 3 || slices.Contains(seg.Replicas, victim.ID)) {
				t.Fatalf("%s deleted from broker %d while its set is %v", id, victim.ID, seg.Replicas)
			}
		}
		for _, p := range lc.passes() {
			g, found := group(&p.Report, victim.ID, heal.ReturnedBroker)
			gp, foundP := group(&p.Report, victim.ID, heal.PartialBackfill)
			gl, foundL := group(&p.Report, victim.ID, heal.FailedLoad)
			if found && foundP && foundL && g.Copies == len(held)-2 && gp.Copies == 1 && gp.Segments[0] == partial &&
				gl.Copies == 1 && gl.Segments[0] == leftover {
				sawReturned = true
			}
		}
		if !sawReturned && n > 0 {
			t.Fatalf("%d copies deleted before a pass reported all %d by cause (%s)", n, len(held), lc.feed.Summary())
		}
		want := len(held)
		if immutable {
			want--
		}
		return n == want
	})
	if !immutable {
		return
	}
	lc.until(time.Minute, "reported failed_delete with its errno text", func() bool {
		for _, p := range lc.passes() {
			if g, found := group(&p.Report, victim.ID, heal.FailedDelete); found && g.Copies == 1 && strings.Contains(g.Err, "operation not permitted") {
				return true
			}
		}
		return false
	})
	out.Reset()
	if code := run(cli("status", "--admin", admin0), &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"failed_delete: 1 copies", "operation not permitted", string(stuck)} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(cli("status", "--admin", admin0, "--json"), &out, &errb); code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, errb.String())
	}
	var st clusterStatus
	if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
		t.Fatal(err)
	}
	for _, b := range st.Brokers {
		if b.ID == victim.ID && b.Copies != 0 {
			t.Errorf("broker %d: COPIES %d counts its leftover as a replica", b.ID, b.Copies)
		}
	}
	if err := exec.Command("chattr", "-i", stuckPath).Run(); err != nil {
		t.Fatal(err)
	}
	lc.until(time.Minute, "collected the copy once deletable", func() bool {
		collected := false
		for _, p := range lc.passes() {
			collected = p.Report.LeftoverCopies == 0
		}
		return collected && gone(stuck)
	})
}
