package raftwire

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
)

// The rpc type bytes of hashicorp/raft v1.8.0's NetworkTransport
// (net_transport.go, unexported there).
const (
	AppendEntries uint8 = iota
	RequestVote
	InstallSnapshot
	TimeoutNow
	RequestPreVote
)

// Raw is a request Encode and Send write as is, not msgpack-encoded
// (garbage, a truncated request).
type Raw []byte

// Handle is the msgpack handle raft's client encodes with
// (msgpackUseNewTimeFormat false).
func Handle() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.TimeNotBuiltin = true
	return h
}

// Encode returns rpc type typ followed by req encoded as raft's client
// encodes it (or req itself when it is Raw).
func Encode(typ uint8, req any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte(typ)
	if r, ok := req.(Raw); ok {
		b.Write(r)
		return b.Bytes(), nil
	}
	if err := codec.NewEncoder(&b, Handle()).Encode(req); err != nil {
		return nil, fmt.Errorf("raftwire: encode %T: %w", req, err)
	}
	return b.Bytes(), nil
}

// ReadAnswer reads raft's answer to one RPC from r: the error string,
// returned as rpcErr, then the response, decoded into resp (nil: not
// decoded). An error wrapping ErrNoAnswer means r did not start with a
// raft answer; any other error, that the response did not decode into
// resp.
func ReadAnswer(r io.Reader, resp any) (rpcErr string, err error) {
	dec := codec.NewDecoder(r, &codec.MsgpackHandle{})
	if err := dec.Decode(&rpcErr); err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoAnswer, err)
	}
	if resp != nil {
		if err := dec.Decode(resp); err != nil {
			return rpcErr, fmt.Errorf("raftwire: decode the answer into %T: %w", resp, err)
		}
	}
	return rpcErr, nil
}

// Errors of Send.
var (
	// ErrDial: no TCP connection could be made; nothing was sent.
	ErrDial = errors.New("raftwire: no TCP connection")
	// ErrStalled: the server neither answered nor closed the connection
	// within the timeout.
	ErrStalled = errors.New("raftwire: neither answered nor closed")
	// ErrNoAnswer: what the server wrote back is not a raft answer.
	ErrNoAnswer = errors.New("raftwire: not a raft answer")
)

// DefaultTimeout bounds a Send whose Dialer gives none.
const DefaultTimeout = 10 * time.Second

// Dialer says how Send connects. The zero value dials plain TCP from any
// local address, with DefaultTimeout.
type Dialer struct {
	// Local is the local address to dial from (nil: any). Distinct
	// loopback sources tell a server's per-address refusal logs apart.
	Local net.Addr
	// TLS is the client config (nil: plain TCP). The handshake runs
	// before anything is written.
	TLS *tls.Config
	// Timeout bounds the whole exchange (0: DefaultTimeout).
	Timeout time.Duration
}

// Send connects to addr, writes Encode(typ, req) then tail (an
// InstallSnapshot's bytes), and reports whether raft answered, decoding
// the response into resp (nil: not decoded). answered is false when the
// server closed the connection (or refused the handshake, or wrote
// something that is not a raft answer) instead. err wraps ErrDial when no
// TCP connection was made, ErrStalled when neither happened within the
// timeout; it is also set when req cannot be encoded or a raft answer
// does not decode into resp.
func (d Dialer) Send(addr string, typ uint8, req any, tail []byte, resp any) (answered bool, err error) {
	msg, err := Encode(typ, req)
	if err != nil {
		return false, err
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	nd := net.Dialer{Timeout: timeout, LocalAddr: d.Local}
	raw, err := nd.Dial("tcp", addr)
	if err != nil {
		return false, fmt.Errorf("%w to %s: %w", ErrDial, addr, err)
	}
	defer raw.Close()
	if err := raw.SetDeadline(time.Now().Add(timeout)); err != nil {
		return false, fmt.Errorf("raftwire: %s: %w", addr, err)
	}
	var c net.Conn = raw
	if d.TLS != nil {
		tc := tls.Client(raw, d.TLS)
		if err := tc.Handshake(); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return false, fmt.Errorf("%w: %s: the TLS handshake within %v", ErrStalled, addr, timeout)
			}
			return false, nil // refused in the handshake
		}
		c = tc
	}
	w := bufio.NewWriter(c)
	w.Write(msg)
	w.Write(tail)
	_ = w.Flush() // the server may have closed already: the read says so
	if tcp, ok := raw.(*net.TCPConn); ok && d.TLS == nil {
		_ = tcp.CloseWrite() // the server sees the end at once
	}
	br := bufio.NewReader(c)
	if _, err := br.Peek(1); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false, fmt.Errorf("%w: %s within %v", ErrStalled, addr, timeout)
		}
		return false, nil // closed without a byte
	}
	switch _, err := ReadAnswer(br, resp); {
	case errors.Is(err, ErrNoAnswer):
		return false, nil // not raft speaking (a TLS alert to a plaintext client)
	case err != nil:
		return true, fmt.Errorf("raftwire: %s: %w", addr, err)
	}
	return true, nil
}

// ClientConfig is a caller's TLS 1.3 client config that presents the
// certificate and key in files crt and key (none when crt is "") and
// trusts any server: a test plays whoever it likes, the server decides.
func ClientConfig(crt, key string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
	if crt != "" {
		p, err := tls.LoadX509KeyPair(crt, key)
		if err != nil {
			return nil, fmt.Errorf("raftwire: client pair %s: %w", crt, err)
		}
		cfg.Certificates = []tls.Certificate{p}
	}
	return cfg, nil
}

// Header is an RPC header claiming server id at addr, at raft's newest
// protocol version.
func Header(id, addr string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)}
}

// WithLeader sets the deprecated Leader address, which raft still sends
// and reads when the header's Addr is empty.
func WithLeader(r *raft.AppendEntriesRequest, addr string) *raft.AppendEntriesRequest {
	//lint:ignore SA1019 raft still sends it, and reads it when Addr is empty
	r.Leader = []byte(addr)
	return r
}

// WithCandidate sets the deprecated Candidate address, which raft still
// sends and reads when the header's Addr is empty.
func WithCandidate(r *raft.RequestVoteRequest, addr string) *raft.RequestVoteRequest {
	//lint:ignore SA1019 raft still sends it, and reads it when Addr is empty
	r.Candidate = []byte(addr)
	return r
}

// Takeover is the RequestVote from broker id at addr that, read by raft,
// deposes a leader (LeadershipTransfer skips raft's check for a live
// leader) and leaves the cluster at the last term, where no leader can
// ever be elected again.
func Takeover(id meta.BrokerID, addr string) *raft.RequestVoteRequest {
	return WithCandidate(&raft.RequestVoteRequest{RPCHeader: Header(id.String(), addr), Term: math.MaxUint64,
		LastLogIndex: math.MaxUint64, LastLogTerm: math.MaxUint64, LeadershipTransfer: true}, addr)
}

// StaleVote is a harmless RequestVote from broker id at addr (term 1,
// older than any running cluster's): raft refuses it and answers with its
// current term.
func StaleVote(id meta.BrokerID, addr string) *raft.RequestVoteRequest {
	return WithCandidate(&raft.RequestVoteRequest{RPCHeader: Header(id.String(), addr), Term: 1}, addr)
}

// StaleAppend is a harmless AppendEntries from broker id at addr (term 1):
// raft ignores it and answers with its current term and last log index.
func StaleAppend(id meta.BrokerID, addr string) *raft.AppendEntriesRequest {
	return WithLeader(&raft.AppendEntriesRequest{RPCHeader: Header(id.String(), addr), Term: 1}, addr)
}
