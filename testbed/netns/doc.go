// Package netns places processes on hosts of their own — one Linux network
// namespace per host, on one bridge — and injects network faults between
// them: isolation, partitions, one-way loss, a flapping link, a capped link.
//
// Layout of a Net with n hosts (N: the subnet number the Net claimed,
// 1..250, so several Nets — parallel tests — never collide):
//
//	root namespace ── mlcNr 10.213.N.254/24 (the client: this process, the CLI)
//	                    │ veth
//	namespace mlcN-br:  mlcNR ── bridge mlcNbr ── mlcNb1 … mlcNbn
//	                                                │ veth (one per host)
//	namespace mlcN-h<i>:                          eth0 10.213.N.<i>/24, lo up
//
// The calling process reaches every host directly (the root veth is on the
// bridge's segment), so admin clients and `malachi` subprocesses need no
// namespace switch; a host's processes run under Prefix(i)
// (`nsenter --net=/run/netns/mlcN-h<i> --`: the network namespace only,
// no mount namespace of its own). Do runs a function inside a host's
// namespace (a goroutine locked to an OS thread that setns'd into it;
// sockets it makes stay there).
//
// Faults are nftables tables named mlcf<seq> in the receiving hosts'
// namespaces, dropping on the input hook packets whose source is another
// host: packets vanish as on a real network (the sender sees silence and
// retransmits, never an immediate error), and the client (.254) is never
// cut off. Every fault returns an Undo that removes exactly its own
// tables; faults overlap freely. Cap is a tc tbf on both ends of the
// host's veth. HealAll removes every fault and cap.
//
// Invariants:
//
//  1. Close removes everything New made (namespaces, and with them the
//     veths and the bridge; the nft tables and qdiscs live inside them)
//     and is safe twice; New removes what it made when it fails.
//  2. A Net holds an exclusive flock on /run/malachi-netns/N.lock for its
//     life; the kernel drops it when the process dies, so anything named
//     mlcN-* or mlcN* whose lock is free is a leftover of a killed run and
//     is removed (Cleanup; New runs it first).
//  3. Hosts are numbered from 1 (a cluster's broker ids); 10.213.0.0/16 is
//     used only inside the namespaces and the root veth of a live Net.
//
// Root only, and `ip`, `nft` and `tc` must be installed: Available says
// why not, and callers fall back to loopback.
package netns
