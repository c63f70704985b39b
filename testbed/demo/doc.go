// Package demo is `malachi demo`: it runs a cluster of real malachid
// processes through testbed/harness, injects the fault suite's faults
// stage by stage and reports how the cluster healed. Every fault, in the
// stages and in the nemesis, is drawn from the harness's one fault
// catalogue (testbed/harness/catalogue.go), and every wait for a healthy
// cluster is the harness's WaitHealed (testbed/harness/health.go). cmd/malachi parses
// nothing of it: ParseFlags and Run are the whole of its use.
//
// demo builds (or takes, --malachid) the reference broker, starts a cluster
// of real malachid processes on free loopback ports with a short tick and
// grace delay, loads sealed segments through POST /v1/load, and then runs
// its stages in order, each waiting until the cluster is healthy again:
// kill (a follower, kill -9), restart (the killed broker comes back on its
// old data: its latches cleared, its intact copies serving), delete,
// truncate, extend and bitflip (copy files changed directly, located
// by testbed/harness), latch (POST /v1/faults/latch/{id}), the
// lifecycle stages (stages_lifecycle.go, each first restarting any broker
// left dead): decommission (a follower holding no unsealed segment drained
// to nothing while no heal pass may hand the control plane a set below RF
// and no metadata read may show one; then made active again, empty) and
// maintenance (a follower in a window, stopped until 3 passes started past
// the grace delay: no pass of the window may change a set or list it dead
// or suspect, no byte may move; then started, the window ended),
// and leader (the control plane's leader, kill -9). Process and data-directory stages
// (stages_process.go) follow, each first restarting any broker left dead
// (nospare reuses a healthy cluster of at least RF brokers as it is):
// pause (SIGSTOP of a follower past the grace delay until its replicas
// moved and verified, then SIGCONT: it must rejoin), swap (a follower
// killed, its data directory renamed aside and an empty one put in its
// place: it restarts with no copies, raft log or Pebble state), backfill-
// kill (a follower killed, then, while its backfills run, kill -9 of a
// broker with bytes of them on disk), nospare (a copy latched while exactly
// RF brokers run: reported no_spare_broker on every pass, kept in the set,
// readable from the other copies; replaced once the others come back) and
// lost (every copy file of X deleted, every copy of Y damaged the same
// way: both reported lost on every pass for at least ten passes, Y's files
// kept, both acknowledged through POST /v1/heal/acknowledge/{id}). The
// disk stages (stages_disk.go; root, losetup, mkfs.ext4 and e2fsck needed,
// else reported skipped with why) run on one follower's <data_dir>/copies
// as a loop-mounted ext4 (testbed/harness: the raft log and Pebble stay
// on the demo's directory): diskfull (some of its copies cut short, the disk
// filled by a fallocated filler, new segments written, a second broker
// killed: its cut copies latch on ENOSPC and are replaced elsewhere, new
// replicas avoid it, its intact copies keep serving; then the filler goes)
// and readonly (copies cut, then an ext4 error with errors=remount-ro
// under the live broker; same checks with EROFS; then stop, umount,
// e2fsck -f -y, mount, start). The loop disk is unmounted and detached
// when the cluster stops. A stage that cannot heal on the
// cluster asked for (no spare broker, no quorum) is dropped from the
// default list with its reason in the report, or refused with --faults. Progress shows as bars on a terminal,
// as plain lines otherwise; the report ends the run, as text or --json.
//
// --nemesis random replaces the stages with the randomized nemesis of
// testbed/nemesis (its doc states the schedule's bounds and the checker's
// properties): the demo starts, loads and verifies the cluster as for the
// stages (when the kinds asked for include them and the machine allows,
// with brokers on hosts of their own and a loop-mounted copies disk on
// broker 1), then hands it to
// nemesis.Run with itself as the nemesis's Env (nemesis.go: its wait for
// a healthy cluster, its audit cache, its leader lookup and backfill
// counters), and prints the nemesis's report as its report's nemesis
// section (the same fields in the JSON).
//
// --clients N (clients.go) gives every broker a Kafka listener and runs N
// producers of testbed/kafkaload (franz-go's kgo at its defaults:
// idempotent, acks=all; mutual TLS with the cluster's "client"
// certificate) on one partition of topic demo-clients from the healthy
// baseline through every stage, or the whole nemesis; at the end every
// partition is read back from offset 0 to its high watermark and
// kafkaload.Check reports the records acknowledged, read back, lost,
// duplicated and out of order (the report's clients section). A
// partition segment the listener seals (a replica failed) is healed like
// any other and counted among the sealed segments; the file stages pick
// their victims among the demo's own segments. --keep also starts the
// listeners and prints the bootstrap list, the client certificate and a
// kcat line to produce by hand.
//
// The usage loop of a stage: inject; poll every --poll (100 ms) (GET /v1/health,
// /v1/copies of every running broker, /v1/metadata, the leader's
// /v1/status); evaluate every sealed segment; stop when all are healthy.
//
// Heal passes are read, never sampled: the stages that count or judge
// passes (passes_read, the pause, kill and leader stages' dead_seen_seconds,
// decommission, maintenance, nospare, lost) read the leader's pass history
// (GET /v1/passes, passfeed.go) from the first pass that ended after the
// stage's fault, every pass once however slow the poll, and the history of
// a new leader too when the leader changes (noted). A pass the history no
// longer holds when read (its bound dropped it) or that its numbering
// skips is a gap: the stage fails and says so. The leader's /v1/status
// still serves what only the latest pass matters for: verification (1),
// the hold the demo releases, a broker no longer listed dead.
//
// Invariants:
//
//  1. A segment is healthy only when the metadata gives it exactly the
//     replication factor of replicas, all on running brokers; each of those
//     brokers lists the copy sealed, not latched and exactly byte_size plus
//     the 40-byte footer; the demo's own audit of the file (every frame's
//     CRC32C and offset, the footer and the frames' checksum against the
//     metadata) passes; and the broker's verification agrees: the copy is
//     confirmed when /v1/copies says so, else the leader's latest heal pass
//     at or after the metadata index reports nothing under-replicated,
//     failed or unsettled. Nothing is assumed verified that was not checked.
//  2. seconds_to_heal runs from the moment the killed broker counts as dead
//     to the first poll that finds every segment healthy. The grace delay
//     runs from the broker's last contact, which was at or before the kill,
//     so it counts as dead at kill + grace at the latest, or earlier when
//     a heal pass that started before then already listed it dead: the
//     earlier of the two is used, and a wait for the next tick counts as
//     healing time, never as grace.
//     grace_wait_seconds runs from the kill to that moment;
//     dead_seen_seconds to the start of the first pass listing it dead.
//     The time is the poll's: the demo's own audit of the copies that poll
//     listed runs after it and is not counted; the brokers' verification
//     (confirmation, the heal pass) is.
//  3. The exit status is 0 only when every stage that ran healed and every
//     segment is healthy at the end; a stage that did not heal stops the
//     demo and is reported with what was still wrong.
//  4. A fault the cluster cannot see is reported as not detected, never
//     hidden: the in-place bit flip (which keeps the size, so only the
//     plugin's scrubber can find it; the demo sets heal.scrub_interval) is
//     run when the leader's /v1/status shows the scrubber on, or when
//     --faults asks for it. Not repaired in time, its bits are flipped back
//     by the demo, the stage says whether a scrubber had found it, and it
//     counts as not healed (exit status 1).
//  5. Destroyed on purpose is not data loss only when it was reported:
//     the lost stage's segments are left out of failed and
//     data_loss_segments (and listed under destroyed) only if each was
//     reported lost on every heal pass of the leader's history after its
//     first report, on at least ten, no damaged file of Y went missing or
//     changed size, and both were marked acknowledged; otherwise they
//     count as any loss and the run fails. A pass the history no longer
//     holds when read is a gap that fails the stage, never a report.
//  6. The summary's copies_verified counts the demo's full reads of a
//     copy file that passed its audit (a cached result is not a new
//     read); copies_verified_at_end the replica copies found intact in the
//     final check.
//  7. With --clients, the run is HEALED only when the clients' check read
//     every partition to its high watermark and found every acknowledged
//     record at its offset, byte for byte, no key twice and no offset or
//     producer sequence out of order; a produce that failed is counted,
//     never a violation. With the nemesis each clients violation is one of
//     its violations too.
//
// Concurrency and crash contract: the demo's brokers are its children
// (testbed/harness), each in its own process group. They are stopped (SIGTERM, then SIGKILL after
// 3 s) on every exit path, including SIGINT, SIGTERM and SIGHUP, unless
// --keep; on Linux they also get SIGKILL from the kernel if the CLI itself
// dies (PR_SET_PDEATHSIG). The cluster's directory is removed after a
// healthy run it created, and kept (and named in the report) otherwise.
//
// Errors name the flag and value, or the broker and address; a bad command
// line wraps ErrUsage, a -h ErrHelp.
package demo
