// Package heal is the decision core of Malachi heal: it decides, and
// does nothing else.
//
// The core is pure: a Planner turns an Input (a *meta.View, this tick's
// ProbeReports, the brokers' last-seen times, the time of the pass, a
// Policy) into a Plan, a list of Action values in risk order (the segments
// with the fewest healthy copies first) and a Report. It never reads the
// clock, starts a goroutine or does I/O, so it is tested with tables and
// property tests (and, with its executor, by package pass's deterministic
// simulation). Place is its placement rule; PlaceNew the rule for a new
// segment's replica set.
//
// All memory that outlives a pass is one value, State (settle cursor,
// copies settled but not confirmed, refusals and their failure counts,
// avoided targets, conflicts, lost and acknowledged segments, last-seen
// times, an operator's release, the last hold): Planner.Step(state,
// observation) returns (plan, next state), the way a consensus core keeps
// its protocol state. Step first folds the previous pass's Outcomes into
// the state: what a failure means (a source that refused, or failed
// Policy.RefuseAfter times in a row, is refused; the target of a failed
// new replica is avoided for Policy.AvoidPasses passes; ErrSealConflict
// records a Conflict; a settled copy whose confirmation did not succeed
// is unconfirmed) is decided there (State.Fold), not by the executor.
// The changes it makes are returned as Report.Events; the core logs
// nothing.
//
// The executor is package pass: it observes (the view, the probes),
// calls Step, executes the plan through interfaces it declares and
// records each action's Outcome (a value); the pass's Report is
// Outcomes.Report, a pure function of them. Outcomes.ReadyAt says which
// SetReplicas may be applied (every backfill of its segment succeeded).
//
// Usage loop (what pass.Coordinator does each pass):
//
//	obs := Observation{View: view, Reports: reports, Start: start, Now: now,
//	        Policy: pol, Executed: last}           // last: the previous pass's *Outcomes
//	plan, st, err := planner.Step(st, obs)          // fold, plan, next State
//	out := execute(plan)                            // the executor's: an Outcome per action
//	report := out.Report()
//	last = out
//
// Brokers send facts, heal decides: a ProbeReport lists a Fact
// (flags missing / timed out / stat failed / latched / confirmed / corrupt,
// the stat's size and file identity, a short why) for each copy that is not
// Intact, so an answer costs O(anomalies) bytes. Classify turns a fact into
// a Kind, checking in a fixed order: latched, timed out, missing, stat
// failed (as timed out), corrupt, size at most ByteSize (short), above it
// (overrun, unless confirmed: intact). Reports are validated
// (ProbeReport.Validate) once, where they cross the network
// (the executor leaves an invalid one out, its broker as if silent);
// Plan does not check them again (it panics on one under -tags invariants).
//
// From a stat to a recorded command, six conversions: the broker's stat
// result becomes a Fact (1), the Fact JSON on the wire (2), JSON a Fact
// again (3, validated here), the Fact the planner's anomaly through
// Classify (4), the anomaly an Action carrying its meta.SetSegmentReplicas
// (5), the command a raft log entry the state machine applies (6).
//
// The rules, from the specification (SEED.txt), are tested end to end by
// package pass's datadriven scripts (testdata/seed, one per paragraph of
// the seed, each row quoting its sentence) and here by tables, property
// tests and the naive reference planner. The stat that never opens a copy
// (P5.2) and the directory fsync of each settle (P6.8) are the plugin's.
//
//   - A sealed segment with a lost replica (its broker dead past the grace
//     delay, or its copy latched) or fewer replicas than the replication
//     factor is under-replicated: Place picks the healed set and each new
//     replica is backfilled from a surviving intact replica. The
//     SetReplicas command is executed only when every backfill of that
//     segment succeeded.
//   - A segment whose every replica is dead is reported failed
//     (all_replicas_dead), never dropped.
//   - Active (unsealed) segments are left alone.
//   - The integrity pass: a copy whose stored bytes fall short of the
//     sealed byte size (or that is missing) is backfilled from an intact
//     replica resuming at its durable end; a copy whose bytes run past it
//     is unsettled. Nothing is repaired from the unsettled list: a batch
//     of it, round-robin (the cursor survives between passes) and bounded
//     by Policy.SettleBatch, is settled each pass.
//   - The seed's unsettled list read literally: every overrun copy (not
//     confirmed) is in Report.Unsettled, whatever its segment's state
//     (P6.2). The exception (P6.5) is a copy settled on an earlier pass
//     and not confirmed since (State.Unconfirmed: it still measures above
//     the recorded size, by its footer): it is returned again only on a
//     pass in which the seed's conditions hold: its segment fully live
//     (every replica's broker answered), not under-replicated (no dead,
//     latched, corrupt, short or missing copy, at least the replication
//     factor), the copy not latched, the segment's latch state readable
//     this tick, and the copy's own probe not timed out. Another replica's
//     timed-out stat does not matter: such a copy is unknown this tick,
//     not lost, and does not make its segment under-replicated. "Latch
//     state readable" is "the broker answered" (with a report: a broker
//     that fails authentication sends none): the latch lives in the
//     broker's memory and every answer reports latched copies
//     (FactLatched), so a readable latch state needs no field of its own.
//     A confirmed copy is never selected again (it is Intact: the broker
//     stops reporting it, or reports it with FactConfirmed).
//   - Beyond the seed: a listed copy is selected into Report.Settling
//     (SettleOverrun, then ConfirmCopy once the settle succeeded) only on
//     a pass in which those conditions hold for its segment: a segment in
//     trouble may be backfilling from its overrun copy in the same pass.
//   - A latched copy is neither a backfill source nor a placement target
//     for its segment; it is replaced, never merely dropped. With no spare
//     broker it stays in the set behind the healthy replicas and the
//     segment is reported no_spare_broker with its copies on every pass. A
//     dropped latched copy is deleted only after the new set is recorded.
//   - A corrupt copy (FactCorrupt: the broker's scrubber found a checksum
//     mismatch in a copy of the right size) is treated as lost,
//     exactly like a latched one: never a backfill source, replaced from an
//     intact replica (ReplaceCorruptCopy), deleted only after the set
//     leaving it out is recorded, kept behind the healthy replicas when no
//     broker is spare. A segment whose every copy is corrupt is reported
//     failed (no_intact_source) and lost, and no copy of it is deleted.
//
// Beyond the seed, metadata cannot destroy data: a copy whose own valid
// seal disagrees with the metadata (its broker answered a settle or a
// backfill with ErrSealConflict, changing nothing) makes its segment
// failed (seal_conflict) on every pass, with nothing else planned for it,
// until the metadata or the copy changes (Conflict).
//
// Beyond the seed: risk order (fewest healthy copies first); a grace delay
// (Policy.Grace) before a broker that stopped answering counts as dead,
// during which it is "suspect" (neither replaced nor used); a broker is
// seen when its answer arrived, and is dead only if that was more than the
// grace delay before the pass began probing (Input.Start), so one slow
// probe never makes a broker dead on its own pass; per-broker and
// per-pass caps on planned backfills (Policy.MaxBackfillsPerBroker,
// MaxBackfills);
// rack-aware, least-loaded, least-movement placement; targets whose
// backfill failed are avoided for a few passes (Input.Avoid); a dry run
// (Plan.String, Plan.Commands); a Report per pass. A segment that
// waits (caps, a suspect replica, a timed-out probe, a hold) is counted in
// Report.Deferred, not failed.
//
// The mass-failure brake (see Hold): when more than
// Policy.HoldShare of the brokers (default 1/4, at least two) or a whole
// rack of at least two go missing within one grace window, no backfill
// starts (neither new replicas nor in-place resumes) and Report.HoldReason
// says why; probing, settling and reporting go on. Input.Release (an
// operator's) lifts it until the condition clears. When it lifts
// on its own because some of its brokers answered, the ones still missing
// count as suspect and their grace delay starts again from that pass
// (Report.GraceRestarted): brokers that return from a split a few passes
// apart keep their replicas. A dead replica
// whose broker answers again while the backfills replacing it run cancels
// them and leaves the segment's set as it was (Outcomes.Returned,
// Report.Returned, BytesSaved).
//
// Honest loss reporting: a sealed segment with no intact copy
// that can be read (every replica dead, latched, missing, short, corrupt,
// or refused as a source) is listed once per pass in Report.Lost, with its
// offsets, size and recorded replicas, on every pass until it heals
// (LostBytes and len(Lost) are the gauges); once lost it stays listed while
// no copy is known intact, even through a timed-out probe (Input.Lost). It
// costs its replicas no reads: a backfill whose source refused (an error
// wrapping ErrSourceRefused, or Policy.RefuseAfter failures in a row)
// becomes a Refusal, and while the segment's version and its replicas'
// probe states are unchanged (Action.State) the planner plans no read from
// that copy again (Input.Refused, Plan.Refused); with every source refused
// the segment is lost and nothing is planned for it. Any change lifts the
// refusals, and so does a new leadership term. An operator acknowledges a
// lost segment (Input.Acknowledged): it stays in
// Report.Lost, marked, until it is healthy again.
//
// Leftover copies (leftover.go): a ProbeReport also lists the
// copies the broker holds outside their segment's set (Leftover: size,
// footer, the last failed delete's error text). ClassifyLeftover gives
// each a Cause (failed_delete, failed_load, partial_backfill,
// returned_broker); Report.Leftovers counts them per broker and cause and
// no count of the Report takes one for a replica. State.Leftovers keeps
// when each was first seen and its failed deletes. DeleteLeftoverCopy is
// planned only Policy.LeftoverDelay after the first sighting, with no hold
// in force, and only for a segment the metadata still does not know, or
// one that is sealed, at its factor, with every replica's broker answering
// and reporting nothing about its copy (intact and confirmed), no conflict
// and nothing else planned for it; a failed delete waits 2, 4, ... 64
// passes before the next try and is reported (Report.LeftoverErrors, and
// the broker's failed_delete with its errno text) until one succeeds. A
// lost segment with a leftover that has a footer and the full size on a
// live broker uses it first: each short or missing replica on a live
// broker is resumed from it (its source verifies the checksum before
// sending), or, with none, the leftover's broker takes the place of a
// dead replica in the set, nothing deleted (a live broker's copy, even
// latched or corrupt, is never swapped out); while its only healthy copies
// are overrun (not yet confirmed) it stays listed lost. A leftover that
// refused as a source is not read again while
// its segment's version is unchanged. The executor
// runs DeleteLeftoverCopy through a pass.LeftoverDeleter, which refuses when
// the broker's set names it at the plan's index or later.
//
// The operator's lifecycle (lifecycle.go), read from the View's broker
// records (meta.SetBrokerMode): a decommissioning broker is never a
// placement target; each of its sealed segments not otherwise in trouble
// is moved after healing, with the budgets healing left (MoveReplica from
// an intact replica, the broker itself while it answers; SetReplicas with
// the target in its place; DeleteDroppedCopy of its copy once recorded),
// never leaving a set below the factor and never lowering the set's rack
// count. Report.Decommission gives each one's segments and bytes left, the
// moves of the pass, the blocked segments by reason (no_spare_broker,
// rack_constraint, no_intact_source, source_latched, healing, deferred,
// active, held), Drained, and a rate and ETA from State.Drains (where the
// drain started: time and bytes). Its loss is an ordinary failure. A
// broker absent inside a maintenance window (Now < Until) is neither dead
// nor suspect, not counted by the hold brake and neither source nor
// target; its copies are unknown, unless a segment is down to one healthy
// copy (Report.MaintenanceFloor: that copy counts as dead and is
// replaced). After the window the grace delay runs from max(last seen,
// Until). Report.Maintenance lists the windows.
//
// Invariants:
//
//  1. A healed replica set never names a broker twice, never names a dead
//     or unknown broker that was not already in the set, and has at most
//     max(replication factor, healthy survivors) members.
//  2. No replica is dropped from a set without a replacement in the same
//     command.
//  3. No SetReplicas is ready (Outcomes.ReadyAt, Report.Ready) for a
//     segment any of whose backfills in the same plan did not
//     succeed (failed, not run, cancelled or interrupted); no copy is
//     deleted unless the command leaving it out was recorded; no copy is
//     confirmed unless it was settled in the same pass.
//  4. A segment that cannot be healed is in Report.Failed on every pass
//     until it is healed; one with no readable intact copy is also in
//     Report.Lost, once per pass.
//  5. The planner's work and allocations over a healthy segment are
//     constant: it iterates the view once (View.All), merges the sorted
//     facts against it, classifies facts only where there are some, and
//     builds no per-segment map.
//  6. No copy of a segment is deleted unless the recorded set keeps an
//     intact copy: a latched or corrupt copy is deleted only after its
//     replacement was backfilled (from an intact source) and recorded.
//  7. While a Refusal is in force, no Backfill names its copy as source
//     (and no backfill is planned for a segment none of whose copies can
//     be read).
//  8. While a Conflict is in force, its segment gets only a ReportFailed
//     (SealConflict): none of its copies is settled, backfilled, replaced
//     or deleted, and it is never reported healed.
//  9. A broker whose probe failed on credentials (ErrUnauthenticated) is
//     in Report.AuthFailed on every such pass, counts as seen (never dead
//     for it), and, having no report, is neither a source nor a target.
//     So is a broker that answered with metadata behind the pass's index
//     (ErrBehind, Report.Behind): its raft log lags, it is not gone.
//  10. A move (a decommission's or the rebalancer's) never records a set
//     with fewer members than the replication factor, never adds a
//     decommissioning broker, and deletes the moved copy only after the
//     set leaving it out is recorded (TestDecommissionNeverBelowFactor).
//  11. The rebalancer plans nothing while anything is under-replicated,
//     failed, lost, deferred, suspect or held, a copy's probe timed out,
//     or healing planned a backfill; every move it plans strictly lowers
//     its potential (TestRebalanceConvergesWithoutPingPong).
//
// With the build tag invariants (go test -tags invariants), every Step
// also checks the plan against its view (invariants_on.go): no set names
// a broker twice, a SetReplicas expects exactly the view's set, keeps a
// copy and adds no decommissioning broker (a move's keeps the factor),
// every DeleteDroppedCopy follows a SetReplicas leaving its broker out,
// every ConfirmCopy follows its settle, every DeleteLeftoverCopy names a
// broker outside the set of a sealed segment with nothing else planned
// for it; a violation panics.
//
// Cost: every step of a pass is linear (or n log n) in what it handles:
// the view's segments, the reports' facts and leftovers, the plan's
// actions. A per-segment question about the plan, the outcomes or the
// report (is it ready, did it fail, is it planned) is answered from an
// index built once per pass, never by a scan per action: at 20,000
// commands a scan each cost 20 s of CPU. pass's BenchmarkScale worst-x1e6 (the
// pass that finds a broker dead, 10^7 over 10^6 segments) stays near 10
// while that holds.
//
// Concurrency and crash contract: a Planner is not safe for concurrent use;
// Plans, States and Reports are values that share no memory with it; a
// State is not modified by Step. The package starts no goroutine, reads no
// clock (the caller passes Start and Now) and does no I/O: its imports are
// meta and the standard library's pure packages. A crash loses nothing
// that matters: the next leader starts from an empty State (NewTerm) and
// re-plans every step from the metadata and the probes.
package heal
