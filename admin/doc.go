// Package admin is the typed client of a broker's admin API
// (the routes package broker's doc.go lists) and of a plugin's rpc_listen (/metrics),
// over the one RPC layer (rpc). The operator CLI, the process
// harness (testbed/harness), the demo and the e2e tests all call brokers
// through it.
//
// Usage:
//
//	rc := rpc.NewClient(certs, admin.Codes, 30*time.Second) // certs nil: insecure
//	c := admin.New("127.0.0.1:7001", rc, certs == nil)
//	h, err := c.Health(ctx)
//
// Invariants:
//
//  1. Every error names the broker's address and the request, and wraps
//     exactly one of ErrUnreachable (no answer) or ErrRefused (an answer
//     that is an error, or a refused or untrusted certificate); a decoding
//     failure wraps neither.
//  2. ErrUnavailable (no leader, no quorum, a leader change, a deadline on
//     the broker's side) is always wrapped with ErrRefused: a retry may
//     succeed. Its text has no "malachi:" of its own (ErrRefused's has).
//
// A Client holds no state of its own beyond its address; it is safe for
// concurrent use as its rpc.Client is.
package admin
