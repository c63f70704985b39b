package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/internal/hclogzero"
	"github.com/malachi-log/malachi/testbed/raftwire"
	"github.com/malachi-log/malachi/testbed/testlog"
	"github.com/rs/zerolog"
)

// pipeStream is a raft.StreamLayer over net.Pipe: the server side of
// each dialed pipe goes to accept (wrapped by wrap), the client side to
// the dialer.
type pipeStream struct {
	accept chan net.Conn
	done   chan struct{}
	once   sync.Once
	wrap   func(net.Conn) net.Conn
	server *pipeStream // where Dial delivers
}

func newPipeStream() *pipeStream {
	return &pipeStream{accept: make(chan net.Conn), done: make(chan struct{})}
}

func (p *pipeStream) Accept() (net.Conn, error) {
	select {
	case c := <-p.accept:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

func (p *pipeStream) Close() error   { p.once.Do(func() { close(p.done) }); return nil }
func (p *pipeStream) Addr() net.Addr { return advAddr("pipe") }

func (p *pipeStream) Dial(raft.ServerAddress, time.Duration) (net.Conn, error) {
	a, b := net.Pipe()
	select {
	case p.server.accept <- p.server.wrap(b):
		return a, nil
	case <-p.server.done:
		return nil, net.ErrClosed
	}
}

// gateRig is a raft NetworkTransport that reads through peerConns of
// broker 2 (members 1 at "a1", 2 at "a2"), and a client transport that
// dials it. Every RPC the server transport dispatches goes to got, with
// the snapshot bytes for an InstallSnapshot.
type gateRig struct {
	log    *testlog.Buffer
	client *raft.NetworkTransport
	dialer *pipeStream // the client transport's stream
	server *pipeStream
	got    chan gotRPC
}

type gotRPC struct {
	cmd  any
	data []byte
}

func newGateRig(t *testing.T) *gateRig {
	r := &gateRig{log: &testlog.Buffer{}, got: make(chan gotRPC, 16)}
	cfg := Config{Peers: []Peer{{1, "a1"}, {2, "a2"}}}
	g := newGate(cfg, zerolog.New(r.log), time.Now)
	r.server = newPipeStream()
	r.server.wrap = func(c net.Conn) net.Conn { return newPeerConn(c, 2, g, nil) }
	cli := newPipeStream()
	cli.server = r.server
	r.dialer = cli
	quiet := hclogzero.New(zerolog.New(r.log).Level(zerolog.WarnLevel), "raft")
	srv := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: r.server, MaxPool: 3, Timeout: 5 * time.Second, Logger: quiet})
	r.client = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: cli, MaxPool: 3, Timeout: 5 * time.Second, Logger: quiet})
	t.Cleanup(func() { r.client.Close(); srv.Close() })
	go func() {
		for rpc := range srv.Consumer() {
			g := gotRPC{cmd: rpc.Command}
			var resp any
			switch rpc.Command.(type) {
			case *raft.AppendEntriesRequest:
				resp = &raft.AppendEntriesResponse{Term: 7, Success: true}
			case *raft.RequestVoteRequest:
				resp = &raft.RequestVoteResponse{Term: 7}
			case *raft.RequestPreVoteRequest:
				resp = &raft.RequestPreVoteResponse{Term: 7}
			case *raft.TimeoutNowRequest:
				resp = &raft.TimeoutNowResponse{}
			case *raft.InstallSnapshotRequest:
				g.data, _ = io.ReadAll(rpc.Reader)
				resp = &raft.InstallSnapshotResponse{Term: 7, Success: true}
			}
			r.got <- g
			rpc.Respond(resp, nil)
		}
	}()
	return r
}

// next returns the next RPC the server transport dispatched.
func (r *gateRig) next(t *testing.T) gotRPC {
	t.Helper()
	select {
	case g := <-r.got:
		return g
	case <-time.After(10 * time.Second):
		t.Fatal("the server transport dispatched nothing within 10s")
		return gotRPC{}
	}
}

// TestGatePassesWhatRaftSends sends every RPC type through raft's own
// client transport to a raft transport reading through peerConn: each
// arrives intact (the snapshot bytes too), so the gate parses raft's
// framing as raft does and hands it on verbatim.
func TestGatePassesWhatRaftSends(t *testing.T) {
	r := newGateRig(t)
	ae := raftwire.WithLeader(&raft.AppendEntriesRequest{RPCHeader: raftwire.Header("2", "a2"), Term: 5, PrevLogEntry: 9, PrevLogTerm: 4,
		Entries: []*raft.Log{{Index: 10, Term: 5, Type: raft.LogCommand, Data: []byte("x")}, {Index: 11, Term: 5, Type: raft.LogCommand, Data: bytes.Repeat([]byte("y"), 70000)}}, LeaderCommitIndex: 10}, "a2")
	if err := r.client.AppendEntries("2", "pipe", ae, &raft.AppendEntriesResponse{}); err != nil {
		t.Fatal(err)
	}
	got, ok := r.next(t).cmd.(*raft.AppendEntriesRequest)
	if !ok || got.Term != 5 || got.PrevLogEntry != 9 || len(got.Entries) != 2 || got.Entries[1].Index != 11 || !bytes.Equal(got.Entries[1].Data, ae.Entries[1].Data) {
		t.Fatalf("AppendEntries arrived as %+v", got)
	}
	rv := raftwire.WithCandidate(&raft.RequestVoteRequest{RPCHeader: raftwire.Header("2", "a2"), Term: 6, LastLogIndex: 3, LeadershipTransfer: true}, "a2")
	if err := r.client.RequestVote("2", "pipe", rv, &raft.RequestVoteResponse{}); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.next(t).cmd.(*raft.RequestVoteRequest); !ok || got.Term != 6 || !got.LeadershipTransfer || got.LastLogIndex != 3 {
		t.Fatalf("RequestVote arrived as %+v", got)
	}
	pv := &raft.RequestPreVoteRequest{RPCHeader: raftwire.Header("2", "a2"), Term: 8, LastLogTerm: 2}
	if err := r.client.RequestPreVote("2", "pipe", pv, &raft.RequestPreVoteResponse{}); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.next(t).cmd.(*raft.RequestPreVoteRequest); !ok || got.Term != 8 || got.LastLogTerm != 2 {
		t.Fatalf("RequestPreVote arrived as %+v", got)
	}
	if err := r.client.TimeoutNow("2", "pipe", &raft.TimeoutNowRequest{RPCHeader: raftwire.Header("2", "a2")}, &raft.TimeoutNowResponse{}); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.next(t).cmd.(*raft.TimeoutNowRequest); !ok || string(got.ID) != "2" {
		t.Fatalf("TimeoutNow arrived as %+v", got)
	}
	data := bytes.Repeat([]byte("snapshot"), 100000)
	is := &raft.InstallSnapshotRequest{RPCHeader: raftwire.Header("2", "a2"), SnapshotVersion: 1, Term: 9, LastLogIndex: 40, Size: int64(len(data))}
	if err := r.client.InstallSnapshot("2", "pipe", is, &raft.InstallSnapshotResponse{}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	g := r.next(t)
	if got, ok := g.cmd.(*raft.InstallSnapshotRequest); !ok || got.LastLogIndex != 40 || !bytes.Equal(g.data, data) {
		t.Fatalf("InstallSnapshot arrived as %+v with %d bytes, want %d", g.cmd, len(g.data), len(data))
	}
	if l := r.log.Lines("refused"); len(l) != 0 {
		t.Fatalf("refusals logged for valid RPCs: %q", l)
	}
}

// TestGateRefusesForgedHeaders: broker 2's connection claiming another
// server id, none, an address other than its own, or a non-member, or
// sending an unknown rpc type or garbage, is closed before raft reads the
// RPC; the next valid RPC is the next one raft dispatches.
func TestGateRefusesForgedHeaders(t *testing.T) {
	r := newGateRig(t)
	forged := []struct {
		name string
		send func() error
	}{
		{"claims broker 1", func() error {
			return r.client.AppendEntries("2", "pipe", raftwire.WithLeader(&raft.AppendEntriesRequest{RPCHeader: raftwire.Header("1", "a1"), Term: 5}, "a1"), &raft.AppendEntriesResponse{})
		}},
		{"no server id", func() error {
			return r.client.RequestVote("2", "pipe", raftwire.WithCandidate(&raft.RequestVoteRequest{RPCHeader: raftwire.Header("", ""), Term: 5, LeadershipTransfer: true}, "a2"), &raft.RequestVoteResponse{})
		}},
		{"another address", func() error {
			return r.client.RequestVote("2", "pipe", raftwire.WithCandidate(&raft.RequestVoteRequest{RPCHeader: raftwire.Header("2", "a2"), Term: 5}, "a1"), &raft.RequestVoteResponse{})
		}},
		{"claims a non-member", func() error {
			return r.client.TimeoutNow("2", "pipe", &raft.TimeoutNowRequest{RPCHeader: raftwire.Header("3", "a3")}, &raft.TimeoutNowResponse{})
		}},
		{"snapshot claiming broker 1", func() error {
			is := &raft.InstallSnapshotRequest{RPCHeader: raftwire.Header("1", "a1"), SnapshotVersion: 1, Term: 9, Size: 3}
			return r.client.InstallSnapshot("2", "pipe", is, &raft.InstallSnapshotResponse{}, strings.NewReader("abc"))
		}},
		{"unknown rpc type", func() error { return rawRPC(r, 9, &raft.TimeoutNowRequest{RPCHeader: raftwire.Header("2", "a2")}) }},
		{"garbage", func() error { return rawRPC(r, raftwire.AppendEntries, raftwire.Raw("\xc1\xc1\xc1 not msgpack")) }},
	}
	for _, f := range forged {
		if err := f.send(); err == nil {
			t.Errorf("%s: answered", f.name)
		}
		// The valid RPC that follows is what raft sees next.
		if err := r.client.TimeoutNow("2", "pipe", &raft.TimeoutNowRequest{RPCHeader: raftwire.Header("2", "a2")}, &raft.TimeoutNowResponse{}); err != nil {
			t.Fatalf("after %s: a valid RPC: %v", f.name, err)
		}
		if got, ok := r.next(t).cmd.(*raft.TimeoutNowRequest); !ok || string(got.ID) != "2" {
			t.Fatalf("after %s: raft dispatched %+v", f.name, got)
		}
	}
	// One line per remote per minute: whichever refusal is logged first
	// (each connection is served by its own goroutine), naming broker 2
	// and what its RPC claimed.
	l := r.log.Lines("cluster: raft connection refused")
	if len(l) != 1 || !strings.Contains(l[0], `"peer":"broker 2"`) || !strings.Contains(l[0], `"error":"`) {
		t.Fatalf("refusal lines %q: want one (per remote per minute) naming broker 2 and what its RPC claimed", l)
	}
	if l := r.log.Lines("failed to decode"); len(l) != 0 {
		t.Fatalf("raft logged %q", l)
	}
}

// rawRPC writes rpc type t and req (raftwire.Encode) on a new connection
// and reads the answer.
func rawRPC(r *gateRig, t uint8, req any) error {
	msg, err := raftwire.Encode(t, req)
	if err != nil {
		return err
	}
	c, err := r.dialer.Dial("pipe", time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	go c.Write(msg) // a pipe: the server may close before reading it all
	rpcErr, err := raftwire.ReadAnswer(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	return fmt.Errorf("answered (%q)", rpcErr)
}

// TestGateParsesAfterSnapshot: the req.Size bytes after an InstallSnapshot
// request pass through unparsed, and the RPC after them is checked again:
// a valid one reaches raft, a forged one closes the connection.
func TestGateParsesAfterSnapshot(t *testing.T) {
	r := newGateRig(t)
	data := bytes.Repeat([]byte{raftwire.AppendEntries}, 300000) // snapshot bytes that look like RPC types
	for _, next := range []struct {
		id      string
		answers bool
	}{{"2", true}, {"1", false}} {
		c, err := r.dialer.Dial("pipe", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c) // one reader for both answers: the decoder reads no further than each
		is, err := raftwire.Encode(raftwire.InstallSnapshot, &raft.InstallSnapshotRequest{RPCHeader: raftwire.Header("2", "a2"), SnapshotVersion: 1, Term: 9, Size: int64(len(data))})
		if err != nil {
			t.Fatal(err)
		}
		flushed := make(chan error, 1)
		go func() { _, err := c.Write(append(is, data...)); flushed <- err }() // a pipe: raft reads the snapshot only once dispatched
		if g := r.next(t); !bytes.Equal(g.data, data) {
			t.Fatalf("snapshot bytes: got %d, want %d", len(g.data), len(data))
		}
		var resp raft.InstallSnapshotResponse
		if _, err := raftwire.ReadAnswer(br, &resp); err != nil || !resp.Success {
			t.Fatalf("snapshot response %+v, %v", resp, err)
		}
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		tn, err := raftwire.Encode(raftwire.TimeoutNow, &raft.TimeoutNowRequest{RPCHeader: raftwire.Header(next.id, "a"+next.id)})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, err := c.Write(tn); flushed <- err }()
		_, err = raftwire.ReadAnswer(br, nil)
		<-flushed
		if answered := err == nil; answered != next.answers {
			t.Fatalf("TimeoutNow claiming %s after a snapshot: answered %v (%v), want %v", next.id, answered, err, next.answers)
		}
		if next.answers {
			if got, ok := r.next(t).cmd.(*raft.TimeoutNowRequest); !ok || string(got.ID) != "2" {
				t.Fatalf("raft dispatched %+v", got)
			}
		}
		c.Close()
	}
}

// TestRPCTypesAgree: the gate parses by the same rpc type bytes the tests
// send with (raftwire checks its own against raft's transport).
func TestRPCTypesAgree(t *testing.T) {
	for _, c := range []struct{ gate, wire uint8 }{
		{rpcAppendEntries, raftwire.AppendEntries}, {rpcRequestVote, raftwire.RequestVote}, {rpcInstallSnapshot, raftwire.InstallSnapshot},
		{rpcTimeoutNow, raftwire.TimeoutNow}, {rpcRequestPreVote, raftwire.RequestPreVote},
	} {
		if c.gate != c.wire {
			t.Errorf("the gate reads rpc type %d where raft writes %d", c.gate, c.wire)
		}
	}
}
