// Package broker is the reference broker of Malachi heal as a library;
// command malachid (cmd/malachid) parses its flags and configuration and
// calls Run. One broker (Open, then Close) holds
//
//   - its store (store.DB under data_dir: copies/ and confirm/),
//   - a member of the control plane (cluster.Node, raft under data_dir/raft),
//   - the admin API on admin_listen (always on), and
//   - the heal plugin, only when [heal] enabled = true (or --heal.enabled):
//     disabled, it starts no goroutine, opens no listener, creates no file,
//   - the Kafka listener, only with kafka_listen.
//
// Each file owns one thing: config.go the configuration (DefaultConfig,
// Validate: every error names the key and the value and wraps ErrConfig);
// server.go opening and closing a broker, run.go Run and the logger;
// routes.go the admin routes and their error codes; forward.go and
// apply.go what only the leader serves (onLeader) and metadata writes;
// create.go, records.go, seal.go and segment.go the write path on the
// broker that coordinates it, replica.go its replica side; load.go the
// load generator (POST /v1/load); leftovers.go the copies a lost create
// leaves; lifecycle.go decommission and maintenance; coordinator.go the
// routes served by the heal coordinator; inspect.go health, copies,
// status and passes; faults.go the fault routes (fault_injection only),
// faults_hold.go the produce hold (a batch stored, its answer held);
// kafka_cluster.go the kafka.Cluster adapter, kafka_log.go a partition's
// log, kafka_roll.go its roll and seal, kafka_keep.go the keeper,
// kafka_rpc.go the internal copy routes of the Kafka log, kafka_groups.go
// the consumer groups' side (which broker coordinates a group: rendezvous
// hashing over the live brokers; committed offsets through the control
// plane, meta.CommitOffsets, read back at the leader's read index),
// kafka_live.go which brokers Metadata lists
// (each broker asks its peers every grace/8 and counts one dead after
// grace/2 without an answer, before heal does). The admin API's
// requests and answers are package admin's types, which its client
// decodes.
//
// # Configuration
//
// Config is the TOML file's shape (cmd/malachid reads it and a flag per
// key). Defaults (DefaultConfig): id 1, admin 127.0.0.1:7001, raft
// 127.0.0.1:7101, replication_factor 3, raft heartbeat/election 400ms,
// lease 300ms, and plugin.DefaultConfig() under [heal], certs_dir
// data_dir/certs. A bad configuration (bad value, missing or foreign
// certificates, insecure = true off loopback) is an error wrapping
// ErrConfig that names the key and the value; Open refuses it before
// anything is created under data_dir. Run closes the broker once its
// context ends and reloads the certificates on each value of its reload
// channel (a failed reload keeps the old ones).
//
// # Security
//
// Every listener speaks mutual TLS 1.3 with the broker's certificate
// (certs_dir: ca.crt, broker.crt naming this id, broker.key): raft
// (cluster), the admin API, the plugin's RPC. Admin routes check the
// caller's role (rpc): viewer for reads, operator for writes and
// faults, brokers only for /v1/internal/*; role client (a Kafka
// application) has no admin route. On kafka_listen, operator and client
// produce and consume, viewer consumes (kafka.RoleAccess). insecure = true runs them all in
// plaintext and is refused off loopback.
//
// # Admin API (HTTP/JSON)
//
//	GET  /v1/health                         {"id","leader","is_leader","heal","index","quorum":{"voters","reachable","error"}}
//	GET  /v1/metadata                       meta.Snapshot of this broker's view
//	POST /v1/segments {"id","start_offset"} create on a replica set placed by the leader
//	POST /v1/segments/{id}/records {"count","size","seed"} | {"records":[base64...]}
//	POST /v1/segments/{id}/seal             seal every replica, then SealSegment through raft
//	POST /v1/load {"segments","records_per_segment","record_size","prefix","concurrency","first"}
//	                                        ids prefix-NNNNN (one "-"), from first or, without it,
//	                                        one past the prefix's highest: a second load makes new ids
//	GET  /v1/copies                         [{"id","size","latched","sealed","latch_error"}] of this broker
//	GET  /v1/status                         the plugin's /status, or {"heal":"disabled"}
//	GET  /v1/plan                           dry run of the next pass (heal.Plan), from the leader
//	POST /v1/heal/release                   lift a mass-failure hold (on the leader)
//	POST /v1/heal/acknowledge/{id}          acknowledge a lost segment (on the leader)
//	POST|DELETE /v1/brokers/{id}/decommission         drain broker id | cancel
//	POST /v1/brokers/{id}/maintenance?for=30m         a maintenance window (until = the
//	DELETE /v1/brokers/{id}/maintenance               leader's now + for) | end it
//	POST /v1/faults/latch/{id}  fault_injection only (file faults: testbed/harness)
//	POST|GET /v1/faults/hold-produce/{topic}/{partition}  arm | wait for a held Produce answer (fault_injection only; refused without)
//	POST /v1/internal/...                   between brokers (apply, segments, copies, heal, plan)
//	POST /v1/internal/kafka/end             a partition's high watermark, asked of its leader by a group's coordinator
//	POST /v1/internal/read_index            the control plane leader's applied index after a barrier (a group's offsets are read there)
//	GET  /v1/internal/kafka/alive           the Kafka listener's liveness probe between brokers
//
// Errors answer {"code","message"} with a status that fits the code
// (unauthenticated 401, forbidden 403, bad_request, not_found,
// segment_exists, stale_replicas, unknown_broker, maintenance_full,
// not_leader, ...). The lifecycle routes (lifecycle.go) apply a
// meta.SetBrokerMode on the leader, which fills until, issued_at and
// heal.max_maintenance from its own clock and config; a follower forwards
// them to the leader's /v1/internal/brokers/... routes.
//
// Metadata writes go through raft. Every request that only the leader
// serves (a metadata write, placing a new segment, a broker's mode, and
// the coordinator's dry run, release and acknowledgement) goes through one
// helper, onLeader (forward.go): served here when this broker leads, else
// sent to the leader's /v1/internal/ route with this broker's certificate,
// retried across an election (10 ms doubling to 200 ms, internal/retry)
// but not past a lost quorum: a request that has waited for a leader while
// its node lacked a quorum for three election timeouts
// (cluster.Node.Quorum) fails with "cluster: no quorum: 2 of 5 voters
// reachable ..." (code no_quorum, 503). An error of the leader's names it
// and its address ("apply seal_segment: leader 3 at 10.0.0.3:7001: ...").
// The write path: the leader places a new segment by heal's rule
// (heal.PlaceNew: min(RF, candidates) brokers, round-robin over those the
// control plane heard from recently, decommissioning ones last),
// creates the copy on each, then commits CreateSegment; records are
// appended on every replica and synced before the call returns; seal seals
// every replica, checks that they agree (length, byte size, checksum) and
// commits SealSegment. One writer per segment at a time (a per-segment lock
// on the broker that coordinates the write). Generated records are
// deterministic in (seed, index), so every replica generates the same
// bytes locally instead of receiving them.
//
// # Invariants
//
//  1. A segment is in the metadata only once every replica of its set holds
//     an (empty, active) copy of it.
//  2. A SealSegment is committed only when every replica sealed the same
//     length, byte size and checksum.
//  3. Every command the broker proposes is safe to retry after a leader
//     change: register and seal are idempotent, a create that landed is
//     found and answered as is.
//  4. A configuration is refused (exit 2) before anything is created under
//     data_dir: values, raft timings, dialable addresses, plaintext only
//     on loopback (Config.Validate) and the certificates (they load, chain
//     to ca.crt and name this broker: Config.LoadCerts); cmd/malachid
//     checks syntax, unknown keys and types as it reads the file and flags.
//  5. Creates of one segment id run one at a time on a broker; a create
//     refused because another recorded the segment on a different set
//     deletes the empty copies it made outside that set (leftovers.go,
//     internal route copies/{id}/drop, which deletes only an empty active
//     copy of a segment whose recorded set does not name its broker).
//  6. Admin request bodies and path ids are decoded and checked (parse*
//     in routes.go and beside each route) before any copy or metadata is touched: strict JSON, no
//     unknown field, valid segment ids (FuzzAdminRequest); before that,
//     the caller's certificate and role (TestAdminRoleMatrix): a refusal
//     says what was missing and changes nothing.
//
// # Crashes
//
// kill -9 at any point leaves the store's copies (framed, durable-end
// scanned on reopen), the confirmations (Pebble) and the raft state; the
// restarted broker re-registers its addresses, its latches are cleared, and
// its intact copies serve again.
package broker
