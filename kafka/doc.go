// Package kafka serves the Kafka wire protocol for producing and consuming
// by partition, so that stock Kafka clients (franz-go, librdkafka, the Java
// client) can use a malachi broker. Every request and response is encoded
// and decoded by franz-go's kmsg; the package holds no protocol structs of
// its own.
//
// # Usage
//
// The broker implements Cluster (its topics, live brokers, producer ids),
// optionally Groups (where a group is coordinated, its committed offsets)
// and SegmentConfig, and Log (one partition's replicated log on its
// leader), then:
//
//	cfg := kafka.DefaultConfig()
//	cfg.TLS, cfg.Authorize = certs.ServerConfig(), func(cs tls.ConnectionState) (pki.Identity, error) {
//		return certs.VerifyPeer(cs.PeerCertificates)
//	}
//	srv, err := kafka.NewServer(cfg, cluster)
//	go srv.Serve(ln)
//	...
//	srv.Close()
//
// Each connection is served by one goroutine: read a size-prefixed frame,
// parse the header, answer with the handler of the request's kind
// (apiversions, metadata, createtopics, produce, initproducerid, fetch,
// listoffsets, and the group kinds findcoordinator, joingroup, syncgroup,
// heartbeat, leavegroup, offsetcommit, offsetfetch, listgroups,
// describegroups, deletegroups, and describecluster, describeconfigs,
// deletetopics, offsetforleaderepoch: one file each), write the
// response. The served kinds and versions are the table in dispatch.go;
// ApiVersions advertises exactly that table. With Config.Latency set, every Produce's time from its size
// prefix read to its response written (weighing its records) and every
// Fetch's handling time (without its wait for data) are recorded there:
// the broker's adaptive catch-up rate reads their p99 (latency.go). The
// times are read from Config.Now (time.Now when nil), which a test moves.
//
// # Invariants
//
//  1. Responses on a connection go out in request order, one per request,
//     except Produce with acks=0, which has none.
//  2. A request of a kind or version not in the table is answered with
//     UNSUPPORTED_VERSION in that kind's own response (ApiVersions: at v0
//     with the table, as Kafka does); the connection stays usable. Only
//     what cannot be answered closes the connection, with a log line: a
//     frame over Config.MaxFrameBytes, a truncated frame, a header or body
//     that does not parse, a key or version the protocol library does not
//     know, a failed acks=0 produce.
//  3. A produced partition carries exactly one record batch v2 whose
//     CRC-32C (attributes to end) matches; anything else is refused
//     (CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, ...) and
//     nothing is stored.
//  4. Per partition, the producer check, the Log.Append and the record of
//     the batch's sequence happen under one lock (partition.mu): a batch
//     is stored at most once per (producer id, epoch, sequence range)
//     among a producer's last 5 batches; a retry of one of those is
//     answered with its first base offset; a gap in sequence is refused
//     (OUT_OF_ORDER_SEQUENCE_NUMBER), an older epoch too
//     (INVALID_PRODUCER_EPOCH).
//  5. Producer state is a function of the stored batch headers
//     (RebuildProducers): a partition's state is rebuilt from its Log the
//     first time it is produced to through a given Log value, so a new
//     leader answers retries as the old one would have.
//  6. The Log assigns offsets: a batch's base offset is the Log's end
//     before the append, written into the batch (SetBaseOffset).
//  7. Fetch returns only what is below the high watermark, waits for data
//     on Log.Wait (never by polling), and answers offsets outside
//     [log start, high watermark] with OFFSET_OUT_OF_RANGE. A partition
//     answered without records carries an empty record set, never a
//     null one (librdkafka refuses null).
//  8. Bad input and refused requests change nothing.
//  9. Consumer groups (groups.go; the classic protocol, assignors in the
//     clients): a broker answers a group's requests only while
//     Groups.Coordinator names it, else NOT_COORDINATOR, and then forgets
//     what it held of the group (members and generation live in memory on
//     the coordinator; a group that moves starts Empty at its committed
//     offsets). A join, a leave or a session's end (no heartbeat, join,
//     sync or commit for the member's session timeout) starts a rebalance;
//     it completes when every member has rejoined, or at the longest
//     rebalance timeout without those that did not. Heartbeat, SyncGroup
//     and OffsetCommit check the member (UNKNOWN_MEMBER_ID) and generation
//     (ILLEGAL_GENERATION); OffsetCommit refuses while the group completes a
//     rebalance (REBALANCE_IN_PROGRESS), an offset outside [0, high
//     watermark] (OFFSET_OUT_OF_RANGE) and metadata over 4 KiB, and stores
//     the accepted partitions of one request in one Groups.CommitOffsets.
//     The timeouts run on Config.Clock.
//  10. Metadata and DescribeCluster list exactly Cluster.Brokers (the
//     live brokers); a partition's leader is -1 (LEADER_NOT_AVAILABLE)
//     when the Cluster names none live. DeleteTopics deletes nothing
//     (TOPIC_DELETION_DISABLED); DescribeConfigs describes, read-only;
//     OffsetForLeaderEpoch answers an epoch's end as the high watermark,
//     which no consumer's position passes and the log never truncates
//     below.
//
// # Security
//
// With Config.TLS, a client must present a certificate that
// Config.Authorize accepts, or the handshake fails (logged at warn as a
// peer not admitted; a peer that closes its connection during the
// handshake is no refusal, logged at debug). The identity's role
// decides what the connection may do (RoleAccess): read (Metadata, Fetch,
// ListOffsets, OffsetForLeaderEpoch, DescribeCluster, DescribeConfigs,
// FindCoordinator, OffsetFetch, DescribeGroups, ListGroups) for viewers,
// clients and operators, write (Produce, InitProducerID, topic creation
// and deletion, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
// OffsetCommit, DeleteGroups) for clients and operators: a viewer sees a
// group but does not join it. A refusal is answered with the kind's own
// error (TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
// GROUP_AUTHORIZATION_FAILED) and a log line naming the peer and the
// access it lacks. Config.Insecure serves plaintext and grants
// everything; the broker restricts it to loopback.
//
// # Not served
//
// Transactions (a transactional id is refused, in InitProducerID and
// FindCoordinator), static group membership (an instance id is shown, not
// honoured), the KIP-848 consumer protocol, fetch sessions (declined as
// Kafka allows), topic ids (Produce ≤ v9, Fetch ≤ v12, OffsetCommit and
// OffsetFetch ≤ v8), ListOffsets by timestamp, AlterConfigs, topic
// deletion (refused), compaction and retention.
//
// # Concurrency
//
// A Server is safe for concurrent use; Close stops listeners and
// connections and waits for their goroutines. Producers is not: its
// partition's lock guards it. A JoinGroup or SyncGroup waits on its
// connection's goroutine for the rebalance (or Close); the coordinator's
// state is under one mutex, never held across I/O.
package kafka
