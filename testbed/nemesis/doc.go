// Package nemesis is the randomized nemesis: random schedules of
// overlapping faults, drawn from a seed, run against a cluster of real
// malachid processes (testbed/harness) while a writer loads segments, and
// a Jepsen-style checker that judges what was observed. `malachi-demo
// --nemesis random` (testbed/demo) is its runner: Run is given the
// cluster, healthy and loaded, through Env, the few things it asks of
// its runner (a wait for a healthy cluster, the leader, the live brokers,
// the audit cache to forget, the backfill counters, lines to narrate and
// to note), and returns its Report, which the runner prints.
//
// Draw (schedule.go) makes a schedule of epochs of overlapping faults, a
// pure function of (seed, duration, brokers, rf, kinds available, disk
// broker). Every fault is a kind of the harness's one fault catalogue
// (testbed/harness/catalogue.go): process (kill, pause, restart, swap),
// file (delete, truncate, extend, bitflip, latch), disk (diskfull,
// readonly; with the loop-mounted copies disk) and network (isolate,
// partition, drop-out, drop-in, flap, cap; with brokers on hosts of their
// own, testbed/netns).
//
// The usage loop of Run (nemesis.go, watch.go): draw the schedule; start
// the watcher, which reads every broker's pass history (GET /v1/passes)
// and every replica-set change in the metadata; then for each epoch start
// the writer (one segment every WriteEvery through the leader's POST
// /v1/load, every acknowledgement recorded), inject each fault at its
// time from the catalogue and undo it after its length, stop the writer,
// restart any broker still down, wait for the heal (Env.WaitHealed; a
// bound that expires is recorded as not healed: Options.Timeout, plus
// under a catch-up cap the bytes the epoch's swaps emptied over the cap),
// read and verify every
// replica copy of every acknowledged segment, read every pass history to
// its end, and Check. A violation ends the run with the seed, the replay
// flags and the schedule printed, and the checker's observations written
// to Options.Dir (nemesis-observations.json).
//
// Check (checker.go) is pure: observations in, violations out, one
// function per property, so that a test makes each fire on a crafted
// violation: durable and verified, no last intact copy deleted (a copy
// heal backfilled in place since its fault counts as intact again, and a
// pass that records a segment's new set may delete its bad copy even
// while it reports it lost from its plan), every
// down broker listed dead on every pass, replica-set changes at most two
// per loss, a hold whenever more than hold_share of the brokers went down
// together, no pass published by a broker cut off from the majority later
// than StepDown after the cut (the watcher polls cut-off brokers too) and
// one by the majority, and a persistent failure or a loss reported on
// every pass between two that report it with nothing changed between
// (failure-reported).
//
// Invariants:
//
//  1. The schedule is a pure function of its inputs: the same seed,
//     duration, cluster shape and kinds draw the same schedule on every
//     machine (Schedule.Equal), and the order of the kinds does not
//     matter.
//  2. Outside a deliberate quorum-loss window (alone in its epoch,
//     reported as such) at most min(rf-1, (brokers-1)/2) brokers are
//     under a fault or its cooldown at once, a broker has one fault at a
//     time, and a file fault picks only copies whose other replicas no
//     fault holds: no segment loses more than rf-1 copies and the control
//     plane keeps its quorum.
//  3. A fault that could not be injected is reported as not injected,
//     never as survived; an undo that failed is reported too; either
//     fails the run.
//  4. Heal passes are read from the brokers' pass histories, never
//     sampled: every pass once, a history that began anew (a replaced
//     data directory) read from its start, a swapped broker's history read
//     from its old directory before it is removed, and the passes a
//     history's bound dropped before they were read counted unseen.
//  5. The writer counts as an attempt only a write the end of its epoch
//     did not cut short; a failure in a quorum-loss window is counted
//     apart (expected).
//
// Concurrency: Run blocks until its last epoch is checked or ctx ends.
// Each fault of an epoch is injected and undone by a goroutine of its
// own, beside the writer and the watcher; the observations are under one
// mutex. Env's contract says which of its methods are called
// concurrently.
package nemesis
