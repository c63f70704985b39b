package meta

import (
	"cmp"
	"fmt"
	"slices"
)

// Kafka consumer groups' committed offsets (invariant 11): data, kept by
// the control plane so that they survive what the records survive.

const (
	// MaxGroupLen bounds a consumer group id, in bytes.
	MaxGroupLen = 255
	// MaxOffsetMetadata bounds a committed offset's metadata, in bytes
	// (Kafka's offset.metadata.max.bytes).
	MaxOffsetMetadata = 4096
)

// PartitionOffset is a group's committed offset of one partition: the
// next Kafka offset the group consumes there, with the client's metadata
// and the leader epoch it named (-1: none).
type PartitionOffset struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	Offset      int64  `json:"offset"`
	LeaderEpoch int32  `json:"leader_epoch"`
	Metadata    string `json:"metadata,omitempty"`
}

// GroupOffsets is one group's committed offsets, sorted by topic and
// partition, one per partition.
type GroupOffsets struct {
	Group   string            `json:"group"`
	Offsets []PartitionOffset `json:"offsets"`
}

// comparePartition orders offsets by topic, then partition.
func comparePartition(a, b PartitionOffset) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// validateGroup checks a group id: 1 to MaxGroupLen bytes.
func validateGroup(op, group string) error {
	if group == "" || len(group) > MaxGroupLen {
		return fmt.Errorf("%w: %s: group id %.40q: %d bytes, want 1 to %d", ErrInvalid, op, group, len(group), MaxGroupLen)
	}
	return nil
}

// Validate checks one offset: a valid topic name, a partition below
// MaxPartitions, an offset of at least 0, metadata of at most
// MaxOffsetMetadata bytes.
func (o PartitionOffset) Validate() error {
	if err := ValidateTopicName(o.Topic); err != nil {
		return err
	}
	switch {
	case o.Partition < 0 || o.Partition >= MaxPartitions:
		return fmt.Errorf("%w: offset of %s/%d: partition %d: want 0 to %d", ErrInvalid, o.Topic, o.Partition, o.Partition, MaxPartitions-1)
	case o.Offset < 0:
		return fmt.Errorf("%w: offset of %s/%d: %d is negative", ErrInvalid, o.Topic, o.Partition, o.Offset)
	case len(o.Metadata) > MaxOffsetMetadata:
		return fmt.Errorf("%w: offset of %s/%d: metadata of %d bytes, more than %d", ErrInvalid, o.Topic, o.Partition, len(o.Metadata), MaxOffsetMetadata)
	}
	return nil
}

// Validate checks the group id and every offset, and that no partition
// appears twice (sorted or not).
func (g GroupOffsets) Validate() error {
	if err := validateGroup("group offsets", g.Group); err != nil {
		return err
	}
	return validateOffsets(g.Group, g.Offsets)
}

func validateOffsets(group string, offsets []PartitionOffset) error {
	seen := make(map[PartitionOffset]bool, len(offsets))
	for _, o := range offsets {
		if err := o.Validate(); err != nil {
			return fmt.Errorf("group %s: %w", group, err)
		}
		k := PartitionOffset{Topic: o.Topic, Partition: o.Partition}
		if seen[k] {
			return fmt.Errorf("%w: group %s: partition %s/%d given twice", ErrInvalid, group, o.Topic, o.Partition)
		}
		seen[k] = true
	}
	return nil
}

// CommitOffsets stores a group's committed offsets of some partitions at
// once (one Kafka OffsetCommit): each replaces the partition's earlier one.
// Apply refuses it whole, changing nothing, when a topic or partition is
// not registered (ErrUnknownTopic).
type CommitOffsets struct {
	Group   string            `json:"group"`
	Offsets []PartitionOffset `json:"offsets"`
}

// Op implements Command.
func (CommitOffsets) Op() string { return "commit_offsets" }

// Validate implements Command: a valid group id, at least one offset, each
// valid, no partition twice.
func (c CommitOffsets) Validate() error {
	if err := validateGroup(c.Op(), c.Group); err != nil {
		return err
	}
	if len(c.Offsets) == 0 {
		return fmt.Errorf("%w: %s: group %s: no offsets", ErrInvalid, c.Op(), c.Group)
	}
	return validateOffsets(c.Group, c.Offsets)
}

// DeleteGroupOffsets removes every committed offset of a group (Kafka's
// DeleteGroups); a group without any is left as it is.
type DeleteGroupOffsets struct {
	Group string `json:"group"`
}

// Op implements Command.
func (DeleteGroupOffsets) Op() string { return "delete_group_offsets" }

// Validate implements Command.
func (c DeleteGroupOffsets) Validate() error { return validateGroup(c.Op(), c.Group) }

// findGroup is the position of group in groups (sorted by group) and
// whether it is there.
func findGroup(groups []GroupOffsets, group string) (int, bool) {
	return slices.BinarySearchFunc(groups, group, func(g GroupOffsets, id string) int { return cmp.Compare(g.Group, id) })
}

// commitOffsets returns groups with c applied; groups and its offsets are
// never written in place (Views share them).
func commitOffsets(groups []GroupOffsets, topics []Topic, c CommitOffsets) ([]GroupOffsets, error) {
	for _, o := range c.Offsets {
		if t, ok := findTopic(topics, o.Topic); !ok || o.Partition >= t.Partitions {
			return groups, fmt.Errorf("%w: %s: group %s: topic %q partition %d is not registered", ErrUnknownTopic, c.Op(), c.Group, o.Topic, o.Partition)
		}
	}
	i, ok := findGroup(groups, c.Group)
	var offsets []PartitionOffset
	if ok {
		offsets = slices.Clone(groups[i].Offsets)
	}
	for _, o := range c.Offsets {
		j, found := slices.BinarySearchFunc(offsets, o, comparePartition)
		if found {
			offsets[j] = o
		} else {
			offsets = slices.Insert(offsets, j, o)
		}
	}
	out := slices.Clone(groups)
	if ok {
		out[i].Offsets = offsets
	} else {
		out = slices.Insert(out, i, GroupOffsets{Group: c.Group, Offsets: offsets})
	}
	return out, nil
}

// deleteGroup returns groups without group, never written in place.
func deleteGroup(groups []GroupOffsets, group string) []GroupOffsets {
	i, ok := findGroup(groups, group)
	if !ok {
		return groups
	}
	return slices.Delete(slices.Clone(groups), i, i+1)
}

// sortGroups returns a sorted copy of groups (a snapshot's, which need
// not be sorted), each group's offsets sorted too.
func sortGroups(groups []GroupOffsets) []GroupOffsets {
	out := slices.Clone(groups)
	for i := range out {
		out[i].Offsets = slices.Clone(out[i].Offsets)
		slices.SortStableFunc(out[i].Offsets, comparePartition)
	}
	slices.SortStableFunc(out, func(a, b GroupOffsets) int { return cmp.Compare(a.Group, b.Group) })
	return out
}

// Groups returns every group's committed offsets, sorted by group; shared,
// the caller must not modify it.
func (v *View) Groups() []GroupOffsets { return v.groups }

// Offsets returns group's committed offsets, sorted by topic and
// partition (nil for a group without any); shared, the caller must not
// modify it.
func (v *View) Offsets(group string) []PartitionOffset {
	if i, ok := findGroup(v.groups, group); ok {
		return v.groups[i].Offsets
	}
	return nil
}

// cloneGroups is a deep copy of groups, sharing no memory with it (nil
// for none).
func cloneGroups(groups []GroupOffsets) []GroupOffsets {
	if len(groups) == 0 {
		return nil
	}
	out := slices.Clone(groups)
	for i := range out {
		out[i].Offsets = slices.Clone(out[i].Offsets)
	}
	return out
}
