package meta

import (
	"fmt"
	"slices"
)

// Builder makes a Table from segments given in increasing id order, one
// at a time: the restore of a streamed snapshot, with no flat copy of the
// segments beside the table. Chunks fill completely.
type Builder struct {
	t    *Table
	prev *View
	k, i int // cursor in prev's id order
	last SegmentID
	n    int
	tops []Topic
	grps []GroupOffsets
}

// NewBuilder returns an empty Builder. When prev is not nil, Add refuses a
// segment that would change one prev holds sealed (Table.CheckRestore,
// per segment).
func NewBuilder(prev *View) *Builder { return &Builder{t: &Table{}, prev: prev} }

// Add appends a copy of seg. It refuses, with an error wrapping ErrInvalid,
// a segment whose id does not follow the last one added, and with one
// wrapping ErrSealed (SealedChange, op "restore snapshot") a segment that
// would change one prev holds sealed. The segment is not otherwise
// validated.
func (b *Builder) Add(seg *Segment) error {
	if b.n > 0 && seg.ID <= b.last {
		return fmt.Errorf("%w: segments not sorted by id or duplicated at %s", ErrInvalid, seg.ID)
	}
	if prev := b.prevAt(seg.ID); prev != nil {
		if err := SealedChange("restore snapshot", *prev, *seg); err != nil {
			return err
		}
	}
	t := b.t
	s := *seg
	s.ID = t.intern(s.ID)
	s.Replicas = t.packReplicas(s.Replicas)
	serial := t.segs.add(s, 0)
	t.ids.appendFull(serial, 0)
	for j, r := range s.Replicas {
		if slices.Contains(s.Replicas[:j], r) {
			continue
		}
		l := t.held[r]
		if l == nil {
			if t.held == nil {
				t.held = map[BrokerID]*serialList{}
			}
			l = &serialList{}
			t.held[r] = l
			t.heldIDs = append(t.heldIDs, r)
		}
		l.appendFull(serial, 0)
	}
	b.last = s.ID
	b.n++
	return nil
}

// prevAt advances the cursor in prev to id and returns prev's segment id,
// or nil.
func (b *Builder) prevAt(id SegmentID) *Segment {
	if b.prev == nil {
		return nil
	}
	for b.k < len(b.prev.ids) {
		c := b.prev.ids[b.k]
		if b.i == len(c) {
			b.k, b.i = b.k+1, 0
			continue
		}
		s := b.prev.seg(c[b.i])
		switch {
		case s.ID < id:
			b.i++
		case s.ID == id:
			return s
		default:
			return nil
		}
	}
	return nil
}

// SetTopics sets the topic registry of the Table Finish returns; topics
// must be sorted by name.
func (b *Builder) SetTopics(topics []Topic) { b.tops = slices.Clone(topics) }

// SetGroups sets the committed offsets of the Table Finish returns;
// groups must be sorted by group and each one's offsets by partition
// (sortGroups).
func (b *Builder) SetGroups(groups []GroupOffsets) { b.grps = groups }

// Len is the number of segments added.
func (b *Builder) Len() int { return b.n }

// Finish returns the Table; brokers must be sorted by id. The Builder
// must not be used again.
func (b *Builder) Finish(index uint64, factor int, brokers []Broker) *Table {
	t := b.t
	b.t = nil
	t.index, t.factor, t.brokers, t.topics, t.groups = index, factor, slices.Clone(brokers), b.tops, b.grps
	slices.Sort(t.heldIDs)
	t.ids.trim()
	for _, l := range t.held {
		l.trim()
	}
	t.checkInvariants("restore")
	return t
}
