// Package pass runs heal passes: it observes the cluster, steps the
// decision core (package heal) and executes the plan it returns through
// small interfaces its caller implements (Metadata, Prober, Backfiller,
// Settler, Deleter, LeftoverDeleter; the plugin implements them over its
// RPC, the tests in memory). It decides nothing the core decides: what a
// failure means for later passes is heal.State.Fold's, not the executor's.
//
// The seed's division of labour is two steps of a pass. HealSealed is the
// seed's heal_sealed/4: given the metadata view, the live brokers (Live:
// who answered this tick's probe) and the replication factor, it steps the
// core, runs the plan's backfills and settles, and returns a Healing: the
// commands whose backfills all succeeded (heal.Outcomes.ReadyAt), the
// segments it could not heal, the unsettled copies, and the settled,
// dropped and leftover copies. It applies nothing. Coordinator.Pass is its
// caller, the seed's HealCoordinator: it applies exactly what the Healing
// holds, in this order: the commands through Metadata, the confirmations
// of the settled copies, the deletions of the dropped copies whose command
// was recorded and of the leftovers.
//
// Usage loop (Coordinator.Run, one per leadership term):
//
//	view := Metadata.View(ctx)
//	live := probe every broker at view.Index()   // hedged, ProbeTimeout each
//	h := HealSealed(ctx, view, live, rf)         // Step, backfills, settles
//	apply(h)                                     // commands, confirms, deletes
//	report := outcomes.Report()                  // OnReport; the next Step folds the outcomes
//	wait Tick, or NextPass(&report, FastTick) if sooner
//
// A backfill is one request to its target (Backfiller.Backfill): the
// target resumes at its own durable end. While backfills replacing a dead
// replica run, its broker is probed every ReturnCheck; when it answers
// with an intact copy, that segment's backfills are cancelled and its set
// is left as it was (heal.Report.Returned). DryRun observes and steps
// without executing.
//
// The seed's rules are tested end to end here, as datadriven scripts run
// through a Coordinator over in-memory brokers (TestScripts; each row
// quotes the sentence it tests, and TestSeedCoverage checks that every
// sentence stating a rule is quoted):
//
//	P1 (the loop)                          testdata/seed/P1
//	P2 (heal_sealed/4, what it returns)    testdata/seed/P2
//	P3 (sealed segments only)              testdata/seed/P3
//	P4 (the live-broker set, all dead)     testdata/seed/P4 (P4.1 names the RPC server: no rule)
//	P5 (the integrity pass)                testdata/seed/P5
//	P6 (the unsettled list)                testdata/seed/P6 (P6.9, the settle's cost on an unsealed log: the Settler's)
//	P7 (a heading)                         no rule
//	P8 (a copy that failed in storage)     testdata/seed/P8
//	P9 (replaced, never merely dropped)    testdata/seed/P9
//
// The deterministic simulation (sim_test.go, scale_test.go) drives the
// real Planner and Coordinator over seeded random faults.
//
// Invariants (heal's doc numbers the plan's; these are the executor's):
//
//  1. A SetReplicas is applied only if HealSealed returned it: every
//     backfill of its segment in the same plan succeeded and no replica it
//     replaces came back.
//  2. A dropped copy is deleted only after the command leaving it out was
//     recorded (Metadata.SetReplicas returned nil); a stale or failed
//     command deletes nothing.
//  3. A copy is confirmed only if it was settled in the same pass.
//  4. A leftover is deleted only through a LeftoverDeleter, which refuses
//     when the broker's set names it at the plan's index or later.
//  5. Each action's outcome is recorded at that action (heal.Outcomes.Of):
//     what did not run is NotRun, never Succeeded.
//  6. Every broker of the view is probed each pass, each within its own
//     ProbeTimeout: a slow broker costs its own deadline, not the pass's.
//
// Concurrency and crash contract: a Coordinator runs one pass at a time
// (Run, Pass, HealSealed and DryRun serialise); Last, State, Release and
// Acknowledge are safe at any time. Within a pass, backfills, settles,
// confirmations and deletions run concurrently, bounded by Concurrency
// overall and PerBroker per broker; the commands run concurrently, bounded
// by Concurrency. When the pass's context is cancelled (lost leadership)
// no step starts, those in flight are cancelled (the interfaces roll them
// back) and waited for, and the Report says Aborted. Every step is
// idempotent and re-planned from the metadata on the next pass, so a crash
// at any point leaves at worst an unreferenced copy on a target (reused by
// the next backfill, which resumes at its durable end) or a dropped copy
// not yet deleted (a leftover, collected later). The clock is injected
// (Config.Now, Config.After); the core never reads it.
package pass
