// Package stage is the staged fault suite: each stage breaks a running
// cluster of real malachid processes (testbed/harness) one way, waits for
// it to heal and records what it saw. `malachi-demo` (testbed/demo) runs
// the stages as its showcase, and e2e's TestFaultSuite judges them, a
// table row per stage.
//
// The stages are the Rows (stages.go), run in that order: kill, restart,
// delete, truncate, extend, bitflip, latch, decommission, maintenance,
// rebalance, leader, pause, swap, diskfull, readonly, backfill-kill,
// nospare, lost. A row names the stage's run (inject the fault, wait, fill
// the stage's Report), whether Env.Run restarts every dead broker first,
// and what the cluster must have for it to heal (spare brokers, a quorum:
// Options.Infeasible says why not). Every fault is the harness's fault
// catalogue's (testbed/harness/catalogue.go). The disk stages need root
// for a loop-mounted ext4 on one follower's copies directory (its copies
// moved there with the broker stopped), and are skipped, saying why,
// without. The lifecycle stages (decommission,
// maintenance, rebalance) give the operator's commands through the malachi
// CLI when Options.CLI names it, and judge what it prints (operator.go),
// else through the admin API.
//
// The usage loop: the caller starts and loads the cluster, fills an Env
// (Options, the cluster, an auditor, the run's seeded rand, a Sink for
// narration and progress) and calls Baseline once, then Run per stage.
// Within a stage: pick a target; note what to measure (copy sizes, the
// backfill byte counters); inject; poll every Options.Poll until every
// sealed segment is healthy (WaitHealed, or settle for a step beside the
// fault); measure. Passes are read, never sampled: a stage that judges
// heal passes reads the leader's pass history (GET /v1/passes,
// harness.PassFeed) from its fault on, through readPasses, which counts
// each in the stage's Report; one dropped from the history before it was
// read is a gap that fails the stage.
//
// Invariants:
//
//  1. A segment is healthy only when the metadata gives it exactly RF
//     replicas, all on running brokers; each lists its copy sealed, not
//     latched and exactly byte_size plus the footer; Env's own audit of the
//     file passes (CheckCopy); and the broker confirmed the copy, or the
//     leader's latest pass at or after the metadata index at which that
//     state was first seen (Kafka offset commits aside) reports nothing
//     under-replicated, failed or unsettled.
//  2. seconds_to_heal of a kill runs from the moment the broker counts as
//     dead (kill + grace, or the start of an earlier pass that listed it
//     dead) to the first poll that finds every segment healthy.
//  3. A stage that judges more than the heal ends with one verdict
//     (Report.judge: detected, and healed only when detected with no
//     error); one that must see a fault reported on every pass judges it
//     with harness.PassTally (Held, Shortfall).
//  4. A fault that did not happen (not injected) is a Report error and
//     never survived (Report.Missed); a fault the cluster cannot see (a
//     bit flip with no scrubber) is reported not detected.
//  5. The lost stage is healed only when both destroyed segments were
//     reported lost on every pass (ten at least) and acknowledged; only
//     then may a caller set its Destroyed apart from real loss.
//  6. Env.Sealed counts every sealed segment the run made (loaded, written
//     by the disk stages, sealed in a Kafka partition): the final check
//     wants each.
//
// Concurrency: one goroutine runs an Env's stages and waits; Run returns
// an error only when the run cannot go on (interrupted, a broker died on
// its own, a broker that would not restart).
package stage
