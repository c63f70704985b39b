// Package cluster is the reference control plane: replicated metadata and
// leader election for the brokers, on github.com/hashicorp/raft v1.8.0,
// with a meta.Table as the state machine.
//
// A broker with a control plane of its own does not need this package:
// the heal plugin depends only on a small interface that Node satisfies.
//
// # Usage
//
//	cfg := cluster.DefaultConfig()
//	cfg.ID, cfg.Dir, cfg.Addr = 1, "/var/lib/malachi/1", "10.0.0.1:7000"
//	cfg.Peers = []cluster.Peer{{1, "10.0.0.1:7000"}, {2, "10.0.0.2:7000"}, {3, "10.0.0.3:7000"}}
//	cfg.TLS, err = pki.LoadBroker(certsDir)  // or cfg.Insecure = true, on loopback only
//	n, err := cluster.Open(cfg)
//	defer n.Close()
//	for leading := range n.LeaderCh() {      // the coordinator's loop
//		if !leading { stop the pass; continue }
//		v := n.View()                        // each tick: a *meta.View, shared, free when unchanged
//		_, err := n.Apply(ctx, meta.SetSegmentReplicas{ID: id, Expected: old, Replicas: healed})
//		// errors.Is(err, meta.ErrStaleReplicas): someone changed the set; re-plan.
//		// errors.As(err, &nl) with nl *cluster.NotLeaderError: leadership moved.
//	}
//
// # Storage
//
// Dir/raft-log is a Pebble DB holding raft's log and stable store (we
// chose Pebble over raft-boltdb because raft-boltdb/v2 does not build with
// raft v1.8.0, and because the brokers already run Pebble for their
// confirmation state: one storage engine to operate). Every write is a
// batch committed with pebble.Sync. Dir/raft-snap holds raft's file
// snapshots (two retained), each in the compact format (snapcodec.go:
// a versioned magic, the JSON of a meta.Snapshot without segments, then
// ~25 bytes a segment of varints and prefix-compressed ids, and a CRC32C),
// written from a meta.View one segment at a time and restored one segment
// at a time into a meta.Builder: neither holds the whole encoding or a flat
// copy of the segments. Restore also reads the format before it, the JSON
// of a meta.Snapshot, so snapshots written by earlier releases still load;
// a node of an earlier release cannot read the compact format (upgrade
// every node before a snapshot is sent to one). The header's topics and
// groups (Kafka's committed offsets, meta invariant 11) keys are written
// only when there are some, so a snapshot without them reads as before;
// groups out of order are refused (ErrBadSnapshot). Pebble and raft log
// through the configured zerolog logger, never to stderr.
//
// # Timings
//
// DefaultConfig's timings are the fast loopback ones (heartbeat and
// election timeout 100 ms, leader lease 100 ms, commit 5 ms; a
// 50 ms lease flapped under load, see DefaultLeaderLeaseTimeout): measured on
// this class of machine, an election takes ~0.15 s, a failover ~0.2 s and
// one Apply ~1.4 ms. They suit tests, the demo and one rack. Across racks
// or zones use 1 s / 1 s / 500 ms / 50 ms (hashicorp/raft's defaults) or
// more: the election timeout must stay well above the worst round trip
// plus an fsync, or leadership flaps.
//
// # Transport
//
// With Config.TLS, raft speaks over mutual TLS 1.3 (stream.go): each
// incoming connection is handshaken (5 s deadline) and its certificate
// verified before raft sees it, and each RPC on it is parsed and checked
// by the gate (gate.go) before raft reads it. With Config.Insecure it is
// raft's plain TCP transport, unauthenticated, refused off loopback.
//
// # Invariants
//
//  1. The FSM applies exactly the committed command entries, in log order,
//     once each per node lifetime (raft's guarantee); a node restarted on
//     the same Dir rebuilds its state from the last snapshot plus the log
//     after it, so a command is never applied twice to one state.
//  2. A command the FSM refuses (meta.Table.Apply's error, e.g. a stale
//     compare-and-set) still occupies its index and changes nothing else;
//     its error reaches the proposer through Apply.
//  3. The FSM holds one meta.Table and no copy of its state (the factor
//     too is the table's, read through ReplicationFactor). View()
//     returns a *meta.View of it at one applied index, shared and
//     read-only, the same one while no command applies; what it returned
//     never changes afterwards (copy-on-write). Snapshot() returns the same
//     content as a flat copy, sorted by id, sharing no memory with the
//     node or other callers.
//  4. The replication factor is set once, from Config.ReplicationFactor,
//     by a leader that finds none after a Barrier; it is never overwritten
//     by that mechanism.
//  5. A sealed segment's offsets, byte_size and checksum never change on a
//     node (meta invariant 4): commands that would change them are refused
//     by meta.Table.Apply, and a snapshot that would is refused by Restore
//     (ErrBadSnapshot wrapping meta.ErrSealed), leaving the state as it was.
//  6. Raft is never blocked by this package's consumers: NotifyCh and the
//     observer are drained by the node's own goroutines; LeaderCh keeps
//     only the latest transition.
//  7. With TLS, raft reads an RPC only from a connection whose client
//     certificate chains to the cluster CA and names a broker, only when
//     the RPC header's server id is that broker's, the broker is a member
//     (raft's latest configuration; Config.Peers before raft has one) and
//     every address the RPC advertises is the member's configured one.
//     Anything else closes the connection unread by raft, logged at most
//     once per remote IP per minute. Raft dials only servers whose
//     certificate names the broker the configuration gives that address.
//
// Node.Quorum (quorum.go) says which voters this node heard from within
// three election timeouts, from raft's own traffic only (the leader's
// heartbeat answers, a follower's leader, a candidate's vote answers):
// Quorum.Err is "cluster: no quorum: 2 of 5 voters reachable ..." when
// neither a live leader nor a majority is heard. A write that waits for a
// leader fails with it instead of waiting out its deadline (malachid).
//
// # Concurrency and crash contract
//
// All Node methods are safe for concurrent use. Apply returns only after
// the command is committed by a quorum (fsynced on each) and applied to
// this node's FSM; if it returns ErrLeadershipLost or a context error, the
// command may or may not be committed. A crash loses nothing that Apply
// acknowledged. Close is idempotent; after it, methods return ErrClosed
// or zero values.
//
// Built with -tags invariants (make test does), invariants.go also checks
// after each batch that the table applied nothing past the last command
// entry, and after each Restore that the table is at the snapshot's index
// and keeps every segment the previous state held sealed (invariant 5),
// beside meta's checks of the table itself; it panics naming the segment.
//
// Raft's hclog goes through internal/hclogzero and Pebble's logger through
// internal/pebblelog, each given the host's logger (no component of its
// own): every line names its component (cluster, raft, pebble) once, and
// the broker only as the host's logger names it.
package cluster
