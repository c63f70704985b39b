package meta

import (
	"cmp"
	"fmt"
	"slices"
)

// Table is mutable metadata that applies Commands in order: the state
// machine behind every control plane, and the in-memory control plane of
// simulations. It is not safe for concurrent use; the caller serialises.
//
// The zero Table is empty with replication factor zero, which
// SetReplicationFactor sets.
type Table struct {
	index    uint64
	factor   int
	brokers  map[BrokerID]Broker
	segments map[SegmentID]Segment
}

// NewTable returns an empty Table with the given replication factor.
func NewTable(factor int) *Table {
	return &Table{factor: factor, brokers: map[BrokerID]Broker{}, segments: map[SegmentID]Segment{}}
}

// TableFromSnapshot returns a Table holding a copy of s.
func TableFromSnapshot(s Snapshot) *Table {
	t := NewTable(s.ReplicationFactor)
	t.index = s.Index
	for _, b := range s.Brokers {
		t.brokers[b.ID] = b
	}
	for _, seg := range s.Segments {
		t.segments[seg.ID] = seg.Clone()
	}
	return t
}

// Index is the index of the last applied command.
func (t *Table) Index() uint64 { return t.index }

// Apply applies c as the command at index. It validates c, returns an error
// that wraps ErrInvalid, ErrUnknownSegment, ErrSegmentExists,
// ErrStaleReplicas, ErrSealed or ErrNotSealed when c cannot apply, and then
// leaves the table unchanged but for the index: a refused command still
// occupies its log position. Whatever the command, a change to a sealed
// segment's start_offset, length, byte_size, checksum or sealed flag is
// refused with ErrSealed (invariant 4).
func (t *Table) Apply(index uint64, c Command) error {
	if t.brokers == nil {
		t.brokers, t.segments = map[BrokerID]Broker{}, map[SegmentID]Segment{}
	}
	if index > t.index {
		t.index = index
	}
	if err := c.Validate(); err != nil {
		return err
	}
	switch c := c.(type) {
	case RegisterBroker:
		t.brokers[c.Broker.ID] = c.Broker
	case CreateSegment:
		if _, ok := t.segments[c.Segment.ID]; ok {
			return fmt.Errorf("%w: %s", ErrSegmentExists, c.Segment.ID)
		}
		seg := c.Segment.Clone()
		seg.Version = 1
		t.segments[seg.ID] = seg
	case SealSegment:
		seg, ok := t.segments[c.ID]
		if !ok {
			return fmt.Errorf("%w: %s", ErrUnknownSegment, c.ID)
		}
		next, err := c.ApplyTo(seg)
		if err != nil {
			return err
		}
		return t.replace(c.Op(), seg, next)
	case SetSegmentReplicas:
		seg, ok := t.segments[c.ID]
		if !ok {
			return fmt.Errorf("%w: %s", ErrUnknownSegment, c.ID)
		}
		next, err := c.ApplyTo(seg)
		if err != nil {
			return err
		}
		return t.replace(c.Op(), seg, next)
	case SetReplicationFactor:
		t.factor = c.Factor
	default:
		panic(fmt.Sprintf("meta: Table.Apply: unknown command type %T", c))
	}
	return nil
}

// replace stores next in place of prev, the segment's current value, unless
// that changes what sealing fixed (invariant 4): whatever a command's ApplyTo
// computes, a sealed segment's offsets, size and checksum stay as they are.
func (t *Table) replace(op string, prev, next Segment) error {
	if err := SealedChange(op, prev, next); err != nil {
		return err
	}
	t.segments[next.ID] = next
	return nil
}

// CheckRestore returns nil unless installing s in place of t would change a
// segment that t holds sealed (invariant 4): its start_offset, length,
// byte_size or checksum, or unseal it. The error wraps ErrSealed and names
// the first such segment (in s's order), the fields, and their old and new
// values. A segment s does not hold is not checked.
func (t *Table) CheckRestore(s *Snapshot) error {
	for i := range s.Segments {
		next := &s.Segments[i]
		if prev, ok := t.segments[next.ID]; ok {
			if err := SealedChange("restore snapshot", prev, *next); err != nil {
				return fmt.Errorf("snapshot at index %d: %w", s.Index, err)
			}
		}
	}
	return nil
}

// Segment returns a copy of the segment named id.
func (t *Table) Segment(id SegmentID) (Segment, bool) {
	s, ok := t.segments[id]
	if !ok {
		return Segment{}, false
	}
	return s.Clone(), true
}

// Len is the number of segments.
func (t *Table) Len() int { return len(t.segments) }

// Snapshot returns a sorted copy of the whole table.
func (t *Table) Snapshot() Snapshot {
	s := Snapshot{Index: t.index, ReplicationFactor: t.factor,
		Brokers:  make([]Broker, 0, len(t.brokers)),
		Segments: make([]Segment, 0, len(t.segments))}
	for _, b := range t.brokers {
		s.Brokers = append(s.Brokers, b)
	}
	for _, seg := range t.segments {
		s.Segments = append(s.Segments, seg.Clone())
	}
	slices.SortFunc(s.Brokers, func(a, b Broker) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(s.Segments, func(a, b Segment) int { return cmp.Compare(a.ID, b.ID) })
	return s
}
