package meta

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Errors of the topic registry, returned by Apply. Match them with errors.Is.
var (
	// ErrTopicExists: CreateTopic of a name already registered.
	ErrTopicExists = errors.New("meta: topic exists")
	// ErrUnknownTopic: a partition segment of a topic that is not
	// registered, or of a partition the topic does not have.
	ErrUnknownTopic = errors.New("meta: unknown topic or partition")
)

const (
	// MaxTopicLen bounds a topic name: Kafka allows 249 bytes, but a
	// partition segment's id (PartitionSegmentID) adds 19 bytes to the
	// name and a SegmentID is at most MaxSegmentIDLen.
	MaxTopicLen = MaxSegmentIDLen - len("k.") - len(".00000.0000000000")
	// MaxPartitions bounds a topic's partition count: a partition's index
	// takes five digits in its segments' ids.
	MaxPartitions = 100000
	// MaxSeq bounds a partition segment's sequence number (ten digits).
	MaxSeq = 9999999999
)

// Topic is a registered Kafka topic: Partitions partitions, indexed
// 0..Partitions-1, each a chain of partition segments.
type Topic struct {
	Name       string `json:"name"`
	Partitions int32  `json:"partitions"`
}

// ValidateTopicName checks Kafka's topic name rules within malachi's
// bound: 1 to MaxTopicLen bytes of [A-Za-z0-9._-], not "." or "..".
func ValidateTopicName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: topic name is empty", ErrInvalid)
	}
	if len(name) > MaxTopicLen {
		return fmt.Errorf("%w: topic name %.40q...: %d bytes, more than %d", ErrInvalid, name, len(name), MaxTopicLen)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w: topic name %q is reserved", ErrInvalid, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: topic name %q: byte %q at %d is not one of [A-Za-z0-9._-]", ErrInvalid, name, c, i)
		}
	}
	return nil
}

// Validate checks the name and the partition count (1 to MaxPartitions).
func (t Topic) Validate() error {
	if err := ValidateTopicName(t.Name); err != nil {
		return err
	}
	if t.Partitions < 1 || t.Partitions > MaxPartitions {
		return fmt.Errorf("%w: topic %s: %d partitions: want 1 to %d", ErrInvalid, t.Name, t.Partitions, MaxPartitions)
	}
	return nil
}

// PartitionSegmentID names the seq-th segment of a topic's partition:
// "k.<topic>.<partition, 5 digits>.<seq, 10 digits>". The fixed-width
// tail makes the name parse back unambiguously whatever dots the topic
// holds, and puts a topic's segments near each other in id order.
// topic, partition and seq must be valid (ValidateTopicName, below
// MaxPartitions, at most MaxSeq).
func PartitionSegmentID(topic string, partition int32, seq uint64) SegmentID {
	b := make([]byte, 0, len(topic)+19)
	b = append(append(b, "k."...), topic...)
	b = appendPadded(append(b, '.'), uint64(partition), 5)
	b = appendPadded(append(b, '.'), seq, 10)
	return SegmentID(b)
}

func appendPadded(b []byte, v uint64, width int) []byte {
	s := strconv.FormatUint(v, 10)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// ParsePartitionSegment parses an id written by PartitionSegmentID; ok is
// false for any other id.
func ParsePartitionSegment(id SegmentID) (topic string, partition int32, seq uint64, ok bool) {
	s := string(id)
	const tail = len(".00000.0000000000")
	if len(s) < len("k.")+1+tail || !strings.HasPrefix(s, "k.") {
		return "", 0, 0, false
	}
	topic, rest := s[2:len(s)-tail], s[len(s)-tail:]
	if rest[0] != '.' || rest[6] != '.' || !digits(rest[1:6]) || !digits(rest[7:]) {
		return "", 0, 0, false
	}
	if ValidateTopicName(topic) != nil {
		return "", 0, 0, false
	}
	p, _ := strconv.ParseUint(rest[1:6], 10, 32)
	q, _ := strconv.ParseUint(rest[7:], 10, 64)
	return topic, int32(p), q, true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// CreateTopic registers a topic. Its partitions' segments are created
// afterwards, each by CreateSegment with a PartitionSegmentID.
type CreateTopic struct {
	Topic Topic `json:"topic"`
}

// Op implements Command.
func (CreateTopic) Op() string { return "create_topic" }

// Validate implements Command.
func (c CreateTopic) Validate() error { return c.Topic.Validate() }

// AllocateProducerIDs reserves the block of Kafka producer ids named by
// the log index it is committed at (ProducerIDBlock). It changes no state:
// the control plane's log never gives two commands one index, so no two
// blocks overlap.
type AllocateProducerIDs struct {
	Broker BrokerID `json:"broker"`
}

// Op implements Command.
func (AllocateProducerIDs) Op() string { return "allocate_producer_ids" }

// Validate implements Command.
func (c AllocateProducerIDs) Validate() error {
	if c.Broker == 0 {
		return fmt.Errorf("%w: allocate_producer_ids: broker id 0 is reserved", ErrInvalid)
	}
	return nil
}

// ProducerIDBlockSize is the number of producer ids in one block.
const ProducerIDBlockSize = 1 << 10

// ProducerIDBlock is the first producer id of the block reserved by the
// AllocateProducerIDs committed at index; the block holds
// ProducerIDBlockSize ids.
func ProducerIDBlock(index uint64) int64 { return int64(index) * ProducerIDBlockSize }

// addTopic returns topics (sorted by name) with t inserted; topics is
// never written in place (Views share it).
func addTopic(topics []Topic, t Topic) ([]Topic, error) {
	i, ok := slices.BinarySearchFunc(topics, t.Name, func(x Topic, n string) int { return cmp.Compare(x.Name, n) })
	if ok {
		return topics, fmt.Errorf("%w: %s (%d partitions)", ErrTopicExists, t.Name, topics[i].Partitions)
	}
	return slices.Insert(slices.Clone(topics), i, t), nil
}

// findTopic returns the topic named name in topics, sorted by name.
func findTopic(topics []Topic, name string) (Topic, bool) {
	i, ok := slices.BinarySearchFunc(topics, name, func(x Topic, n string) int { return cmp.Compare(x.Name, n) })
	if !ok {
		return Topic{}, false
	}
	return topics[i], true
}

// checkChainLink checks a new segment against its partition's chain
// (invariant 9): its topic and partition are registered; seq 0 starts at
// offset 0; seq n > 0 follows segment n-1, which is sealed, and starts at
// its end. prev looks a segment up. Segments not named by
// PartitionSegmentID are not checked.
func checkChainLink(topics []Topic, seg Segment, prev func(SegmentID) (Segment, bool)) error {
	topic, p, seq, ok := ParsePartitionSegment(seg.ID)
	if !ok {
		return nil
	}
	t, ok := findTopic(topics, topic)
	if !ok || p >= t.Partitions {
		return fmt.Errorf("%w: segment %s: topic %q partition %d is not registered", ErrUnknownTopic, seg.ID, topic, p)
	}
	if seq == 0 {
		if seg.StartOffset != 0 {
			return fmt.Errorf("%w: segment %s: the first of its partition starts at %d, want 0", ErrInvalid, seg.ID, seg.StartOffset)
		}
		return nil
	}
	pid := PartitionSegmentID(topic, p, seq-1)
	ps, ok := prev(pid)
	switch {
	case !ok:
		return fmt.Errorf("%w: segment %s: its predecessor %s does not exist", ErrUnknownSegment, seg.ID, pid)
	case !ps.Sealed:
		return fmt.Errorf("%w: segment %s: its predecessor %s is active", ErrNotSealed, seg.ID, pid)
	case seg.StartOffset != ps.EndOffset():
		return fmt.Errorf("%w: segment %s: starts at %d, its predecessor %s ends at %d", ErrInvalid, seg.ID, seg.StartOffset, pid, ps.EndOffset())
	}
	return nil
}

// Topics returns the registered topics sorted by name; shared, the caller
// must not modify it.
func (v *View) Topics() []Topic { return v.topics }

// Topic returns the registered topic name.
func (v *View) Topic(name string) (Topic, bool) { return findTopic(v.topics, name) }

// Chain returns the segments of a topic's partition in seq order: all
// sealed but the last, which is the active one unless the partition is
// being rolled. O(log segments + the topic's segments + those of topics
// whose names extend it). The segments are shared and must not be
// modified.
func (v *View) Chain(topic string, partition int32) []*Segment {
	prefix := "k." + topic + "."
	var out []*Segment
	i, _ := v.Find(SegmentID(prefix))
	for ; i < v.Len(); i++ {
		seg := v.At(i)
		if !strings.HasPrefix(string(seg.ID), prefix) {
			break
		}
		if t, p, _, ok := ParsePartitionSegment(seg.ID); ok && t == topic && p == partition {
			out = append(out, seg)
		}
	}
	return out
}
