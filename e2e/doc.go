// Package e2e tests Malachi heal with real malachid processes on loopback:
// TestMain builds malachid and the malachi CLI once with go build, every
// test starts its own cluster of 3 to 5 brokers on free ports with
// temporary data directories (MALACHI_E2E_DIR chooses where, e.g.
// /dev/shm), drives it through the admin API and the CLI, kills brokers
// with SIGKILL or stops them with SIGTERM, and reads the outcome from the
// replicated metadata, the brokers' copies, their logs, the plugin's
// /status and /metrics, and the leader's heal passes, read from its pass
// history (GET /v1/passes, harness.PassFeed): a check on passes judges
// every pass of its window, in order, and fails on one the history
// dropped; no check samples the last pass. Every cluster runs in secure
// mode unless a test asks for insecure = true. The clusters are testbed/harness's (the same
// harness as the demo's and the fault suite's); it writes a CA, a certificate per
// broker (its certs_dir, outside its data_dir) and the operator and viewer
// clients under the test's directory (pki.CreateLocal), and calls every
// API over mutual TLS as the operator (admin). Faults on a
// copy's file (delete, truncate, extend, bit flip) are testbed/harness's;
// only the latch goes through malachid's POST /v1/faults/latch/{id}.
//
// What each test shows:
//
//   - TestFaultSuite: `malachi-demo` with every stage of testbed/stage
//     (stage.Names) on 5 brokers, the lifecycle stages giving the
//     operator's commands through the malachi CLI, then a table row per
//     stage (its fault, the window it must strike in, what its report must
//     show, what the CLI printed): each injected and healed, nothing lost
//     but the two segments the lost stage destroys.
//   - TestBrokerKilledIsHealed: a killed broker's sealed segments are
//     re-replicated; every live broker's metadata shows exactly one
//     SetSegmentReplicas per affected segment, and exact sealed copies on
//     every new replica.
//   - TestLeaderKilledMidPass: the leader killed while its pass is
//     backfilling; the new leader finishes, no segment gets more commands
//     than it lost replicas (the compare-and-set refuses a replay).
//   - TestRestartClearsLatch: a latched copy with no spare broker stays in
//     its set and is reported no_spare_broker; after a restart the latch is
//     gone and the same copy serves, nothing moved.
//   - TestHealDisabled: with the flag off no heal port is open, no file
//     beyond the broker's own state exists, and a killed broker is never
//     replaced.
//   - TestScrubberReplacesFlippedCopy: a bit flipped in place (same size,
//     invisible to the probe) is found by the scrubber, the copy replaced
//     from an intact replica and deleted.
//   - TestIntegrityPassHealsInPlace: a deleted and a truncated copy are
//     backfilled in place, an extended one settled back to size; no replica
//     set changes.
//   - TestBadConfigExit2: a bad configuration exits 2, naming key and value:
//     no certificates without insecure = true (certs_dir), insecure mode on
//     an address other than loopback, another broker's certificate.
//   - TestHealTime: the performance goal, logged (never asserted):
//     MALACHI_E2E_SEGMENTS=500 for the full size.
//   - TestOutsiderChangesNothing: plaintext, TLS without a certificate,
//     another CA's, an expired and two valid certificates claiming another
//     broker's id send a takeover vote, an AppendEntries committing a
//     replica move and a snapshot zeroing sealed segments to the leader's
//     and a follower's raft port (testbed/raftwire), and garbage to every
//     listener: each reached its port and was refused with its reason
//     logged; leader, terms, metadata and every copy file are unchanged.
//   - TestBrokerWithAnotherCA: a broker restarted with another CA's
//     certificate is reported auth_failed (the first pass that starts once
//     it is up, the metric, `malachi status`), never dead in any pass
//     after: its replicas stay, new segments avoid it, and both sides log
//     why.
//   - TestCertificateRotationSIGHUP: certificates replaced and SIGHUP sent
//     mid-heal: status and fresh TLS connections show the new ones, the
//     heal completes, nothing is refused for credentials.
//   - TestInsecureModeSaysSo: insecure = true is in the log, the metric,
//     /v1/status and `malachi status`.
//   - The network tests (net_test.go, net_leftover_test.go: brokers in
//     network namespaces of their own, root only) each end with every
//     segment at RF 3 and every copy audited. TestNetPartitionLeaves-
//     ReturnedCopies: a follower isolated past the grace delay comes back
//     holding copies reported returned_broker (never in a set, never under
//     COPIES), collected after leftover_delay, and not while a replica of
//     their segment is paused. TestNetPartitionLeavesPartialBackfill: a
//     partition that cuts a throttled backfill leaves a partial copy,
//     reported partial_backfill, never a replica while short, then resumed
//     at its durable end.
//
// Invariants of the harness: every process a test starts is killed in its
// cleanup, even on failure, and a failing test prints the tail of each
// broker's log (raft and Pebble lines left out).
package e2e
