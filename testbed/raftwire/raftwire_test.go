package raftwire

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

// recordConn is a connection that keeps what raft's client writes and
// serves a prepared answer.
type recordConn struct {
	net.Conn // nil: only the methods below are called
	wrote    bytes.Buffer
	answer   *bytes.Reader
}

func (c *recordConn) Write(p []byte) (int, error)      { return c.wrote.Write(p) }
func (c *recordConn) Read(p []byte) (int, error)       { return c.answer.Read(p) }
func (c *recordConn) Close() error                     { return nil }
func (c *recordConn) SetDeadline(time.Time) error      { return nil }
func (c *recordConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordConn) SetWriteDeadline(time.Time) error { return nil }

// recordStream is a raft.StreamLayer whose Dial returns next.
type recordStream struct{ next *recordConn }

func (s *recordStream) Accept() (net.Conn, error) { select {} }
func (s *recordStream) Close() error              { return nil }
func (s *recordStream) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (s *recordStream) Dial(raft.ServerAddress, time.Duration) (net.Conn, error) {
	return s.next, nil
}

// answer is raft's answer to an RPC: no error, then resp.
func answer(t *testing.T, resp any) *bytes.Reader {
	t.Helper()
	var b bytes.Buffer
	enc := codec.NewEncoder(&b, &codec.MsgpackHandle{})
	if err := enc.Encode(""); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(resp); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b.Bytes())
}

// TestEncodeIsRaftsBytes: for every RPC type, Encode writes what raft's
// own NetworkTransport client writes for the same request (invariant 1),
// and ReadAnswer reads what raft's client reads.
func TestEncodeIsRaftsBytes(t *testing.T) {
	s := &recordStream{}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: s, MaxPool: 0, Timeout: time.Second,
		Logger: nil})
	defer tr.Close()
	snap := bytes.Repeat([]byte("snapshot"), 1000)
	ae := WithLeader(&raft.AppendEntriesRequest{RPCHeader: Header("2", "a2"), Term: 5, PrevLogEntry: 9, PrevLogTerm: 4, LeaderCommitIndex: 10,
		Entries: []*raft.Log{{Index: 10, Term: 5, Type: raft.LogCommand, Data: []byte("x"), AppendedAt: time.Unix(1700000000, 5)}}}, "a2")
	is := &raft.InstallSnapshotRequest{RPCHeader: Header("2", "a2"), SnapshotVersion: 1, Term: 9, Leader: []byte("a2"), LastLogIndex: 40,
		Configuration: []byte{1, 2}, Size: int64(len(snap))}
	for _, tc := range []struct {
		name string
		typ  uint8
		req  any
		tail []byte
		resp any
		call func() error
	}{
		{"AppendEntries", AppendEntries, ae, nil, &raft.AppendEntriesResponse{Term: 5, LastLog: 10, Success: true}, func() error {
			return tr.AppendEntries("2", "a2", ae, &raft.AppendEntriesResponse{})
		}},
		{"RequestVote", RequestVote, Takeover(2, "a2"), nil, &raft.RequestVoteResponse{Term: 3}, func() error {
			return tr.RequestVote("2", "a2", Takeover(2, "a2"), &raft.RequestVoteResponse{})
		}},
		{"InstallSnapshot", InstallSnapshot, is, snap, &raft.InstallSnapshotResponse{Term: 9, Success: true}, func() error {
			return tr.InstallSnapshot("2", "a2", is, &raft.InstallSnapshotResponse{}, bytes.NewReader(snap))
		}},
		{"TimeoutNow", TimeoutNow, &raft.TimeoutNowRequest{RPCHeader: Header("2", "a2")}, nil, &raft.TimeoutNowResponse{}, func() error {
			return tr.TimeoutNow("2", "a2", &raft.TimeoutNowRequest{RPCHeader: Header("2", "a2")}, &raft.TimeoutNowResponse{})
		}},
		{"RequestPreVote", RequestPreVote, &raft.RequestPreVoteRequest{RPCHeader: Header("2", "a2"), Term: 8}, nil, &raft.RequestPreVoteResponse{Term: 8}, func() error {
			return tr.RequestPreVote("2", "a2", &raft.RequestPreVoteRequest{RPCHeader: Header("2", "a2"), Term: 8}, &raft.RequestPreVoteResponse{})
		}},
	} {
		s.next = &recordConn{answer: answer(t, tc.resp)}
		if err := tc.call(); err != nil {
			t.Fatalf("%s: raft's client: %v", tc.name, err)
		}
		want, err := Encode(tc.typ, tc.req)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, tc.tail...)
		if got := s.next.wrote.Bytes(); !bytes.Equal(got, want) {
			t.Errorf("%s: raft wrote %d bytes %x\nEncode gives %d bytes %x", tc.name, len(got), got, len(want), want)
		}
		var got raft.RequestVoteResponse
		if tc.typ == RequestVote {
			if rpcErr, err := ReadAnswer(answer(t, tc.resp), &got); err != nil || rpcErr != "" || got.Term != 3 {
				t.Errorf("ReadAnswer: %+v %q %v", got, rpcErr, err)
			}
		}
	}
	if _, err := ReadAnswer(bytes.NewReader([]byte("\x15\x03\x03 a TLS alert")), nil); !errors.Is(err, ErrNoAnswer) {
		t.Errorf("ReadAnswer of a TLS alert: %v, want ErrNoAnswer", err)
	}
}

// TestSendToRaft: raft's own TCP transport answers what Send writes, the
// snapshot bytes arrive, and an unknown rpc type is closed, not answered.
func TestSendToRaft(t *testing.T) {
	tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	snaps := make(chan []byte, 1)
	go func() {
		for rpc := range tr.Consumer() {
			switch r := rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Term: r.Term + 1}, nil)
			case *raft.AppendEntriesRequest:
				rpc.Respond(&raft.AppendEntriesResponse{Term: 7, LastLog: 42}, nil)
			case *raft.InstallSnapshotRequest:
				b, _ := io.ReadAll(rpc.Reader)
				snaps <- b
				rpc.Respond(&raft.InstallSnapshotResponse{Term: 7}, nil)
			}
		}
	}()
	addr := string(tr.LocalAddr())
	var vote raft.RequestVoteResponse
	if ok, err := (Dialer{}).Send(addr, RequestVote, StaleVote(2, "a2"), nil, &vote); !ok || err != nil || vote.Term != 2 {
		t.Fatalf("a vote: answered %v, %v, %+v; want answered with term 2", ok, err, vote)
	}
	var app raft.AppendEntriesResponse
	if ok, err := (Dialer{}).Send(addr, AppendEntries, StaleAppend(2, "a2"), nil, &app); !ok || err != nil || app.LastLog != 42 {
		t.Fatalf("an append: answered %v, %v, %+v", ok, err, app)
	}
	data := bytes.Repeat([]byte{AppendEntries}, 100000)
	is := &raft.InstallSnapshotRequest{RPCHeader: Header("2", "a2"), SnapshotVersion: 1, Term: 9, Size: int64(len(data))}
	if ok, err := (Dialer{}).Send(addr, InstallSnapshot, is, data, &raft.InstallSnapshotResponse{}); !ok || err != nil {
		t.Fatalf("a snapshot: answered %v, %v", ok, err)
	}
	if got := <-snaps; !bytes.Equal(got, data) {
		t.Fatalf("snapshot bytes: %d arrived, %d sent", len(got), len(data))
	}
	if ok, err := (Dialer{}).Send(addr, 9, Raw("\x80"), nil, nil); ok || err != nil {
		t.Fatalf("an unknown rpc type: answered %v, %v; want closed", ok, err)
	}
}

// TestSendSaysWhatHappened: a port nobody listens on is ErrDial, a server
// that closes at once or refuses the TLS handshake is not answered, one
// that holds the connection is ErrStalled (invariants 2 and 3).
func TestSendSaysWhatHappened(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := ln.Addr().String()
	ln.Close()
	if ok, err := (Dialer{}).Send(free, RequestVote, StaleVote(1, "a"), nil, nil); ok || !errors.Is(err, ErrDial) {
		t.Errorf("a closed port: %v, %v; want ErrDial", ok, err)
	}
	serve := func(handle func(net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go handle(c)
			}
		}()
		return ln.Addr().String()
	}
	closer := serve(func(c net.Conn) { c.Close() })
	if ok, err := (Dialer{}).Send(closer, RequestVote, StaleVote(1, "a"), nil, nil); ok || err != nil {
		t.Errorf("a server that closes: %v, %v; want not answered, no error", ok, err)
	}
	hold := make(chan struct{})
	defer close(hold)
	holder := serve(func(c net.Conn) { <-hold; c.Close() })
	if ok, err := (Dialer{Timeout: 100 * time.Millisecond}).Send(holder, RequestVote, StaleVote(1, "a"), nil, nil); ok || !errors.Is(err, ErrStalled) {
		t.Errorf("a server that holds: %v, %v; want ErrStalled", ok, err)
	}
	l, err := pki.CreateLocal(t.TempDir(), []meta.BrokerID{1}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.LoadBroker(l.BrokerDir(1))
	if err != nil {
		t.Fatal(err)
	}
	srv := certs.ServerConfig()
	srv.ClientAuth = tls.RequireAnyClientCert
	strict := serve(func(c net.Conn) {
		tc := tls.Server(c, srv)
		defer tc.Close()
		if tc.Handshake() == nil {
			tc.Write([]byte("\xa0")) // an empty error string: an answer
		}
	})
	anon, err := ClientConfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := (Dialer{TLS: anon}).Send(strict, RequestVote, StaleVote(1, "a"), nil, nil); ok || err != nil {
		t.Errorf("TLS without a certificate to a server that requires one: %v, %v; want not answered", ok, err)
	}
	mine, err := ClientConfig(filepath.Join(l.BrokerDir(1), pki.BrokerCert), filepath.Join(l.BrokerDir(1), pki.BrokerKey))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := (Dialer{TLS: mine}).Send(strict, RequestVote, StaleVote(1, "a"), nil, nil); !ok || err != nil {
		t.Errorf("TLS with a certificate: %v, %v; want the server's bytes read as an answer", ok, err)
	}
}
