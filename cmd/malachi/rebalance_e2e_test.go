package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
)

// rebalanceCluster starts 5 real brokers at RF 3 with heal extra config
// extra, stops one (the newcomer) before 24 segments are loaded onto the
// other four, and restarts it empty. It returns the cluster, the leader's
// admin address, the newcomer and a function reading the metadata's
// per-broker replica counts and bytes (checking every segment is
// sealed at 3 replicas) and the leader's last pass.
func rebalanceCluster(t *testing.T, extra string) (*harness.Cluster, meta.BrokerID, func() (map[meta.BrokerID]int, map[meta.BrokerID]int64, *heal.Report, uint64)) {
	t.Helper()
	malachid := binaries(t)
	c, err := harness.New(harness.Config{Bin: malachid, Root: t.TempDir(), Brokers: 5, RF: 3, Tick: 200 * time.Millisecond,
		Grace: 2 * time.Second, Raft: harness.DemoRaft(time.Second), HealExtra: extra})
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
	var newcomer meta.BrokerID
	for _, b := range c.Brokers() {
		if b.ID != leader {
			newcomer = b.ID
		}
	}
	if err := c.Kill(c.Broker(newcomer)); err != nil {
		t.Fatal(err)
	}
	addr := c.Broker(leader).Admin
	cli := func(cmd string, args ...string) (string, string, int) {
		var out, errb strings.Builder
		code := run(append(append([]string{cmd}, c.CLIFlags()...), args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	client := admin.New(addr, c.RPC(), c.Config().Insecure)
	// Placement leaves out a broker unheard for a few heartbeats: wait
	// until three probe segments in a row (three round-robin starts over
	// five live brokers would name every one) all leave the newcomer out.
	probe := 0
	waitFor(t, 90*time.Second, func() (bool, string) {
		time.Sleep(time.Second)
		probe++
		prefix := fmt.Sprintf("probe%d-", probe)
		if out, errs, code := cli("load", "--admin", addr, "--segments", "3", "--records", "1", "--size", "1KiB", "--prefix", prefix); code != 0 {
			return false, fmt.Sprintf("load: exit %d: %s%s", code, out, errs)
		}
		snap, err := client.Metadata(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, s := range snap.Segments {
			if strings.HasPrefix(string(s.ID), prefix) && s.HasReplica(newcomer) {
				return false, fmt.Sprintf("%s placed on %v", s.ID, s.Replicas)
			}
		}
		return true, ""
	})
	if out, errs, code := cli("load", "--admin", addr, "--segments", "24", "--records", "4", "--size", "1KiB", "--prefix", "rb"); code != 0 {
		t.Fatalf("load: exit %d: %s%s", code, out, errs)
	}
	read := func() (map[meta.BrokerID]int, map[meta.BrokerID]int64, *heal.Report, uint64) {
		t.Helper()
		snap, err := client.Metadata(ctx)
		// The asked broker may have lost the leadership during a load and
		// apply its seals a moment later: read again while one is unsealed.
		for try := 0; err == nil && try < 50 && slices.ContainsFunc(snap.Segments, func(s meta.Segment) bool { return !s.Sealed }); try++ {
			time.Sleep(200 * time.Millisecond)
			snap, err = client.Metadata(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		cnt, byt := map[meta.BrokerID]int{}, map[meta.BrokerID]int64{}
		for _, b := range c.Brokers() {
			cnt[b.ID], byt[b.ID] = 0, 0
		}
		for _, s := range snap.Segments {
			if !s.Sealed || len(s.Replicas) != 3 {
				t.Fatalf("segment %s: sealed %v replicas %v: want sealed at 3", s.ID, s.Sealed, s.Replicas)
			}
			for _, r := range s.Replicas {
				cnt[r]++
				byt[r] += s.ByteSize
			}
		}
		out, errs, code := cli("status", "--admin", addr, "--json")
		if code != 0 {
			t.Fatalf("status: exit %d: %s", code, errs)
		}
		var st clusterStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v: %s", err, out)
		}
		ps, _ := admin.DecodeStatus(st.Heal)
		return cnt, byt, ps.LastPass, ps.Passes
	}
	if cnt, _, _, _ := read(); cnt[newcomer] != 0 {
		t.Fatalf("the newcomer %d got %d replicas while down: %v", newcomer, cnt[newcomer], cnt)
	}
	if err := c.Restart(c.Broker(newcomer)); err != nil {
		t.Fatal(err)
	}
	return c, newcomer, read
}

// waitFor polls cond until it holds or within has passed; then it fails with
// cond's last account of what it saw.
func waitFor(t *testing.T, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, saw)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRebalanceOffEndToEnd: with heal.rebalance = false the empty 5th
// broker gets nothing over many passes.
func TestRebalanceOffEndToEnd(t *testing.T) {
	c, newcomer, read := rebalanceCluster(t, "rebalance = false")
	// Every pass from here on is judged, read from the leader's history.
	feed := harness.NewPassFeed(time.Now())
	judged := 0
	waitFor(t, 120*time.Second, func() (bool, string) {
		cnt, _, _, _ := read()
		if cnt[newcomer] != 0 {
			t.Fatalf("rebalance off, yet the newcomer %d holds %d replicas (%v)", newcomer, cnt[newcomer], cnt)
		}
		recs, _ := feed.Next(context.Background(), c)
		if p := feed.Problem(); p != "" {
			t.Fatal(p)
		}
		for _, p := range recs {
			if len(p.Report.Moved) != 0 || p.Report.Rebalance != nil {
				t.Fatalf("rebalance off, yet pass %d of broker %d moved %v (rebalance %+v)", p.Seq, p.Broker, p.Report.Moved, p.Report.Rebalance)
			}
			judged++
		}
		return judged >= 25, fmt.Sprintf("%d passes judged since the newcomer came back (%s)", judged, feed.Summary())
	})
}
