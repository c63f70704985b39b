package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
)

// TestDecommissionEndToEnd: real brokers, 4 of them at RF 3, one move per
// pass (pass_backfills = 1). A decommission cancelled midway stops moving
// replicas (and leaves every set at 3); a decommission of another broker
// runs to "drained", after which every set has 3 members, none of them
// that broker, and it holds no copy. Every wait has a generous deadline
// and fails with what it saw.
func TestDecommissionEndToEnd(t *testing.T) {
	malachid, _ := binaries(t)
	c, err := harness.New(harness.Config{Bin: malachid, Root: t.TempDir(), Brokers: 4, RF: 3, Tick: 200 * time.Millisecond,
		Grace: 2 * time.Second, Raft: harness.DemoRaft(time.Second), HealExtra: "pass_backfills = 1\nrebalance = false\n"}) // a cancelled drain must stop moving: no rebalancer refilling it
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx := context.Background()
	leader, err := c.WaitReady(ctx, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRegistered(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	addr := c.Broker(leader).Admin
	cli := func(cmd string, args ...string) (string, string, int) {
		var out, errb strings.Builder
		code := run(append(append([]string{cmd}, c.CLIFlags()...), args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	if out, errs, code := cli("load", "--admin", addr, "--segments", "12", "--records", "4", "--size", "1KiB", "--prefix", "dc"); code != 0 {
		t.Fatalf("load: exit %d: %s%s", code, out, errs)
	}
	client := admin.New(addr, c.RPC(), c.Config().Insecure)
	held := func(b meta.BrokerID) (int, meta.Snapshot) {
		t.Helper()
		snap, err := client.Metadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range snap.Segments {
			if s.HasReplica(b) {
				n++
			}
			if len(s.Replicas) != 3 {
				t.Fatalf("segment %s has %v: not 3 replicas", s.ID, s.Replicas)
			}
		}
		return n, snap
	}
	// drain returns b's progress in the leader's last pass, and the pass
	// count.
	drain := func(b meta.BrokerID) (*heal.Drain, uint64) {
		t.Helper()
		out, errs, code := cli("status", "--admin", addr, "--json")
		if code != 0 {
			t.Fatalf("status: exit %d: %s", code, errs)
		}
		var st clusterStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v: %s", err, out)
		}
		ps, ok := admin.DecodeStatus(st.Heal)
		if !ok || ps.LastPass == nil {
			return nil, ps.Passes
		}
		l := ps.LastPass
		for i := range l.Decommission {
			if l.Decommission[i].Broker == b {
				return &l.Decommission[i], ps.Passes
			}
		}
		return nil, ps.Passes
	}
	var others []meta.BrokerID
	for _, b := range c.Brokers() {
		if b.ID != leader {
			others = append(others, b.ID)
		}
	}
	cancelled, drained := others[0], others[1]

	// Cancel midway.
	before, _ := held(cancelled)
	if out, errs, code := cli("decommission", cancelled.String(), "--admin", addr); code != 0 || !strings.Contains(out, "decommissioning") {
		t.Fatalf("decommission %d: exit %d: %s%s", cancelled, code, out, errs)
	}
	waitFor(t, 60*time.Second, func() (bool, string) {
		n, _ := held(cancelled)
		return n < before, "no replica moved off the decommissioning broker"
	})
	if out, errs, code := cli("decommission", cancelled.String(), "--cancel", "--admin", addr); code != 0 || !strings.Contains(out, "cancelled") {
		t.Fatalf("decommission --cancel %d: exit %d: %s%s", cancelled, code, out, errs)
	}
	var since uint64
	waitFor(t, 60*time.Second, func() (bool, string) {
		d, passes := drain(cancelled)
		since = passes
		return d == nil, "the last pass still reports the cancelled decommission"
	})
	left, _ := held(cancelled)
	waitFor(t, 60*time.Second, func() (bool, string) {
		_, passes := drain(cancelled)
		return passes >= since+3, "fewer than 3 passes ran after the cancel"
	})
	if n, snap := held(cancelled); n != left {
		t.Fatalf("broker %d went from %d to %d replicas after its decommission was cancelled: %+v", cancelled, left, n, snap.Segments)
	}
	_, snapNow := held(cancelled)
	if b, _ := snapNow.Broker(cancelled); !b.Is(meta.ModeActive) {
		t.Fatalf("broker %d after cancel: %+v", cancelled, b)
	}
	t.Logf("cancelled midway: broker %d kept %d of %d replicas", cancelled, left, before)

	// Decommission to the end.
	if _, errs, code := cli("decommission", drained.String(), "--admin", addr); code != 0 {
		t.Fatalf("decommission %d: exit %d: %s", drained, code, errs)
	}
	var last *heal.Drain
	waitFor(t, 120*time.Second, func() (bool, string) {
		last, _ = drain(drained)
		return last != nil && last.Drained, "not drained"
	})
	n, snap := held(drained)
	if n != 0 {
		t.Fatalf("drained, but broker %d is in %d sets", drained, n)
	}
	for _, s := range snap.Segments {
		if len(s.Replicas) != 3 || slices.Contains(s.Replicas, drained) {
			t.Fatalf("segment %s: %v", s.ID, s.Replicas)
		}
	}
	waitFor(t, 60*time.Second, func() (bool, string) {
		files, err := c.Broker(drained).CopyFiles()
		if err != nil {
			return false, err.Error()
		}
		return len(files) == 0, "copies left on the drained broker"
	})
	out, _, _ := cli("status", "--admin", addr)
	if !strings.Contains(out, "it can be stopped") {
		t.Fatalf("status does not say the drained broker can be stopped:\n%s", out)
	}
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

// TestMaintenanceEndToEnd: a broker killed inside its maintenance window
// is not re-replicated (its sets stay as they were over passes well past
// the grace delay) and shows in status; a second window is refused by
// heal.max_maintenance (1); once the window is ended, the broker's absence
// is a failure again and its replicas are replaced.
func TestMaintenanceEndToEnd(t *testing.T) {
	malachid, _ := binaries(t)
	c, err := harness.New(harness.Config{Bin: malachid, Root: t.TempDir(), Brokers: 4, RF: 3, Tick: 200 * time.Millisecond,
		Grace: time.Second, Raft: harness.DemoRaft(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx := context.Background()
	leader, err := c.WaitReady(ctx, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRegistered(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	addr := c.Broker(leader).Admin
	cli := func(cmd string, args ...string) (string, string, int) {
		var out, errb strings.Builder
		code := run(append(append([]string{cmd}, c.CLIFlags()...), args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	if out, errs, code := cli("load", "--admin", addr, "--segments", "8", "--records", "4", "--size", "1KiB", "--prefix", "mt"); code != 0 {
		t.Fatalf("load: exit %d: %s%s", code, out, errs)
	}
	client := admin.New(addr, c.RPC(), c.Config().Insecure)
	sets := func() map[meta.SegmentID][]meta.BrokerID {
		t.Helper()
		snap, err := client.Metadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[meta.SegmentID][]meta.BrokerID{}
		for _, s := range snap.Segments {
			m[s.ID] = s.Replicas
		}
		return m
	}
	// passes is the number of the newest pass in the leader's history.
	passes := func() uint64 {
		t.Helper()
		h, err := client.Passes(ctx, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		return h.Last
	}
	var others []meta.BrokerID
	for _, b := range c.Brokers() {
		if b.ID != leader {
			others = append(others, b.ID)
		}
	}
	m, second := others[0], others[1]
	if out, errs, code := cli("maintenance", m.String(), "--for", "10m", "--admin", addr); code != 0 || !strings.Contains(out, "in maintenance until") {
		t.Fatalf("maintenance %d: exit %d: %s%s", m, code, out, errs)
	}
	if out, errs, code := cli("maintenance", second.String(), "--for", "10m", "--admin", addr); code != 1 || !strings.Contains(errs, "max_maintenance is 1") {
		t.Fatalf("a second window: exit %d, want 1 naming max_maintenance: %s%s", code, out, errs)
	}
	before := sets()
	if err := c.Kill(c.Broker(m)); err != nil {
		t.Fatal(err)
	}
	// Well past the grace delay (1 s): 25 passes of 200 ms.
	start := passes()
	waitFor(t, 60*time.Second, func() (bool, string) { return passes() >= start+25, "fewer than 25 passes ran" })
	if after := sets(); !mapsEqual(before, after) {
		t.Fatalf("replica sets changed while broker %d was in maintenance:\nbefore %v\nafter  %v", m, before, after)
	}
	out, _, _ := cli("status", "--admin", addr)
	if !strings.Contains(out, "maintenance broker "+m.String()+": until") || !strings.Contains(out, "not answering; its absence is not a failure") {
		t.Fatalf("status does not show the window:\n%s", out)
	}
	if out, errs, code := cli("maintenance", m.String(), "--end", "--admin", addr); code != 0 || !strings.Contains(out, "maintenance ended") {
		t.Fatalf("maintenance --end: exit %d: %s%s", code, out, errs)
	}
	waitFor(t, 60*time.Second, func() (bool, string) {
		for id, rs := range sets() {
			if slices.Contains(rs, m) || len(rs) != 3 {
				return false, string(id) + " still names the broker whose window ended, or has not 3 replicas"
			}
		}
		return true, ""
	})
}

func mapsEqual(a, b map[meta.SegmentID][]meta.BrokerID) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !meta.SameReplicas(v, b[k]) {
			return false
		}
	}
	return true
}
