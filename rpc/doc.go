// Package rpc is the one RPC layer of Malachi heal: JSON over HTTP, on
// mutual TLS with the cluster's certificates (package pki), used by the
// plugin's control RPC between brokers and by the broker's admin API.
//
// A Server authenticates every request before its handler runs: the peer's
// certificate must chain to the cluster CA (pki.Certs.VerifyPeer) and name
// a role the route allows. A Client presents its own certificate and
// accepts only brokers of the cluster CA. Errors cross the wire as codes
// that decode back to their sentinels (Codes), so errors.Is works on the
// caller's side.
//
// Invariants:
//
//  1. No handler runs for a request whose peer is not authenticated and
//     authorized: the refusal is 401 (no or untrusted certificate) or 403
//     (a role the route does not allow), its message names what was
//     missing or wrong, and nothing else happens.
//  2. Insecure mode (Certs nil) exists only when the caller asks for it:
//     every peer is then Identity{Name: "insecure"} and passes every role.
//  3. Request bodies are bounded (MaxBody) and decoded strictly: one JSON
//     object, no unknown fields, nothing after it.
//  4. Refusals are logged at error level, at most once per remote host per
//     minute (package ratelog).
package rpc
