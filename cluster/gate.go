package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/internal/ratelog"
	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// The rpc type bytes of hashicorp/raft v1.8.0's NetworkTransport
// (net_transport.go, unexported there): each RPC on a connection is one
// of these bytes followed by the msgpack request.
const (
	rpcAppendEntries uint8 = iota
	rpcRequestVote
	rpcInstallSnapshot
	rpcTimeoutNow
	rpcRequestPreVote
)

// gate decides which RPCs raft may read from an authenticated peer, and
// logs every refusal, once per remote IP per minute.
type gate struct {
	log   zerolog.Logger
	now   func() time.Time
	limit ratelog.Limiter

	peers []raft.Server             // Config.Peers: the members until raft knows a configuration
	raft  atomic.Pointer[raft.Raft] // set once raft runs
}

func newGate(cfg Config, log zerolog.Logger, now func() time.Time) *gate {
	g := &gate{log: log, now: now}
	for _, p := range cfg.Peers {
		g.peers = append(g.peers, raft.Server{Suffrage: raft.Voter, ID: serverID(p.ID), Address: raft.ServerAddress(p.Addr)})
	}
	return g
}

// servers are the members: raft's latest configuration, or Config.Peers
// while raft has none.
func (g *gate) servers() []raft.Server {
	if r := g.raft.Load(); r != nil {
		if f := r.GetConfiguration(); f.Error() == nil {
			if s := f.Configuration().Servers; len(s) > 0 {
				return s
			}
		}
	}
	return g.peers
}

// member returns the address of member id.
func (g *gate) member(id raft.ServerID) (string, bool) {
	for _, s := range g.servers() {
		if s.ID == id {
			return string(s.Address), true
		}
	}
	return "", false
}

// memberAt returns the broker the configuration gives addr to.
func (g *gate) memberAt(addr string) (meta.BrokerID, bool) {
	for _, s := range g.servers() {
		if string(s.Address) == addr {
			id, err := meta.ParseBrokerID(string(s.ID))
			return id, err == nil
		}
	}
	return 0, false
}

// check admits req, an RPC read from a connection whose certificate names
// broker peer, when its header's server id is that broker's, the broker
// is a member, and every address it advertises (the header's, and the
// legacy Leader or Candidate) is the member's configured address.
func (g *gate) check(peer meta.BrokerID, req any) error {
	var h raft.RPCHeader
	var legacy []byte
	// The legacy address fields are deprecated but still sent, and raft
	// still reads them when the header's Addr is empty: check them too.
	switch r := req.(type) {
	case *raft.AppendEntriesRequest:
		//lint:ignore SA1019 raft reads it when Addr is empty
		h, legacy = r.RPCHeader, r.Leader
	case *raft.RequestVoteRequest:
		//lint:ignore SA1019 raft reads it when Addr is empty
		h, legacy = r.RPCHeader, r.Candidate
	case *raft.InstallSnapshotRequest:
		h, legacy = r.RPCHeader, r.Leader
	case *raft.RequestPreVoteRequest:
		h = r.RPCHeader
	case *raft.TimeoutNowRequest:
		h = r.RPCHeader
	default:
		return fmt.Errorf("request type %T", req)
	}
	want := serverID(peer)
	if len(h.ID) == 0 {
		return fmt.Errorf("the certificate names broker %d, the RPC header names no server id", peer)
	}
	if raft.ServerID(h.ID) != want {
		return fmt.Errorf("the certificate names broker %d, the RPC claims server id %q", peer, h.ID)
	}
	addr, ok := g.member(want)
	if !ok {
		return fmt.Errorf("broker %d is not a member of the raft configuration", peer)
	}
	for _, a := range [][]byte{h.Addr, legacy} {
		if len(a) > 0 && string(a) != addr {
			return fmt.Errorf("broker %d advertises address %q, the raft configuration has %q", peer, a, addr)
		}
	}
	return nil
}

// refuse logs that a connection from remote was refused, at error level,
// at most once per remote IP per minute (with the count not logged
// since). peer names the certificate's holder when known.
func (g *gate) refuse(remote net.Addr, peer string, err error) {
	key := remote.String()
	if host, _, e := net.SplitHostPort(key); e == nil {
		key = host
	}
	ok, suppressed := g.limit.Allow(key, g.now())
	if !ok {
		return
	}
	e := g.log.Error().Str("remote", remote.String())
	if peer != "" {
		e = e.Str("peer", peer)
	}
	if suppressed > 0 {
		e = e.Int("suppressed", suppressed)
	}
	e.Err(err).Msg("cluster: raft connection refused")
}

// peerConn is an authenticated raft connection that lets raft read only
// the RPCs the gate admits, byte for byte as the peer sent them. Read
// parses the next RPC itself (the rpc type byte, then the msgpack request
// decoded as raft decodes it, through a recorder that keeps the bytes
// consumed), checks it, and only then hands raft the recorded bytes;
// after an InstallSnapshot request it passes the req.Size snapshot bytes
// through unparsed (raft always reads all of them, since raft#212). A
// refused RPC closes the connection and Read returns io.EOF, which raft
// does not log, so the RPC is never dispatched. Writes (raft's
// responses) go straight through.
//
// Read is called by one goroutine at a time (raft's connection handler,
// or its main loop while reading a snapshot, never both).
type peerConn struct {
	net.Conn // the TLS connection
	peer     meta.BrokerID
	gate     *gate
	onClose  func(*peerConn)

	rec   recorder
	dec   *codec.Decoder
	ready []byte // admitted bytes raft has not read yet
	raw   int64  // snapshot bytes still to pass through
	err   error  // sticky, once the connection ends

	closeOnce sync.Once
}

func newPeerConn(c net.Conn, peer meta.BrokerID, g *gate, onClose func(*peerConn)) *peerConn {
	p := &peerConn{Conn: c, peer: peer, gate: g, onClose: onClose}
	p.rec.r = bufio.NewReaderSize(c, 64<<10)
	p.dec = codec.NewDecoder(&p.rec, &codec.MsgpackHandle{})
	return p
}

// Read implements net.Conn for raft (see peerConn).
func (c *peerConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.ready) == 0 && c.raw == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if err := c.next(); err != nil {
			c.err = err
			return 0, err
		}
	}
	if len(c.ready) > 0 {
		n := copy(p, c.ready)
		c.ready = c.ready[n:]
		return n, nil
	}
	if int64(len(p)) > c.raw {
		p = p[:c.raw]
	}
	n, err := c.rec.r.Read(p)
	c.raw -= int64(n)
	return n, err
}

// Close implements net.Conn.
func (c *peerConn) Close() error {
	c.closeOnce.Do(func() {
		if c.onClose != nil {
			c.onClose(c)
		}
	})
	return c.Conn.Close()
}

// maxKeep is the largest recording buffer kept between RPCs.
const maxKeep = 1 << 20

// next reads, decodes and checks the next RPC, leaving its bytes in
// c.ready. It returns io.EOF when the connection ended between RPCs or
// the RPC was refused (then logged and the connection closed).
func (c *peerConn) next() error {
	if cap(c.rec.buf) > maxKeep {
		c.rec.buf = nil
	}
	c.rec.buf, c.rec.err = c.rec.buf[:0], nil
	t, err := c.rec.ReadByte()
	if err != nil {
		return io.EOF // closed between RPCs: the usual end of a connection
	}
	req, err := c.decode(t)
	if err != nil && c.rec.err != nil {
		// The connection ended inside an RPC (a crash, a closed node):
		// nothing reached raft, nothing to refuse.
		c.Conn.Close()
		c.gate.log.Debug().Str("remote", c.RemoteAddr().String()).Err(c.rec.err).Msg("cluster: raft connection ended inside an RPC")
		return io.EOF
	}
	if err == nil {
		err = c.gate.check(c.peer, req)
	}
	if err != nil {
		// Logged before the close, so that a peer that saw the close can
		// count on the line being there.
		c.gate.refuse(c.RemoteAddr(), fmt.Sprintf("broker %d", c.peer), err)
		c.Conn.Close()
		return io.EOF
	}
	c.ready = c.rec.buf
	if s, ok := req.(*raft.InstallSnapshotRequest); ok && s.Size > 0 {
		c.raw = s.Size
	}
	return nil
}

// decode decodes the request of rpc type t, as raft's handleCommand does.
func (c *peerConn) decode(t uint8) (any, error) {
	var req any
	switch t {
	case rpcAppendEntries:
		req = &raft.AppendEntriesRequest{}
	case rpcRequestVote:
		req = &raft.RequestVoteRequest{}
	case rpcInstallSnapshot:
		req = &raft.InstallSnapshotRequest{}
	case rpcTimeoutNow:
		req = &raft.TimeoutNowRequest{}
	case rpcRequestPreVote:
		req = &raft.RequestPreVoteRequest{}
	default:
		return nil, fmt.Errorf("unknown rpc type %d", t)
	}
	if err := c.dec.Decode(req); err != nil {
		return nil, fmt.Errorf("decode %T: %w", req, err)
	}
	return req, nil
}

// recorder reads from r and keeps every byte consumed in buf, so that
// what the decoder parsed can be handed on verbatim. It is an
// io.ByteScanner, so the msgpack decoder peeks with UnreadByte and never
// reads ahead of the value it decodes (as raft's, over a bufio.Reader).
type recorder struct {
	r   *bufio.Reader
	buf []byte
	err error // the last read error, if any
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	if err != nil {
		r.err = err
	}
	return n, err
}

func (r *recorder) ReadByte() (byte, error) {
	b, err := r.r.ReadByte()
	if err != nil {
		r.err = err
		return b, err
	}
	r.buf = append(r.buf, b)
	return b, nil
}

func (r *recorder) UnreadByte() error {
	if len(r.buf) == 0 {
		return errors.New("cluster: unread before any read")
	}
	if err := r.r.UnreadByte(); err != nil {
		return err
	}
	r.buf = r.buf[:len(r.buf)-1]
	return nil
}
