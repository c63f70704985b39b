package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/rs/zerolog"
)

// testLogger writes warnings and errors to the test log; set
// CLUSTER_TEST_LOG=debug for everything raft says.
func testLogger(t testing.TB) zerolog.Logger {
	lvl := zerolog.WarnLevel
	if os.Getenv("CLUSTER_TEST_LOG") == "debug" {
		lvl = zerolog.DebugLevel
	}
	return zerolog.New(zerolog.NewTestWriter(t)).Level(lvl).With().Timestamp().Logger()
}

// freeAddrs returns n distinct loopback addresses nothing listens on,
// claimed for this process (harness.FreeLoopbackPorts, outside the
// kernel's ephemeral range): a port freed by closing a listener on port 0
// can be handed to anyone before the node binds it.
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := harness.FreeLoopbackPorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

type testCluster struct {
	t     testing.TB
	pki   pki.Local // the cluster CA, brokers 1..n and the clients
	cfgs  []Config
	nodes []*Node // nil when closed
}

// testPKI writes a cluster CA with certificates for brokers ids (valid for
// 127.0.0.1 and localhost) and the operator and viewer clients.
func testPKI(t testing.TB, ids ...meta.BrokerID) pki.Local {
	t.Helper()
	l, err := pki.CreateLocal(t.TempDir(), ids, []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newTestCluster opens n nodes on loopback over mutual TLS; tweak may
// change each Config first (set Insecure and clear TLS for plain TCP).
func newTestCluster(t testing.TB, n int, tweak func(*Config)) *testCluster {
	t.Helper()
	addrs := freeAddrs(t, n)
	var peers []Peer
	for i, a := range addrs {
		peers = append(peers, Peer{ID: meta.BrokerID(i + 1), Addr: a})
	}
	c := &testCluster{t: t}
	var ids []meta.BrokerID
	for _, p := range peers {
		ids = append(ids, p.ID)
	}
	c.pki = testPKI(t, ids...)
	for i := range n {
		cfg := DefaultConfig()
		cfg.ID, cfg.Addr, cfg.Dir, cfg.Peers = peers[i].ID, peers[i].Addr, t.TempDir(), peers
		certs, err := pki.LoadBroker(c.pki.BrokerDir(cfg.ID))
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = certs
		cfg.Logger = testLogger(t).With().Int("node", i+1).Logger()
		if raceEnabled || os.Getenv("CLUSTER_TEST_SLOW") != "" {
			// The race detector on a loaded 2-core box stalls goroutines
			// for longer than the 100 ms loopback defaults tolerate (at
			// load 24, past 500 ms: a leader stepped down in the middle of
			// a test's apply), and leadership flaps; the tests are about
			// behaviour, not speed.
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, time.Second
		}
		if tweak != nil {
			tweak(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
		c.nodes = append(c.nodes, nil)
		c.open(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.close(i)
		}
	})
	return c
}

func (c *testCluster) open(i int) *Node {
	c.t.Helper()
	n, err := Open(c.cfgs[i])
	if err != nil {
		c.t.Fatalf("open node %d: %v", i+1, err)
	}
	c.nodes[i] = n
	return n
}

func (c *testCluster) close(i int) {
	c.t.Helper()
	if c.nodes[i] == nil {
		return
	}
	if err := c.nodes[i].Close(); err != nil {
		c.t.Errorf("close node %d: %v", i+1, err)
	}
	c.nodes[i] = nil
}

// leader waits until exactly one open node is leader and every open node
// agrees on it, and returns its position.
func (c *testCluster) leader() int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		li := -1
		agree := true
		for i, n := range c.nodes {
			if n != nil && n.IsLeader() {
				if li >= 0 {
					agree = false
				}
				li = i
			}
		}
		if li >= 0 && agree {
			for _, n := range c.nodes {
				if n == nil {
					continue
				}
				if id, _ := n.Leader(); id != c.cfgs[li].ID {
					agree = false
				}
			}
			if agree {
				return li
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("no agreed leader within 10s")
	return -1
}

// settle waits for every open node's FSM to reflect all commands the
// leader committed: Barrier on the leader, then on each follower.
func (c *testCluster) settle(li int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.nodes[li].Barrier(ctx); err != nil {
		c.t.Fatalf("leader barrier: %v", err)
	}
	want := c.nodes[li].Snapshot().Index
	for i, n := range c.nodes {
		if n == nil {
			continue
		}
		// A follower learns the new commit index with the next heartbeat:
		// poll its own barrier until it reaches the leader's index.
		for {
			if err := n.Barrier(ctx); err != nil {
				c.t.Fatalf("node %d barrier: %v", i+1, err)
			}
			if n.Snapshot().Index >= want {
				break
			}
			select {
			case <-ctx.Done():
				c.t.Fatalf("node %d at index %d, leader at %d", i+1, n.Snapshot().Index, want)
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
}

func seg(id string, replicas ...meta.BrokerID) meta.Segment {
	return meta.Segment{ID: meta.SegmentID(id), StartOffset: 0, Length: 0, Replicas: replicas}
}

func mustApply(t testing.TB, n *Node, c meta.Command) uint64 {
	t.Helper()
	idx, err := n.Apply(context.Background(), c)
	if err != nil {
		t.Fatalf("apply %s: %v", c.Op(), err)
	}
	return idx
}

func createSealed(t testing.TB, n *Node, id string, replicas ...meta.BrokerID) {
	t.Helper()
	mustApply(t, n, meta.CreateSegment{Segment: seg(id, replicas...)})
	mustApply(t, n, meta.SealSegment{ID: meta.SegmentID(id), Length: 10, ByteSize: 1000, Checksum: meta.CRC32C(7)})
}

func TestElectReplicateAndFactor(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.leader()
	l := c.nodes[li]
	createSealed(t, l, "s-0001", 1, 2, 3)
	mustApply(t, l, meta.RegisterBroker{Broker: meta.Broker{ID: 2, Rack: "r2", RaftAddr: c.cfgs[1].Addr}})
	c.settle(li)
	want := l.Snapshot()
	if want.ReplicationFactor != DefaultReplicationFactor {
		t.Fatalf("replication factor %d, want %d set at bootstrap", want.ReplicationFactor, DefaultReplicationFactor)
	}
	for i, n := range c.nodes {
		got := n.Snapshot()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("node %d snapshot\n%+v\nwant\n%+v", i+1, got, want)
		}
		s, ok := n.Segment("s-0001")
		if !ok || !s.Sealed || s.Version != 2 || !meta.SameReplicas(s.Replicas, []meta.BrokerID{1, 2, 3}) {
			t.Errorf("node %d segment %+v %v", i+1, s, ok)
		}
	}
}

func TestApplyOnFollowerNamesLeader(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.leader()
	fi := (li + 1) % 3
	_, err := c.nodes[fi].Apply(context.Background(), meta.CreateSegment{Segment: seg("x", 1)})
	var nl *NotLeaderError
	if !errors.Is(err, ErrNotLeader) || !errors.As(err, &nl) {
		t.Fatalf("apply on follower: %v, want a NotLeaderError", err)
	}
	if nl.LeaderID != c.cfgs[li].ID || nl.LeaderAddr != c.cfgs[li].Addr {
		t.Fatalf("NotLeaderError names %d at %s, want %d at %s", nl.LeaderID, nl.LeaderAddr, c.cfgs[li].ID, c.cfgs[li].Addr)
	}
	c.settle(li)
	if _, ok := c.nodes[li].Segment("x"); ok {
		t.Fatal("a command refused on a follower reached the leader")
	}
	// Invalid commands are refused before they are proposed. The index is
	// read once the bootstrap's replication factor is applied: the leader
	// proposes it on its own, shortly after it is elected.
	for deadline := time.Now().Add(30 * time.Second); c.nodes[li].Snapshot().ReplicationFactor == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the bootstrap replication factor was never applied")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.settle(li)
	before := c.nodes[li].Snapshot().Index
	_, err = c.nodes[li].Apply(context.Background(), meta.CreateSegment{Segment: seg("../x", 1)})
	if !errors.Is(err, meta.ErrInvalid) {
		t.Fatalf("invalid command: %v, want meta.ErrInvalid", err)
	}
	c.settle(li)
	if after := c.nodes[li].Snapshot().Index; after != before {
		t.Fatalf("invalid command moved the index from %d to %d", before, after)
	}
}

func TestStaleCompareAndSetChangesNothing(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.leader()
	l := c.nodes[li]
	createSealed(t, l, "s", 1, 2, 3)
	mustApply(t, l, meta.SetSegmentReplicas{ID: "s", Expected: []meta.BrokerID{1, 2, 3}, Replicas: []meta.BrokerID{1, 2, 4}})
	c.settle(li)
	before, _ := l.Segment("s")

	idx, err := l.Apply(context.Background(), meta.SetSegmentReplicas{ID: "s", Expected: []meta.BrokerID{1, 2, 3}, Replicas: []meta.BrokerID{1, 2, 5}})
	if !errors.Is(err, meta.ErrStaleReplicas) {
		t.Fatalf("stale CAS: %v, want meta.ErrStaleReplicas", err)
	}
	if idx == 0 {
		t.Fatal("a refused command still occupies a log index; got 0")
	}
	_, err = l.Apply(context.Background(), meta.SetSegmentReplicas{ID: "nope", Expected: nil, Replicas: []meta.BrokerID{1}})
	if !errors.Is(err, meta.ErrUnknownSegment) {
		t.Fatalf("unknown segment: %v, want meta.ErrUnknownSegment", err)
	}
	c.settle(li)
	for i, n := range c.nodes {
		got, _ := n.Segment("s")
		if fmt.Sprint(got) != fmt.Sprint(before) {
			t.Errorf("node %d: %+v after a stale CAS, want %+v", i+1, got, before)
		}
		if n.Snapshot().Index < idx {
			t.Errorf("node %d index %d below the refused command's %d", i+1, n.Snapshot().Index, idx)
		}
	}
}

// casChain applies k compare-and-set steps to segment id, rotating its
// replica set, and returns the final set.
func casChain(t testing.TB, n *Node, id meta.SegmentID, cur []meta.BrokerID, k int) []meta.BrokerID {
	t.Helper()
	for range k {
		next := append(append([]meta.BrokerID(nil), cur[1:]...), cur[0])
		mustApply(t, n, meta.SetSegmentReplicas{ID: id, Expected: cur, Replicas: next})
		cur = next
	}
	return cur
}

func TestLeaderFailoverKeepsCommandsOnce(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.leader()
	createSealed(t, c.nodes[li], "s", 1, 2, 3)
	cur := casChain(t, c.nodes[li], "s", []meta.BrokerID{1, 2, 3}, 20)
	old := c.cfgs[li].ID
	c.close(li)

	nl := c.leader()
	if c.cfgs[nl].ID == old {
		t.Fatal("closed node still leader")
	}
	c.settle(nl)
	s, _ := c.nodes[nl].Segment("s")
	// create (1) + seal (2) + 20 CAS steps: each applied exactly once.
	if s.Version != 22 || !meta.SameReplicas(s.Replicas, cur) {
		t.Fatalf("after failover %+v, want version 22 replicas %v", s, cur)
	}
	cur = casChain(t, c.nodes[nl], "s", cur, 5)
	c.settle(nl)
	for i, n := range c.nodes {
		if n == nil {
			continue
		}
		s, _ := n.Segment("s")
		if s.Version != 27 || !meta.SameReplicas(s.Replicas, cur) {
			t.Errorf("node %d: %+v, want version 27 replicas %v", i+1, s, cur)
		}
		if got := n.Snapshot().ReplicationFactor; got != DefaultReplicationFactor {
			t.Errorf("node %d: factor %d", i+1, got)
		}
	}
	// The old leader rejoins and catches up.
	c.open(li)
	c.settle(c.leader())
	s, _ = c.nodes[li].Segment("s")
	if s.Version != 27 {
		t.Fatalf("rejoined old leader at version %d, want 27", s.Version)
	}
}

func TestRestartRestoresFromLogAndSnapshot(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.SnapshotThreshold = 16 })
	li := c.leader()
	for i := range 30 {
		createSealed(t, c.nodes[li], fmt.Sprintf("s-%04d", i), 1, 2, 3)
	}
	// One explicit snapshot on every node, then more log after it.
	c.settle(li)
	for i, n := range c.nodes {
		if err := n.r.Snapshot().Error(); err != nil {
			t.Fatalf("node %d snapshot: %v", i+1, err)
		}
	}
	casChain(t, c.nodes[li], "s-0000", []meta.BrokerID{1, 2, 3}, 4)
	c.settle(li)
	want := c.nodes[li].Snapshot()

	// A follower restarted alone.
	fi := (li + 1) % 3
	c.close(fi)
	mustApply(t, c.nodes[li], meta.CreateSegment{Segment: seg("late", 1, 2)})
	c.open(fi)
	li = c.leader()
	c.settle(li)
	if _, ok := c.nodes[fi].Segment("late"); !ok {
		t.Fatal("restarted follower missed a command committed while it was down")
	}
	want = c.nodes[li].Snapshot()

	// The whole cluster restarted: state comes back from disk alone.
	for i := range c.nodes {
		c.close(i)
	}
	// Alone, with no leader and so no commit index, a node has only its
	// snapshot: raft restores it synchronously in Open.
	alone := c.open(0)
	if got := len(alone.Snapshot().Segments); got < 30 {
		t.Fatalf("node 1 reopened alone holds %d segments, want the snapshot's 30 or more", got)
	}
	for i := 1; i < len(c.nodes); i++ {
		c.open(i)
	}
	li = c.leader()
	c.settle(li)
	for i, n := range c.nodes {
		got := n.Snapshot()
		got.Index, want.Index = 0, 0 // the new leader's no-op does not touch the FSM, but be exact on content
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("node %d after full restart:\n%+v\nwant\n%+v", i+1, got, want)
		}
	}
}

func TestLeaderChAndTransfer(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.leader()
	select {
	case v := <-c.nodes[li].LeaderCh():
		if !v {
			t.Fatal("leader's LeaderCh delivered false first")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("leader's LeaderCh delivered nothing")
	}
	if err := c.nodes[li].r.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	select {
	case v := <-c.nodes[li].LeaderCh():
		if v {
			t.Fatal("old leader's LeaderCh delivered true after a transfer")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("old leader's LeaderCh delivered nothing after a transfer")
	}
	nl := c.leader()
	if nl == li {
		t.Fatal("leadership did not move")
	}
	select {
	case v := <-c.nodes[nl].LeaderCh():
		if !v {
			t.Fatal("new leader's LeaderCh delivered false")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("new leader's LeaderCh delivered nothing")
	}
}

func TestMembersLastContact(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	// Each look is judged only if the leader still leads and the follower
	// still follows it afterwards: an election in between (at load a
	// heartbeat timeout can pass) blanks the follower's view of a leader.
	var li, fi int
	for attempt := 0; ; attempt++ {
		if attempt == 5 {
			t.Fatal("leadership moved during each of 5 looks at the members")
		}
		li = c.leader()
		fi = (li + 1) % 3
		lms, fms := c.nodes[li].Members(), c.nodes[fi].Members()
		if !agreeOnLeader(c, li) {
			continue
		}
		checkMembers(t, c, li, lms, fms)
		break
	}
	l := c.nodes[li]
	// Close a follower: its contact stops while the other's keeps advancing.
	dead, live := c.cfgs[fi].ID, c.cfgs[(li+2)%3].ID
	c.close(fi)
	hb := c.cfgs[li].HeartbeatTimeout
	deadline := time.Now().Add(10*time.Second + 20*hb)
	for {
		var dc, lc time.Time
		for _, m := range l.Members() {
			switch m.ID {
			case dead:
				dc = m.LastContact
			case live:
				lc = m.LastContact
			}
		}
		if lc.Sub(dc) > 5*hb {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead voter's LastContact %v keeps up with the live one's %v", dc, lc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkMembers judges the members seen by the leader (lms) and by a
// follower (fms): the leader knows every voter's contact; a follower only
// the leader's.
func checkMembers(t *testing.T, c *testCluster, li int, lms, fms []Member) {
	t.Helper()
	if len(lms) != 3 {
		t.Fatalf("members %+v, want 3", lms)
	}
	for _, m := range lms {
		if m.Self != (m.ID == c.cfgs[li].ID) || m.LastContact.IsZero() {
			t.Errorf("member %+v", m)
		}
		if m.Addr != c.cfgs[m.ID-1].Addr {
			t.Errorf("member %d addr %s, want %s", m.ID, m.Addr, c.cfgs[m.ID-1].Addr)
		}
	}
	for _, m := range fms {
		switch {
		case m.Self:
		case m.ID == c.cfgs[li].ID:
			if m.LastContact.IsZero() {
				t.Errorf("follower: leader's LastContact is zero")
			}
		default:
			if !m.LastContact.IsZero() {
				t.Errorf("follower: %d's LastContact %v, want zero (unknown)", m.ID, m.LastContact)
			}
		}
	}
}

func TestCloseIsIdempotentAndRefuses(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.leader()
	n := c.nodes[0]
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	c.nodes[0] = nil
	if _, err := n.Apply(context.Background(), meta.SetReplicationFactor{Factor: 2}); !errors.Is(err, ErrClosed) {
		t.Fatalf("apply after close: %v, want ErrClosed", err)
	}
	if err := n.Barrier(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("barrier after close: %v, want ErrClosed", err)
	}
	// The directory is reusable at once.
	c.open(0)
	c.leader()
}

func TestApplyContextDeadline(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.leader()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.nodes[li].Apply(ctx, meta.SetReplicationFactor{Factor: 2}); !errors.Is(err, context.Canceled) {
		t.Fatalf("apply with a cancelled context: %v", err)
	}
}

// AwaitView returns on every node once the metadata holds what the
// leader applied (woken by each applied command, not by polling), and
// with ctx's error, naming the index it stopped at, when it never does.
func TestAwaitView(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holds := func(v *meta.View) bool { _, ok := v.Segment("s-await"); return ok }
	done := make(chan error, len(c.nodes))
	for _, n := range c.nodes {
		go func() { done <- n.AwaitView(ctx, holds) }()
	}
	createSealed(t, c.nodes[li], "s-await", 1, 2, 3)
	for range c.nodes {
		if err := <-done; err != nil {
			t.Fatalf("awaiting s-await: %v", err)
		}
	}
	short, cancelShort := context.WithCancel(context.Background())
	cancelShort()
	err := c.nodes[li].AwaitView(short, func(*meta.View) bool { return false })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "index") {
		t.Fatalf("awaiting what never comes, cancelled: %v; want context.Canceled naming the index", err)
	}
}
