package cluster

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/testbed/raftwire"
	"github.com/malachi-log/malachi/testbed/testlog"
	"github.com/rs/zerolog"
)

// sendRPC dials addr from local (nil: any) over TLS with cfg, or plain
// TCP when cfg is nil, writes rpc type typ and req (raftwire.Encode),
// then tail, and reports whether raft answered (decoding the answer into
// resp) rather than closing the connection. No connection, or neither
// within 10 s, fails the test.
func sendRPC(t testing.TB, local net.Addr, addr string, cfg *tls.Config, typ uint8, req any, tail []byte, resp any) bool {
	t.Helper()
	ok, err := raftwire.Dialer{Local: local, TLS: cfg}.Send(addr, typ, req, tail, resp)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// pairConfig is an attacker's TLS client: it presents the pair in dir
// (none when crt is "") and trusts any server.
func pairConfig(t testing.TB, dir, crt, key string) *tls.Config {
	t.Helper()
	if crt == "" {
		cfg, err := raftwire.ClientConfig("", "")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg, err := raftwire.ClientConfig(filepath.Join(dir, crt), filepath.Join(dir, key))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// brokerClient is broker id's own, valid, TLS client config.
func (c *testCluster) brokerClient(id meta.BrokerID) *tls.Config {
	c.t.Helper()
	certs, err := pki.LoadBroker(c.pki.BrokerDir(id))
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := certs.ClientConfig()
	cfg.ServerName = "127.0.0.1"
	return cfg
}

// quiet waits for a leader, the bootstrap replication factor and every
// node caught up, and returns the leader's position.
func (c *testCluster) quiet() int {
	c.t.Helper()
	li := c.leader()
	for deadline := time.Now().Add(30 * time.Second); c.nodes[li].Snapshot().ReplicationFactor == 0; {
		if time.Now().After(deadline) {
			c.t.Fatal("the bootstrap replication factor was never applied")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.settle(li)
	return li
}

// clusterState is what an attack must not change.
type clusterState struct {
	leader meta.BrokerID
	terms  []uint64
	snaps  []string
}

func (c *testCluster) state(li int) clusterState {
	s := clusterState{leader: c.cfgs[li].ID}
	for _, n := range c.nodes {
		s.terms = append(s.terms, n.r.CurrentTerm())
		s.snaps = append(s.snaps, fmt.Sprint(n.Snapshot()))
	}
	return s
}

// unchanged checks that the leader, every term and every node's metadata
// are as before.
func (c *testCluster) unchanged(before clusterState) {
	c.t.Helper()
	li := c.leader()
	c.settle(li)
	now := c.state(li)
	if now.leader != before.leader {
		c.t.Errorf("leader is broker %d, was %d", now.leader, before.leader)
	}
	for i := range now.terms {
		if now.terms[i] != before.terms[i] {
			c.t.Errorf("node %d at term %d, was %d", i+1, now.terms[i], before.terms[i])
		}
		if now.snaps[i] != before.snaps[i] {
			c.t.Errorf("node %d metadata changed:\n%s\nwas\n%s", i+1, now.snaps[i], before.snaps[i])
		}
	}
}

// captureLog sends every node's warnings and errors to buf as well as to
// the test log.
func captureLog(t testing.TB, buf io.Writer) func(*Config) {
	return func(cfg *Config) {
		w := io.MultiWriter(buf, zerolog.NewTestWriter(t))
		cfg.Logger = zerolog.New(w).Level(zerolog.WarnLevel).With().Stringer("node", cfg.ID).Logger()
	}
}

// TestRaftRefusesUnauthenticatedPeers: plaintext, TLS without a
// certificate, a broker certificate of another CA, an expired broker
// certificate of the cluster CA and a viewer's certificate never reach
// raft: a takeover RequestVote claiming a member changes no leader, term
// or metadata. The same vote sent with the member's own certificate gets
// an answer (the message is what raft reads).
func TestRaftRefusesUnauthenticatedPeers(t *testing.T) {
	var log testlog.Buffer
	c := newTestCluster(t, 3, captureLog(t, &log))
	li := c.quiet()
	leader, a := c.cfgs[li], c.cfgs[(li+1)%3]

	var resp raft.RequestVoteResponse
	if !sendRPC(t, nil, leader.Addr, c.brokerClient(a.ID), raftwire.RequestVote, raftwire.StaleVote(a.ID, a.Addr), nil, &resp) || resp.Granted {
		t.Fatalf("a stale vote from broker %d with its own certificate: not answered, or granted (%+v)", a.ID, resp)
	}
	before := c.state(li)

	other := testPKI(t, a.ID)
	expired := filepath.Join(t.TempDir(), "expired")
	err := pki.CreateBroker(pki.Options{Dir: expired, CACert: filepath.Join(c.pki.Root, pki.CACert), CAKey: filepath.Join(c.pki.Root, pki.CAKey),
		Now: time.Now().Add(-48 * time.Hour), Lifetime: 24 * time.Hour}, a.ID, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	viewer, err := pki.LoadClient(c.pki.ClientDir(), "viewer")
	if err != nil {
		t.Fatal(err)
	}
	viewerCfg := viewer.ClientConfig()
	viewerCfg.ServerName = "127.0.0.1"
	cases := []struct {
		name, reason string
		cfg          *tls.Config
	}{
		{"plaintext", "first record does not look like a TLS handshake", nil},
		{"TLS without a certificate", "no client certificate presented", pairConfig(t, "", "", "")},
		{"a broker certificate of another CA", "signed by another CA", pairConfig(t, other.BrokerDir(a.ID), pki.BrokerCert, pki.BrokerKey)},
		{"an expired broker certificate", "expired at", pairConfig(t, expired, pki.BrokerCert, pki.BrokerKey)},
		{"a viewer certificate", `names viewer \"viewer\", not a broker`, viewerCfg},
	}
	// Each case from its own loopback address, so that each is logged.
	srcs := loopbackSources(t, len(cases))
	for i, tc := range cases {
		if sendRPC(t, srcs[i], leader.Addr, tc.cfg, raftwire.RequestVote, raftwire.Takeover(a.ID, a.Addr), nil, nil) {
			t.Errorf("%s: raft answered a takeover vote", tc.name)
		}
	}
	c.unchanged(before)
	if srcs[0] == nil {
		return
	}
	c.close(li) // waits for its handshakes: every refusal is logged
	for i, tc := range cases {
		ip := srcs[i].(*net.TCPAddr).IP.String()
		l := log.Lines(`"remote":"` + ip + `:`)
		if len(l) != 1 || !strings.Contains(l[0], "cluster: raft connection refused") || !strings.Contains(l[0], tc.reason) {
			t.Errorf("%s: logged %q, want one refusal saying %q", tc.name, l, tc.reason)
		}
	}
}

// loopbackSources returns n local addresses 127.0.0.10, .11, ... to dial
// from, or n nils where only 127.0.0.1 is usable.
func loopbackSources(t testing.TB, n int) []net.Addr {
	out := make([]net.Addr, n)
	for i := range out {
		a := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i))}
		l, err := net.ListenTCP("tcp", a)
		if err != nil {
			t.Logf("no %s here (%v): dialing from the default address", a.IP, err)
			return make([]net.Addr, n)
		}
		l.Close()
		out[i] = a
	}
	return out
}

// TestRaftRefusesForgedServerID: broker a's valid certificate speaking as
// broker b, with no server id, or with b's address is refused before
// raft reads the RPC: no takeover, and a crafted AppendEntries that
// would commit a command on the leader is not applied. The refusal is
// logged once, naming the certificate's broker and the claimed id.
func TestRaftRefusesForgedServerID(t *testing.T) {
	var log testlog.Buffer
	c := newTestCluster(t, 3, captureLog(t, &log))
	li := c.quiet()
	leader, a, b := c.cfgs[li], c.cfgs[(li+1)%3], c.cfgs[(li+2)%3]
	l := c.nodes[li]
	cli := c.brokerClient(a.ID)

	var resp raft.RequestVoteResponse
	if !sendRPC(t, nil, leader.Addr, cli, raftwire.RequestVote, raftwire.StaleVote(a.ID, a.Addr), nil, &resp) || resp.Granted {
		t.Fatalf("a stale vote from broker %d as itself: not answered, or granted (%+v)", a.ID, resp)
	}
	before := c.state(li)
	evil, err := meta.EncodeCommand(meta.CreateSegment{Segment: seg("evil", 1, 2, 3)})
	if err != nil {
		t.Fatal(err)
	}
	last := l.r.LastIndex()
	var prev raft.Log
	if err := l.logs.GetLog(last, &prev); err != nil {
		t.Fatal(err)
	}
	term := l.r.CurrentTerm() + 1
	append1 := func(id meta.BrokerID, addr string) *raft.AppendEntriesRequest {
		return raftwire.WithLeader(&raft.AppendEntriesRequest{RPCHeader: raftwire.Header(id.String(), addr), Term: term,
			PrevLogEntry: last, PrevLogTerm: prev.Term, LeaderCommitIndex: last + 1,
			Entries: []*raft.Log{{Index: last + 1, Term: term, Type: raft.LogCommand, Data: evil}}}, addr)
	}
	noID := raftwire.Takeover(a.ID, a.Addr)
	noID.ID = nil // a pre-v3 peer: raft would skip its membership check
	for _, tc := range []struct {
		name string
		typ  uint8
		req  any
	}{
		{fmt.Sprintf("a takeover vote claiming broker %d", b.ID), raftwire.RequestVote, raftwire.Takeover(b.ID, b.Addr)},
		{fmt.Sprintf("an AppendEntries claiming broker %d", b.ID), raftwire.AppendEntries, append1(b.ID, b.Addr)},
		{"a takeover vote with no server id", raftwire.RequestVote, noID},
		{fmt.Sprintf("an AppendEntries from broker %d advertising broker %d's address", a.ID, b.ID), raftwire.AppendEntries, append1(a.ID, b.Addr)},
		{"an unknown rpc type", 7, raftwire.Takeover(a.ID, a.Addr)},
	} {
		if sendRPC(t, nil, leader.Addr, cli, tc.typ, tc.req, nil, nil) {
			t.Errorf("%s: raft answered", tc.name)
		}
	}
	c.unchanged(before)
	for i, n := range c.nodes {
		if _, ok := n.Segment("evil"); ok {
			t.Errorf("node %d applied the crafted entry", i+1)
		}
	}
	lines := log.Lines("cluster: raft connection refused")
	want := fmt.Sprintf(`the certificate names broker %d, the RPC claims server id \"%d\"`, a.ID, b.ID)
	if len(lines) != 1 || !strings.Contains(lines[0], fmt.Sprintf(`"peer":"broker %d"`, a.ID)) || !strings.Contains(lines[0], want) {
		t.Fatalf("refusal lines %q: want one naming broker %d and the claimed id %d", lines, a.ID, b.ID)
	}
}

// TestRaftRefusesForeignSnapshot: an InstallSnapshot carrying other
// metadata, from broker 9 (a valid certificate of the cluster CA, not a
// member) or from a member claiming another's id, is refused: the
// metadata, the leader and the terms are unchanged. The same snapshot from
// the member as itself, at an old term, gets an answer.
func TestRaftRefusesForeignSnapshot(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.quiet()
	leader, a, b := c.cfgs[li], c.cfgs[(li+1)%3], c.cfgs[(li+2)%3]
	l := c.nodes[li]

	outsider := filepath.Join(t.TempDir(), "broker-9")
	err := pki.CreateBroker(pki.Options{Dir: outsider, CACert: filepath.Join(c.pki.Root, pki.CACert), CAKey: filepath.Join(c.pki.Root, pki.CAKey)}, 9, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	snap := l.Snapshot()
	snap.Segments = append(snap.Segments, seg("evil", 1, 2, 3))
	snap.Index += 100
	var data bytes.Buffer
	if err := writeSnapshot(&data, &snap); err != nil {
		t.Fatal(err)
	}
	term := l.r.CurrentTerm()
	install := func(id meta.BrokerID, addr string, term uint64) *raft.InstallSnapshotRequest {
		return &raft.InstallSnapshotRequest{RPCHeader: raftwire.Header(id.String(), addr), SnapshotVersion: 1, Term: term, Leader: []byte(addr),
			LastLogIndex: snap.Index, LastLogTerm: term, Configuration: raft.EncodeConfiguration(l.r.GetConfiguration().Configuration()),
			ConfigurationIndex: 1, Size: int64(data.Len())}
	}
	var resp raft.InstallSnapshotResponse
	if !sendRPC(t, nil, leader.Addr, c.brokerClient(a.ID), raftwire.InstallSnapshot, install(a.ID, a.Addr, 1), data.Bytes(), &resp) || resp.Success {
		t.Fatalf("an old-term snapshot from broker %d as itself: not answered, or installed (%+v)", a.ID, resp)
	}
	before := c.state(li)
	if sendRPC(t, nil, leader.Addr, pairConfig(t, outsider, pki.BrokerCert, pki.BrokerKey), raftwire.InstallSnapshot, install(9, "", term+1), data.Bytes(), nil) {
		t.Error("a snapshot from broker 9, not a member (and advertising no address): answered")
	}
	if sendRPC(t, nil, leader.Addr, c.brokerClient(a.ID), raftwire.InstallSnapshot, install(b.ID, b.Addr, term+1), data.Bytes(), nil) {
		t.Errorf("a snapshot from broker %d claiming broker %d: answered", a.ID, b.ID)
	}
	c.unchanged(before)
}

// TestRaftPortGarbage: random bytes, a plaintext raft RPC, an empty
// connection and garbage after a valid handshake, from two source
// addresses, are refused; the cluster keeps working; the node logged one
// refusal per source address and raft logged nothing about them.
func TestRaftPortGarbage(t *testing.T) {
	var log testlog.Buffer
	capture := captureLog(t, &log)
	c := newTestCluster(t, 3, func(cfg *Config) {
		if cfg.ID == 1 {
			capture(cfg)
		}
	})
	li := c.quiet()
	target, a := c.cfgs[0], c.cfgs[1]
	before := c.state(li)
	rng := rand.New(rand.NewPCG(1, 2))
	sources, want := loopbackSources(t, 2), 3 // and the stalled handshake's 127.0.0.1
	if sources[0] == nil {
		sources, want = []net.Addr{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}, 1
	}
	// A handshake that never completes is closed at its deadline.
	stalled, err := net.Dial("tcp", target.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	stalled.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00}) // a record header, and no record
	for _, src := range sources {
		for i := range 20 {
			junk := make([]byte, 1+rng.IntN(4096))
			for j := range junk {
				junk[j] = byte(rng.Uint32())
			}
			if i%2 == 1 {
				junk[0], junk[1], junk[2] = 0x16, 0x03, 0x01 // a TLS handshake record header
			}
			if sendRPC(t, src, target.Addr, nil, junk[0], raftwire.Raw(junk[1:]), nil, nil) {
				t.Errorf("random bytes from %s: answered", src)
			}
		}
		if sendRPC(t, src, target.Addr, nil, raftwire.RequestVote, raftwire.Takeover(a.ID, a.Addr), nil, nil) {
			t.Errorf("a plaintext RequestVote from %s: answered", src)
		}
		if sendRPC(t, src, target.Addr, c.brokerClient(a.ID), raftwire.AppendEntries, raftwire.Raw("\xdf\xff\xff\xff\xff garbage"), nil, nil) {
			t.Errorf("garbage after broker %d's handshake from %s: answered", a.ID, src)
		}
		d := net.Dialer{LocalAddr: src}
		if conn, err := d.Dial("tcp", target.Addr); err == nil {
			conn.Close()
		}
	}
	stalled.SetReadDeadline(time.Now().Add(2 * handshakeTimeout))
	if _, err := io.Copy(io.Discard, stalled); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a stalled handshake still open after %v", 2*handshakeTimeout)
	}
	c.unchanged(before)
	mustApply(t, c.nodes[li], meta.CreateSegment{Segment: seg("after", 1, 2, 3)})
	c.settle(li)
	for i, n := range c.nodes {
		if _, ok := n.Segment("after"); !ok {
			t.Errorf("node %d: the cluster stopped replicating", i+1)
		}
	}
	c.close(0) // waits for its handshakes: every refusal is logged or counted
	lines := log.Lines("cluster: raft connection refused")
	if len(lines) != want {
		t.Errorf("%d refusal lines, want %d (one per source address a minute):\n%s", len(lines), want, strings.Join(lines, "\n"))
	}
	for _, src := range sources {
		ip := src.(*net.TCPAddr).IP.String()
		if n := len(log.Lines(`"remote":"` + ip + `:`)); n != 1 {
			t.Errorf("%d refusal lines from %s, want 1", n, ip)
		}
	}
	for _, raftSays := range []string{"failed to accept", "failed to decode", "failed to flush"} {
		for _, l := range log.Lines(raftSays) {
			if !strings.Contains(l, "transport shutdown") { // raft, on an RPC in flight while node 1 closed
				t.Errorf("raft logged %s", l)
			}
		}
	}
}

// TestDialChecksServerBroker: a node dialing the address the
// configuration gives broker 2 refuses a server whose certificate names
// broker 3, with an error naming both, and accepts broker 2's.
func TestDialChecksServerBroker(t *testing.T) {
	l := testPKI(t, 1, 2, 3)
	addrs := freeAddrs(t, 2)
	cfg := Config{Peers: []Peer{{1, addrs[0]}, {2, addrs[1]}}}
	load := func(id meta.BrokerID) *pki.Certs {
		certs, err := pki.LoadBroker(l.BrokerDir(id))
		if err != nil {
			t.Fatal(err)
		}
		return certs
	}
	g := newGate(cfg, testLogger(t), time.Now)
	s1, err := newTLSStream(addrs[0], load(1), g)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	for _, srv := range []meta.BrokerID{3, 2} {
		s, err := newTLSStream(addrs[1], load(srv), g)
		if err != nil {
			t.Fatal(err)
		}
		c, err := s1.Dial(raft.ServerAddress(addrs[1]), 5*time.Second)
		switch {
		case srv == 3 && (err == nil || !strings.Contains(err.Error(), "names broker 3") || !strings.Contains(err.Error(), "to broker 2")):
			t.Errorf("dialing broker 2's address served by broker 3: %v, want refused naming both", err)
		case srv == 2 && err != nil:
			t.Errorf("dialing broker 2: %v", err)
		}
		if c != nil {
			c.Close()
		}
		s.Close()
	}
}

// TestInsecureCluster: with Insecure, raft runs over plain TCP on
// loopback, and a plaintext RPC reaches it.
func TestInsecureCluster(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.TLS, cfg.Insecure = nil, true })
	li := c.quiet()
	createSealed(t, c.nodes[li], "s", 1, 2, 3)
	c.settle(li)
	for i, n := range c.nodes {
		if _, ok := n.Segment("s"); !ok {
			t.Errorf("node %d: segment not replicated", i+1)
		}
	}
	a := c.cfgs[(li+1)%3]
	var resp raft.RequestVoteResponse
	if !sendRPC(t, nil, c.cfgs[li].Addr, nil, raftwire.RequestVote, raftwire.StaleVote(a.ID, a.Addr), nil, &resp) || resp.Granted {
		t.Fatalf("a plaintext stale vote: not answered, or granted (%+v)", resp)
	}
}
