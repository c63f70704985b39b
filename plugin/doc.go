// Package plugin is what a log broker links to heal its sealed segments:
// the Config a broker's configuration file carries under [heal], the
// replication server every enabled instance runs, the RPC client the
// leader's coordinator uses to reach the other instances, the
// leadership-driven coordinator itself (pass.Coordinator over that client),
// Prometheus metrics on a per-instance registry, /metrics and /status.
//
// # Usage
//
//	cfg := plugin.DefaultConfig()          // then the broker's [heal] table
//	ds, name, closeDS, _ := plugin.NewDirSyncer(cfg, log) // only if cfg.Enabled
//	db, _ := store.Open(dir, store.Options{DirSyncer: ds})
//	certs, _ := pki.LoadBroker(certsDir)   // the broker's certificate names id
//	p, err := plugin.New(cfg, plugin.Deps{Self: id, Store: db, Control: node, Logger: log, FsyncEngine: name, Certs: certs})
//	if err != nil { ... }                  // plugin.ErrConfig names the key and value
//	if err := p.Start(ctx); err != nil { ... }
//	defer p.Stop()
//
// Control is any ControlPlane (cluster.Node is one): five methods, so a
// broker with its own consensus plugs in.
//
// # Network
//
// One control listener (heal.rpc_listen) serves, as HTTP/JSON:
//
//	POST /rpc/v1/probe        {"index"}        -> heal.ProbeReport (anomalies and counts only)
//	POST /rpc/v1/backfill     {"segment","source","source_addr","ticket"} -> {"bytes"}: this broker pulls,
//	                                              resuming at its own copy's durable end
//	POST /rpc/v1/settle       {"segments"}     -> {"items"}: each copy's error or what its settle did;
//	                                              the batch's shard directories synced together
//	POST /rpc/v1/confirm      {"segments"}     -> {"items"}: durable (one write), keyed by file identity
//	POST /rpc/v1/delete       {"segment"}      -> {} (a missing copy is not an error)
//	POST /rpc/v1/latched      {}               -> {"latched":[...]}
//	POST /rpc/v1/delete_leftover {"segment","index"} -> {} (refused while the set names this broker)
//	GET  /metrics, GET /status
//
// The listener speaks mutual TLS 1.3 with the broker's certificates
// (Deps.Certs, package rpc): /rpc/* answers brokers only,
// /metrics and /status viewers and operators; any other caller gets 401 or
// 403 naming what was missing, and nothing runs. A failed RPC answers
// {"code","message"}; the client turns the code back into the sentinel
// (store.ErrLatched, store.ErrShort, meta.ErrStaleReplicas, ErrLagging,
// ...) so errors.Is works across the wire; store.ErrSealConflict (409) also
// comes back wrapping heal.ErrSealConflict, a backfill target that cannot
// open its copy at its durable end answers heal.ErrNoDurableEnd
// (no_durable_end, 409: the source was not read), and a refusal of credentials
// (either side's) wrapping heal.ErrUnauthenticated, which the coordinator
// reports as auth_failed instead of counting the broker dead. The data
// listener (heal.data_listen) is the catchup package's server: sendfile
// out, splice in, each transfer authorized by the single-use ticket the
// leader's coordinator signed and the backfill RPC carried (or over TLS
// with heal.data_encryption). With Deps.Insecure, both listeners are
// plaintext and unauthenticated (malachi_heal_insecure 1).
//
// heal.max_maintenance (default 1, at least 1) bounds the brokers in a
// maintenance window at once: the broker's admin API puts it in each
// meta.SetBrokerMode, whose state machine refuses one more; the planner
// does not read it.
//
// heal.rebalance (default true) and heal.rebalance_moves (default 8, at
// least 1) are heal.Policy.Rebalance and RebalanceMoves: after healing and
// decommissions, replicas move from the most to the least loaded brokers
// until each is within 10% of the mean by count and bytes.
//
// heal.backfill_bytes_per_second paces this broker's catch-up. A number
// pins it, both directions sharing one catchup.Throttle. "auto" (the
// default) runs a pacer (pacer.go) over what heal.backfill_auto_scope
// says: "target" (the default) the copies the broker receives, what it
// sends going through a throttle of its own with no byte cap, so that each
// copy is paced by its target alone and a partition leader whose clients
// slow down holds back the copies written on it, not every copy it sends;
// "broker" both directions through one throttle. The pacer's
// first step sets pace's start rate (32 MiB/s) at once, and it steps
// package pace's controller once a second: the bytes the paced throttle
// moved (Throttle.Moved; the send throttle's as pace.Input.Beside), the
// client p99 from Deps.ClientLatency (nil: no
// latency signal) and PSI from /proc/pressure (package psi; absent: no
// pressure signal); it applies each Decision with Throttle.SetRate, within
// heal.backfill_floor_bytes_per_second and
// heal.backfill_ceiling_bytes_per_second. Its rate, reason and time at the
// floor, and its cuts, are metrics (malachi_heal_backfill_rate_*) and
// /status's backfill_rate. heal.backfill_background (the default) moves
// catch-up bytes at background CPU and I/O priority
// (catchup.Limits.Background), so the broker's client work runs first.
//
// # Invariants
//
//  1. A disabled plugin (Config.Enabled false) creates no goroutine, no
//     listener and no file: New only validates, Start and Stop return nil.
//  2. A probe answer lists only anomalies (missing, short, overrun not yet
//     confirmed, latched, timed out, corrupt per the scrubber) and counts; an intact copy (exactly
//     its sealed size with its footer, and confirmed) costs no
//     bytes on the wire (one stat and one lookup in the local confirmation
//     store). No probe opens a replica's file (only leftovers' tails, 8).
//  3. A probe answers for the metadata at an index at least the one asked
//     for; a broker whose view lags waits for it, bounded by the probe
//     deadline, and fails with ErrLagging rather than answer an older view.
//  4. A backfill commits only a copy the store verified against the
//     segment (frames, offsets, footer, checksum); on any error or
//     cancellation the target is cut back to its durable end.
//  5. The coordinator runs only while Control reports leadership, and at
//     most one pass at a time; it is cancelled when leadership is lost,
//     which cancels its RPCs (the servers roll back what they were doing).
//  6. Metrics live on the instance's registry, never the global one. Every
//     metric the alerting rules and the dashboard in deploy/ name is
//     registered there (deploy_test.go checks it); the lifecycle gauges
//     (decommission, maintenance, leftover copies) are set from each
//     pass's Report (setLifecycleMetrics, setLeftoverGauge), their vectors
//     reset first, so a broker no longer decommissioning leaves no stale
//     series.
//  7. The scrubber (heal.scrub_interval > 0) reads sealed copies end to end
//     at a bounded rate and marks a copy that fails verification, by file
//     identity, in memory; the probe reports a marked copy as corrupt until
//     its file changes. The scrubber never repairs, moves or deletes
//     anything itself.
//  8. A probe also lists the copies the store holds outside their set at
//     the probe's view (heal.Leftover: size and footer from store.Tail,
//     and the error text of the last failed delete of the copy, kept in
//     memory until a delete of it succeeds). The list is recomputed only
//     when store.CopiesVersion, the view's index or a delete result
//     changed, so a steady probe still allocates nothing per copy; it
//     costs O(leftovers) bytes on the wire. delete_leftover deletes only
//     while the broker's view, at the planned index or later, leaves the
//     broker out of the segment's set (store.ErrInvalid otherwise, naming
//     the set). heal.leftover_delay is the policy's LeftoverDelay;
//     setLeftoverGauge sets malachi_heal_leftover_copies{cause}.
//  9. Every RPC body is decoded strictly (one JSON object, no unknown
//     field, nothing after it) and checked (segment ids, sizes, a backfill's
//     source) before anything is touched: an unauthenticated (401) or
//     malformed (400, code "invalid") request changes no copy, no
//     confirmation and no metadata (FuzzRPCDecode). A well-formed backfill
//     that then fails leaves at most an empty target copy it created.
//  9. /status tells its age: the last pass comes with its age and, when it
//     is no longer current (this instance does not lead, or no pass ended
//     within Config.StaleAfter), why (last_pass_stale); totals are the
//     running coordinator's sums of its reports since it started
//     (totals.since), kept in the report hook (totals.go).
//
// # Concurrency and crashes
//
// Every exported method is safe for concurrent use. Stop waits for every
// goroutine the plugin started. Nothing the plugin does needs cleaning up
// after a crash: the store's files and confirmations are durable, a
// backfill cut by a crash is judged by the store's durable-end scan on the
// next attempt, and every RPC is idempotent, so the next leader simply
// plans again from the replicated metadata (SetSegmentReplicas is a
// compare-and-set: a replayed command is refused as stale). A node that
// regains leadership within one grace delay keeps its coordinator's
// last-seen times, so a leadership flap does not restart the grace delay of
// a broker already missing.
package plugin
