// Package demo is `malachi demo`: it starts a cluster of real malachid
// processes (testbed/harness), loads sealed segments through POST
// /v1/load, breaks the cluster stage by stage and reports how it healed.
// cmd/malachi uses ParseFlags and Run alone.
//
// The stages are the rows of stageRows (stages.go), run in that order:
// kill, restart, delete, truncate, extend, bitflip, latch, decommission,
// maintenance, rebalance, leader, pause, swap, diskfull, readonly,
// backfill-kill, nospare, lost. A row names the stage's run (inject the
// fault, wait, fill the stage's record), whether the runner restarts
// every dead broker first, and what the cluster must have for it to heal
// (spare brokers, a quorum); a default stage the cluster cannot heal is
// dropped with its reason in the report, one asked for with --faults is
// refused. One runner (stage) makes each stage's record, revives and
// times it; a stage that judges more than the heal itself ends with one
// verdict (FaultReport.judge over its problems: detected, and healed
// only when detected with no error); a stage that must see a fault
// reported on every pass judges it with harness.PassTally (Held,
// Shortfall); every wait for a healthy cluster is harness.WaitHealed,
// through waitHealed (or settle, for a step beside the fault); every pass
// a stage reads goes through readPasses, which counts it in the stage's
// record, and a stage that judges passes between polls reads them with
// watchPasses. Every fault is the harness's fault catalogue's
// (testbed/harness/catalogue.go). The disk stages need root for a
// loop-mounted ext4 on one follower's copies directory, and are skipped,
// saying why, without. --nemesis random replaces the stages with
// testbed/nemesis, the demo its Env (nemesis.go); --clients N runs Kafka
// producers (testbed/kafkaload) through every stage and checks every
// acknowledged record at the end (clients.go).
//
// The usage loop of a stage: pick a target; note what to measure (copy
// sizes, the backfill byte counters); inject; poll every --poll until every
// sealed segment is healthy; measure. Passes are read, never sampled: a
// stage that judges heal passes reads the leader's pass history (GET
// /v1/passes, harness.PassFeed) from its fault on, and a pass dropped
// from the history before it was read is a gap that fails the stage.
//
// Invariants:
//
//  1. A segment is healthy only when the metadata gives it exactly RF
//     replicas, all on running brokers; each lists its copy sealed, not
//     latched and exactly byte_size plus the footer; the demo's own audit
//     of the file passes; and the broker confirmed the copy, or the
//     leader's latest pass at or after the metadata index reports nothing
//     under-replicated, failed or unsettled.
//  2. seconds_to_heal of a kill runs from the moment the broker counts as
//     dead (kill + grace, or the start of an earlier pass that listed it
//     dead) to the first poll that finds every segment healthy.
//  3. The exit status is 0 only when every stage that ran healed and every
//     segment is healthy at the end; a stage that did not heal stops the
//     demo. A fault that did not happen (notInjected) fails the run, never
//     counts as survived; a fault the cluster cannot see (a bit flip with
//     no scrubber) is reported not detected.
//  4. Destroyed on purpose is not data loss only when the lost stage saw
//     both segments reported lost on every pass (ten at least) and
//     acknowledged; otherwise they count as any loss.
//  5. With --clients the run is HEALED only when every acknowledged record
//     was read back at its offset, once, in order.
//
// Concurrency and crash contract: the brokers are the demo's children, each
// in its own process group, stopped on every exit path (SIGINT, SIGTERM,
// SIGHUP included) unless --keep, and killed by the kernel if the CLI dies.
// The cluster's directory is removed after a healthy run the demo created,
// kept and named in the report otherwise. A bad command line wraps
// ErrUsage, -h ErrHelp.
package demo
