// Package meta holds the values of cluster metadata: brokers, segments, the
// snapshot a heal pass reads, and the commands the control plane applies.
//
// The package does no I/O: its functions are pure and Table is the one
// mutable value, so the decision core (heal), the control plane (cluster)
// and the tests share one definition of what a valid segment and a valid
// command are.
//
// A Table is read through a View: the table at one applied index,
// immutable and safe to share between goroutines, made in O(chunks +
// brokers) and reused while nothing applies. View.HeldBy yields a broker's
// segments from an index that Apply keeps, in O(own segments). Snapshot is
// the flat form (JSON, admin API, tests); a Builder restores a Table from
// segments streamed in id order.
//
// Invariants:
//
//  1. A BrokerID is never zero; zero is reserved for "no broker".
//  2. A SegmentID is a single path element: it can name a file under a data
//     directory and never escape it (see SegmentID.Validate).
//  3. A replica set never names a broker twice and never names broker zero.
//  4. A sealed segment carries a checksum; its offset range
//     [StartOffset, StartOffset+Length), ByteSize and Checksum never change
//     again: Table.Apply refuses any command that would change them (or
//     unseal it) with ErrSealed, naming the field and both values, and
//     Table.CheckRestore refuses such a snapshot. Sealing again with the
//     same values changes nothing.
//  5. Every change to a segment increments its Version; SetSegmentReplicas is
//     a compare-and-set on the replica set it expects to replace, so a stale
//     command is refused with ErrStaleReplicas and changes nothing.
//  6. A View never changes, and nothing a View or Table.Segment returned is
//     written by a later Apply: the table copies a chunk before writing to
//     it once a View may hold it (copy-on-write: the 4 KB of segments and
//     the 4 KB of each index a change touches, and the chunk headers above
//     them; see chunks.go); Table.Segment returns a copy. A View equals the Table.Snapshot taken at the same moment, and
//     View.HeldBy(b) yields exactly the segments whose Replicas name b.
//  7. Segments are never removed; at most 2^32-1 live in one Table.
//  8. A broker's lifecycle mode (Broker.Mode: active, decommissioning,
//     maintenance with Until) changes only by SetBrokerMode; RegisterBroker
//     keeps it. SetBrokerMode is refused, changing nothing, for an
//     unregistered broker (ErrUnknownBroker), a bad mode or window
//     (ErrInvalid), and for entering maintenance while MaxMaintenance other
//     brokers have an Until after the command's IssuedAt
//     (ErrMaintenanceFull): Apply never reads the clock, so every replica
//     decides alike. A record without the fields (an older snapshot) is
//     active. Ending a window early (active, with IssuedAt before Until)
//     keeps Until = IssuedAt, when it ended.
//  9. Kafka topics (CreateTopic) are registered once, by name (Kafka's
//     rules, at most MaxTopicLen bytes: ErrTopicExists for a name in use),
//     and never removed. A partition is a chain of ordinary segments named
//     "k.<topic>.<partition, 5 digits>.<seq, 10 digits>"
//     (PartitionSegmentID; ParsePartitionSegment reads it back, the
//     fixed-width tail making it unambiguous whatever dots the topic
//     holds). Table.Apply refuses a CreateSegment of such an id unless its
//     topic and partition are registered (ErrUnknownTopic) and it extends
//     the chain: seq 0 starts at offset 0; seq n > 0 needs seq n-1 to
//     exist (ErrUnknownSegment) and be sealed (ErrNotSealed), and starts at
//     its end offset (ErrInvalid). So a partition's chain is seq 0..n, all
//     sealed but the last, its offsets contiguous: the active segment is
//     the unsealed last one, and two brokers rolling a partition at once
//     cannot both extend it. Offsets of partition segments count frames
//     (one per Kafka record batch); Kafka's own offsets live inside the
//     batches.
//  10. AllocateProducerIDs changes nothing: the log index it is committed
//     at names a block of Kafka producer ids (ProducerIDBlock), disjoint
//     from every other block because no two commands share an index.
//  11. Kafka consumer groups' committed offsets are data of the table,
//     kept in its snapshot (Snapshot.Groups; a snapshot without it has
//     none): CommitOffsets replaces a group's offsets of the partitions it
//     names, all of them or, when one names an unregistered topic or
//     partition (ErrUnknownTopic), none; DeleteGroupOffsets removes a
//     group's. Groups are sorted by id, each one's offsets by topic and
//     partition, one per partition, never written in place.
//
// Built with -tags invariants (make test does), invariants.go checks 3, 4
// and 6 on the whole table after every Apply and Builder.Finish (a
// restore), and on a sample of Views taken, and panics naming the segment
// and the broken property: replica sets, partition chains (9), committed
// offsets (11), sealed fields against those
// first seen sealed, each broker's index against the filter of all
// segments, the id order of the chunks, earlier Views unchanged. Tables
// above 256 segments are checked on every k-th call only. Without the tag
// the checks compile to nothing (invariants_off.go); meta.Invariants
// reports which build this is.
package meta
