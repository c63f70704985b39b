// Package pki is the cluster's identity: a cluster CA, a certificate per
// broker that names its broker id, and client certificates for people and
// tools that name a role. It writes them (the `malachi cert` commands),
// loads a certs directory, builds the TLS configs every listener and dialer
// uses, reloads them from disk on demand (SIGHUP), and signs and verifies
// catch-up tickets with broker keys.
//
// A certs directory holds, by the names cockroach uses for the same roles:
//
//	ca.crt                  the cluster CA certificate (every holder)
//	ca.key                  the CA key (only where certificates are made)
//	broker.crt, broker.key  a broker's certificate and key
//	client.NAME.crt/.key    a client's certificate and key
//
// Invariants:
//
//  1. Who a peer is comes only from a certificate that chains to the
//     cluster CA: its URI SAN malachi://broker/ID, malachi://operator/NAME,
//     malachi://viewer/NAME or malachi://client/NAME (IdentityOf). A
//     certificate without exactly one such SAN names nobody and is refused.
//  2. Broker certificates carry server and client authentication; client
//     certificates only client authentication, so a person's certificate
//     cannot serve as a broker.
//  3. Every TLS config is TLS 1.3 only. Servers built by ServerConfig ask
//     for a client certificate and verify any that is given against the CA;
//     the caller decides what a connection without one may do (the HTTP
//     layer answers 401, raft's listener closes it).
//  4. Keys are written 0600 with O_EXCL: an existing file is never
//     overwritten.
//  5. Reload replaces the CA pool and the own certificate together, or
//     not at all: a failed reload keeps serving the material it had.
//     Connections made after a successful reload use the new material.
package pki
