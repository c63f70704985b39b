// Package kafkaload is a Kafka client load on a cluster of real malachid
// brokers and the one checker of acknowledged records: producers with
// franz-go's kgo at its defaults (idempotent, acks=all, retried until
// acknowledged) over mutual TLS, a consumer that reads every partition
// back from offset 0 to its high watermark (kgo.ConsumePartitions), and
// Check, pure over the two histories; with Config.Group, a group consumer
// (kgo.ConsumerGroup) reading during the run and committing, judged by
// CheckGroup. The demo's --clients and the e2e
// Kafka tests (kgo and kcat) use it.
//
// Usage:
//
//	cfg := kafkaload.DefaultConfig()
//	cfg.Seeds, cfg.TLS = c.KafkaSeeds(), tlsCfg // harness.Cluster.KafkaTLS: role client
//	cfg.Group = "readers"                       // optional: a group consumer too
//	l, err := kafkaload.Start(ctx, cfg)         // creates the topic, starts the producers (and the group)
//	...                                         // break the cluster, heal it
//	rep := l.Finish(ctx)                        // Stop, Consume, Check
//	if !rep.OK() { ... rep.Violations ... }
//
// or, with histories of one's own (kcat's output, a test's records):
//
//	res := kafkaload.Check(acked, read) // []Record each
//
// Producer i's record seq has the key Key(i, seq) ("kl-p003-000000042")
// and the value Value(key, ValueBytes): the key, '|', filler drawn from
// the key. A Record keeps the value's length and SHA-256, not its bytes.
//
// Invariants:
//
//  1. Only an acknowledged record (its promise called without an error)
//     enters History.Acked, with the partition and offset the broker
//     answered; every other record handed to a producer is counted in
//     Failed. A failed record may have been stored: reading it back is
//     no violation.
//  2. Check is a pure function of (acked, read): lost is an acknowledged
//     record with no record read at its (topic, partition, offset), or one
//     with another key, length or SHA-256 there; duplicated is a non-empty
//     key read more than once; out of order is a read whose offset is not
//     above the previous read's in its partition, or a record of Key's
//     producer read at a higher offset than a later record of the same
//     producer in the same partition. ReadBack + Lost = Acknowledged.
//  3. Consume reads each partition to the high watermark ListOffsets gave
//     when it began, never stops early on a gap, and returns what it read
//     when ctx ends, with an error: a record it did not reach is lost,
//     never assumed.
//  4. Stop produces nothing after it is called; records still buffered
//     are flushed until its ctx ends, then failed (kgo's Close), and it
//     returns once every promise was called: the history is final.
//  5. The group consumer commits synchronously from its poll loop, so its
//     GroupHistory's events (records polled, commits acknowledged) are in
//     the order it saw them. CheckGroup is pure: skipped is an acknowledged
//     record the group never consumed at its offset as acknowledged; a
//     committed offset lost is an acknowledged commit below an earlier one
//     of its partition, the group resuming below an acknowledged commit,
//     the committed offset fetched at the end below the last acknowledged,
//     or one past the partition's high watermark. A record consumed again
//     at or after the committed offset is at-least-once, counted, allowed.
//
// Concurrency: Start runs one goroutine per producer, one for the group
// consumer, and kgo's own; the history is guarded by Load.mu, the group's
// by its own. Stop and Finish are for one caller.
// Nothing here sleeps to wait for a state: retries (topic creation, high
// watermarks) back off on internal/retry until ctx ends.
package kafkaload
