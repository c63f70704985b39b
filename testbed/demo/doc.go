// Package demo is `malachi-demo`: it starts a cluster of real malachid
// processes (testbed/harness), loads sealed segments through POST
// /v1/load, breaks the cluster stage by stage and reports how it healed.
// testbed/cmd/malachi-demo uses ParseFlags and Run alone.
//
// The stages are testbed/stage's, run in the order of stage.Names on a
// stage.Env the demo builds: its flags fill the embedded stage.Options,
// the demo is the stages' Sink (narration, and progress bars on a
// terminal: progress.go), and each stage's stage.Report is a row of the
// demo's Report. A default stage the cluster cannot heal
// (Options.Infeasible) is dropped with its reason in the report; one asked
// for with --faults is refused. --nemesis random replaces the stages with
// testbed/nemesis, the demo its Env (nemesis.go); --clients N (2 by
// default, 0 for none) runs Kafka producers and a committing group
// consumer (testbed/kafkaload) through every stage and checks every
// acknowledged record and committed offset at the end (clients.go);
// --backfill-rate compare runs testbed/healrun's frontier of catch-up
// rates instead (compare.go).
//
// The usage loop: parse the flags; start the cluster and wait for a
// leader; load in chunks, with progress; wait for the loaded copies to be
// healthy (stage.Env.Baseline); run each stage, stopping at the first
// that does not heal; poll once more and make the final check; print the
// report (text, or --json) and clean up.
//
// Invariants:
//
//  1. The exit status is 0 only when every stage that ran healed, none
//     missed its fault (stage.Report.Missed), and every segment is healthy
//     at the end (stage's invariant 1); a stage that did not heal stops
//     the demo.
//  2. Destroyed on purpose is not data loss only when the lost stage
//     held; otherwise the destroyed segments count as any loss.
//  3. With clients (--clients, 2 by default) the run is HEALED only when
//     every acknowledged record was read back at its offset, once, in
//     order, the group consumer consumed every one and lost no committed
//     offset (kafkaload.CheckGroup); with --nemesis only
//     when the nemesis lost nothing, found no violation and undid every
//     fault.
//  4. The report's JSON keys are what malachi-demo's and e2e's tests decode
//     (Report, stage.Report).
//
// Concurrency and crash contract: the brokers are the demo's children, each
// in its own process group, stopped on every exit path (SIGINT, SIGTERM,
// SIGHUP included) unless --keep, and killed by the kernel if malachi-demo dies.
// The cluster's directory is removed after a healthy run the demo created,
// kept and named in the report otherwise. A bad command line wraps
// ErrUsage, -h ErrHelp.
package demo
