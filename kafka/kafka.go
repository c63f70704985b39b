package kafka

import (
	"context"
	"encoding/binary"
	"errors"
)

// Errors the broker's Cluster and Log return; the handlers map each to its
// Kafka error code. Match them with errors.Is; wrap them with context.
var (
	// ErrUnknownTopicOrPartition: no such topic, or no such partition of it
	// (UNKNOWN_TOPIC_OR_PARTITION).
	ErrUnknownTopicOrPartition = errors.New("kafka: unknown topic or partition")
	// ErrNotLeader: this broker does not lead the partition
	// (NOT_LEADER_OR_FOLLOWER); the client refreshes its metadata.
	ErrNotLeader = errors.New("kafka: not the partition's leader")
	// ErrTopicExists: CreateTopic of a name in use (TOPIC_ALREADY_EXISTS).
	ErrTopicExists = errors.New("kafka: topic exists")
	// ErrInvalidTopic: a name the broker does not accept (INVALID_TOPIC_EXCEPTION).
	ErrInvalidTopic = errors.New("kafka: invalid topic name")
	// ErrInvalidPartitions: a partition count below 1 or above the broker's
	// limit (INVALID_PARTITIONS).
	ErrInvalidPartitions = errors.New("kafka: invalid partition count")
	// ErrOffsetOutOfRange: Read of an offset below the log start or above
	// the high watermark (OFFSET_OUT_OF_RANGE).
	ErrOffsetOutOfRange = errors.New("kafka: offset out of range")
)

// Cluster is what the listener asks of the broker it runs in. Its methods
// are called from many connections at once and must be safe for
// concurrent use.
type Cluster interface {
	// Self is this broker's node id.
	Self() int32
	// Brokers lists every broker's Kafka listener, this one included.
	Brokers() []BrokerAddr
	// Topics lists every topic with its partitions. The caller does not
	// modify the result.
	Topics() []TopicInfo
	// CreateTopic creates a topic of partitions partitions and returns when
	// Topics lists it. ErrTopicExists, ErrInvalidTopic, ErrInvalidPartitions.
	CreateTopic(ctx context.Context, name string, partitions int32) error
	// Partition is the log of a partition this broker leads.
	// ErrUnknownTopicOrPartition, ErrNotLeader. The same partition must
	// return the same Log value until its leadership changes: the listener
	// keeps the partition's producer state per Log value, compared with ==,
	// so a Log must be of a comparable type (a pointer).
	Partition(topic string, index int32) (Log, error)
	// NewProducerID returns a producer id no other call in the cluster
	// returned, ever (InitProducerID).
	NewProducerID(ctx context.Context) (int64, error)
}

// BrokerAddr is a broker's Kafka listener.
type BrokerAddr struct {
	NodeID int32
	Host   string
	Port   int32
	Rack   string // "" for none
}

// TopicInfo is a topic and its partitions, indexed 0..len-1.
type TopicInfo struct {
	Name       string
	Partitions []PartitionInfo
}

// PartitionInfo is where a partition lives. Replicas lists the leader too;
// every replica is in sync (the log appends to all of them), so the ISR
// Kafka clients see is Replicas.
type PartitionInfo struct {
	Index       int32
	Leader      int32 // -1: no leader now (LEADER_NOT_AVAILABLE)
	LeaderEpoch int32
	Replicas    []int32
}

// Log is one partition's log on its leader: a sequence of Kafka record
// batches (v2) at increasing offsets. The listener serializes Append calls
// to one Log (it holds the partition's lock across Append); Read, Offsets
// and Wait may run at any time, concurrently with Append.
type Log interface {
	// Append stores batch, one whole record batch of records records
	// (lastOffsetDelta+1), durably on every replica (acks=all) and returns
	// its base offset: the Log assigns it, as its end offset before the
	// call, and writes it into the batch's first 8 bytes (SetBaseOffset)
	// before storing; it may also set the partition leader epoch (bytes
	// 12..16). Neither field is covered by the batch CRC. On success the
	// high watermark is base+records. On error nothing was stored, as far
	// as Read and Offsets ever show: an error after a partial write must
	// leave the log where it was or fail the partition. Append owns batch.
	Append(ctx context.Context, batch []byte, records int32) (base int64, err error)
	// Read returns whole batches, in order, starting with the one holding
	// offset, totalling at most maxBytes except that the first batch is
	// returned whole whatever its size (Kafka's rule, so a consumer always
	// progresses). Nothing at or past the high watermark is returned; offset
	// == high watermark returns nothing. ErrOffsetOutOfRange outside
	// [logStart, highWatermark]. The caller does not modify the result.
	Read(offset int64, maxBytes int32) ([]byte, error)
	// Offsets returns the first offset still stored and the high watermark
	// (the offset the next batch will get).
	Offsets() (logStart, highWatermark int64)
	// Wait returns a channel closed once the high watermark exceeds offset
	// (already closed if it does). Fetch waits on it instead of polling.
	Wait(offset int64) <-chan struct{}
}

// AppendReader is a Log that reads into a buffer its caller owns. The
// listener keeps one such buffer per connection and reuses it once the
// response holding the batches is written, so that a fetch neither
// allocates nor zeroes memory per partition; a Log without it is read
// with Read.
type AppendReader interface {
	// AppendRead appends to dst what Read(offset, maxBytes) returns and
	// returns the extended slice; dst's own bytes are left as they are.
	// Errors are Read's.
	AppendRead(dst []byte, offset int64, maxBytes int32) ([]byte, error)
}

// SetBaseOffset writes offset as the base offset of the record batch at
// the start of batch (its first 8 bytes), for a Log's Append.
func SetBaseOffset(batch []byte, offset int64) {
	binary.BigEndian.PutUint64(batch[:8], uint64(offset))
}

// Groups is what the group coordinator asks of the broker beside Cluster:
// where each group is coordinated and where its committed offsets are
// kept. A Cluster that also implements Groups serves consumer groups
// (found by type assertion); without it every group request is answered
// COORDINATOR_NOT_AVAILABLE. Its methods must be safe for concurrent use.
type Groups interface {
	// Coordinator is the node id of the broker coordinating group: a
	// function of the group id over the live brokers, the same on every
	// broker that holds the same live set. An error (no live broker) is
	// answered COORDINATOR_NOT_AVAILABLE.
	Coordinator(group string) (int32, error)
	// CommitOffsets stores every offset of offsets for group at once, or
	// none: one replicated write. The partitions are known and the offsets
	// within them (the listener checked with PartitionEnd). An error means
	// nothing is known to be stored; on success a FetchOffsets that follows
	// on this broker returns them.
	CommitOffsets(ctx context.Context, group string, offsets []Offset) error
	// FetchOffsets returns group's committed offsets sorted by topic and
	// partition (none for a group never committed), including every commit
	// acknowledged before the call on any broker. The caller does not
	// modify the result. An error (the control plane cannot say) is
	// answered COORDINATOR_NOT_AVAILABLE.
	FetchOffsets(ctx context.Context, group string) ([]Offset, error)
	// DeleteOffsets removes every committed offset of group.
	DeleteOffsets(ctx context.Context, group string) error
	// PartitionEnd is the high watermark of a partition, wherever its
	// leader is. ErrUnknownTopicOrPartition; ErrNotLeader when no broker
	// leads it now.
	PartitionEnd(ctx context.Context, topic string, index int32) (int64, error)
}

// Offset is a group's committed offset of one partition: the next offset
// the group will consume, and the client's metadata string.
type Offset struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32 // -1: none given
	Metadata    string
}

// MaxOffsetMetadata bounds an Offset's Metadata, in bytes (Kafka's
// offset.metadata.max.bytes): longer is OFFSET_METADATA_TOO_LARGE.
const MaxOffsetMetadata = 4096

// MaxGroupLen bounds a group id, in bytes: longer, or empty, is
// INVALID_GROUP_ID.
const MaxGroupLen = 255
