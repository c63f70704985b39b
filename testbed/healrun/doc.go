// Package healrun measures one heal of real malachid processes: it starts
// a cluster (testbed/harness), loads sealed segments through POST
// /v1/load, measures the machine's limit for the heal's work, kills a
// broker and times the heal from the leader's pass history. Pacing runs
// the same kill under an open-loop Kafka client load (testbed/kafkaload)
// once per catch-up rate (Modes: fixed rates from 8 MiB/s to unthrottled,
// and auto), each on a fresh cluster, and reports the clients' latency
// idle and while healing; the fixed rates draw the frontier, whose R*
// (SetFrontier) auto is judged against (Summarize). The benchmarks in
// bench/ and `malachi-demo --backfill-rate compare` both run it.
//
// Invariants:
//   - A heal's window runs from the start of the first pass that planned
//     a backfill to the end of the first pass that found every sealed
//     segment at its replication factor with the killed broker dead; it is
//     read from the pass history (GET /v1/passes), never sampled. A
//     capped fixed mode under PacingConfig.FixedWindow is the exception,
//     and says so (Result.HealWindowSeconds): its window runs from the
//     last reading before backfill bytes began to arrive until window
//     later, its bytes those that arrived (malachi_heal_backfill_arrived_
//     bytes_total, read every half second), since a pass that plans the
//     whole heal ends only with it.
//   - A heal's ramp (Ramp) is read from the same arrived bytes: the first
//     reading at which the rate over RampSpan reached RampShare of the
//     heal's mean rate.
//   - The limit is measured in the same run, just before the kill and
//     again after the heal (the best of the two, half by half), for the
//     heal's pattern (Pattern: its bytes onto its number of targets, in
//     copies of its segments): the lower of the disk's rate for writers
//     writing as a catch-up target writes (catchup.WriteLikeTarget, one
//     fdatasync per copy) and loopback sendfile's rate for the same bytes.
//   - No heal is reported above its limit: a heal measured faster than its
//     limit fails its round with an error naming both figures
//     (Limit.Check), so a ratio to the limit is never above 1.
//   - A round's R* is the heal rate of one of its own fixed modes (the
//     fastest whose clients' p99 stayed within FrontierFactor times idle,
//     among those whose idle p99 is within DisturbedFactor of the round's
//     median), or 0 when none did; a ratio to R* is only computed against
//     an R* that exists.
//   - A pacing run fails (an error, no figures) when either latency window
//     holds no acknowledgement, or when the clients lost, duplicated or
//     reordered a record: a figure is never computed from nothing.
package healrun
