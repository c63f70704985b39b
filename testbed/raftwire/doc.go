// Package raftwire is for tests that speak to a raft port directly,
// without a raft of their own: the cluster package's gate and stream
// tests, and the end-to-end tests that attack a running broker's raft
// port. The broker never imports it.
//
// It writes a request exactly as hashicorp/raft v1.8.0's NetworkTransport
// client does (one rpc type byte, then the msgpack request, then for an
// InstallSnapshot the snapshot bytes), sends it on a plain TCP or a TLS
// connection, and reads what raft writes back (a msgpack error string,
// then the msgpack response), or reports that the server closed the
// connection instead.
//
// The usage loop of a test:
//
//	cfg, err := raftwire.ClientConfig(crt, key)          // who the caller claims to be
//	req := raftwire.Takeover(2, "127.0.0.1:7002")         // what it asks raft
//	answered, err := raftwire.Dialer{TLS: cfg}.Send(addr, raftwire.RequestVote, req, nil, &resp)
//	// err wraps ErrDial: the port was never reached, the test proves nothing
//	// answered false: the server closed the connection; true: raft read it
//
// Invariants:
//
//  1. Encode(typ, req) is byte for byte what raft's client writes for the
//     same request (raftwire_test checks it against raft's own transport).
//     The rpc type constants are raft's, which it does not export.
//  2. Send reports answered only when the server wrote back a raft answer
//     that decodes; a closed connection, a failed handshake, a TLS alert or
//     any bytes that are not msgpack count as not answered.
//  3. Send returns an error wrapping ErrDial when no TCP connection could
//     be made, and ErrStalled when the server neither answered nor closed
//     within the timeout: a refusal is never confused with a port that was
//     not reached.
//
// Concurrency: every function is safe for concurrent use; a Dialer is a
// value.
package raftwire
