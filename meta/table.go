package meta

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Table is mutable metadata that applies Commands in order: the state
// machine behind every control plane, and the in-memory control plane of
// simulations. It is not safe for concurrent use; the caller serialises
// (View included: it marks the table's memory shared). A View it returned
// is immutable and safe for concurrent readers.
//
// The zero Table is empty with replication factor zero, which
// SetReplicationFactor sets.
//
// Layout (~135 B per sealed segment with 20-byte ids and 3 replicas):
// segments by serial (creation order) in chunks; an index of serials
// sorted by id in chunks; per broker, the serials of the segments naming it,
// sorted, in chunks; ids and initial replica sets packed in append-only
// arenas. All of it is copy-on-write against Views (see chunks.go).
type Table struct {
	index   uint64
	factor  int
	brokers []Broker       // sorted by id; never written in place (Views share it)
	topics  []Topic        // sorted by name; never written in place (Views share it)
	groups  []GroupOffsets // sorted by group; never written in place (Views share it)
	gen     uint64         // generation: increments when a View is taken
	segs    segStore
	ids     serialList               // serials sorted by segment id
	held    map[BrokerID]*serialList // serials naming the broker, sorted
	heldIDs []BrokerID               // keys of held, sorted; never written in place
	idArena *strings.Builder         // ids live here: never rewritten
	rsArena []BrokerID               // initial replica sets: never rewritten
	view    *View                    // the last View, nil after any Apply
	inv     invState                 // what the invariants build checks against; empty otherwise
}

// NewTable returns an empty Table with the given replication factor.
func NewTable(factor int) *Table { return &Table{factor: factor} }

// TableFromSnapshot returns a Table holding a copy of s. s need not be
// sorted; of segments sharing an id, the last wins.
func TableFromSnapshot(s Snapshot) *Table {
	b := NewBuilder(nil)
	for _, i := range sortedUnique(s.Segments) {
		if err := b.Add(&s.Segments[i]); err != nil {
			panic(fmt.Sprintf("meta: TableFromSnapshot: %v", err)) // sortedUnique ordered them
		}
	}
	brokers := slices.Clone(s.Brokers)
	slices.SortStableFunc(brokers, func(a, b Broker) int { return cmp.Compare(a.ID, b.ID) })
	topics := slices.Clone(s.Topics)
	slices.SortStableFunc(topics, func(a, b Topic) int { return cmp.Compare(a.Name, b.Name) })
	b.SetTopics(topics)
	b.SetGroups(sortGroups(s.Groups))
	return b.Finish(s.Index, s.ReplicationFactor, brokers)
}

// sortedUnique returns the positions of segs in id order, the last of
// each id only.
func sortedUnique(segs []Segment) []int {
	pos := make([]int, len(segs))
	sorted := true
	for i := range segs {
		pos[i] = i
		if i > 0 && segs[i-1].ID >= segs[i].ID {
			sorted = false
		}
	}
	if sorted {
		return pos
	}
	slices.SortStableFunc(pos, func(a, b int) int { return cmp.Compare(segs[a].ID, segs[b].ID) })
	out := pos[:0]
	for _, p := range pos {
		if n := len(out); n > 0 && segs[out[n-1]].ID == segs[p].ID {
			out[n-1] = p
			continue
		}
		out = append(out, p)
	}
	return out
}

// Index is the index of the last applied command.
func (t *Table) Index() uint64 { return t.index }

// ReplicationFactor is the factor the last SetReplicationFactor set (or
// the one the table was made with), as View.ReplicationFactor.
func (t *Table) ReplicationFactor() int { return t.factor }

// Apply applies c as the command at index. It validates c, returns an error
// that wraps ErrInvalid, ErrUnknownSegment, ErrSegmentExists,
// ErrStaleReplicas, ErrSealed, ErrNotSealed, ErrUnknownBroker,
// ErrMaintenanceFull, ErrTopicExists or ErrUnknownTopic when c cannot
// apply, and then
// leaves the table unchanged but for the index: a refused command still
// occupies its log position. Whatever the command, a change to a sealed
// segment's start_offset, length, byte_size, checksum or sealed flag is
// refused with ErrSealed (invariant 4).
func (t *Table) Apply(index uint64, c Command) error {
	err := t.apply(index, c)
	t.checkInvariants(c.Op())
	return err
}

func (t *Table) apply(index uint64, c Command) error {
	t.view = nil
	if index > t.index {
		t.index = index
	}
	if err := c.Validate(); err != nil {
		return err
	}
	switch c := c.(type) {
	case RegisterBroker:
		i, ok := slices.BinarySearchFunc(t.brokers, c.Broker.ID, func(b Broker, id BrokerID) int { return cmp.Compare(b.ID, id) })
		bs := slices.Clone(t.brokers) // never in place: Views share t.brokers
		if ok {
			mode, until := bs[i].Mode, bs[i].Until
			bs[i] = c.Broker
			bs[i].Mode, bs[i].Until = mode, until
		} else {
			b := c.Broker
			b.Mode, b.Until = "", time.Time{}
			bs = slices.Insert(bs, i, b)
		}
		t.brokers = bs
	case CreateSegment:
		return t.create(c.Segment)
	case SealSegment:
		serial, ok := t.lookup(c.ID)
		if !ok {
			return fmt.Errorf("%w: %s", ErrUnknownSegment, c.ID)
		}
		prev := *t.segs.get(serial)
		next, err := c.ApplyTo(prev)
		if err != nil {
			return err
		}
		return t.replace(c.Op(), serial, prev, next)
	case SetSegmentReplicas:
		serial, ok := t.lookup(c.ID)
		if !ok {
			return fmt.Errorf("%w: %s", ErrUnknownSegment, c.ID)
		}
		prev := *t.segs.get(serial)
		next, err := c.ApplyTo(prev)
		if err != nil {
			return err
		}
		return t.replace(c.Op(), serial, prev, next)
	case SetReplicationFactor:
		t.factor = c.Factor
	case SetBrokerMode:
		bs, err := applyMode(t.brokers, c)
		if err != nil {
			return err
		}
		t.brokers = bs
	case CreateTopic:
		ts, err := addTopic(t.topics, c.Topic)
		if err != nil {
			return err
		}
		t.topics = ts
	case AllocateProducerIDs:
		// Its log index names the block (ProducerIDBlock): no state.
	case CommitOffsets:
		gs, err := commitOffsets(t.groups, t.topics, c)
		if err != nil {
			return err
		}
		t.groups = gs
	case DeleteGroupOffsets:
		t.groups = deleteGroup(t.groups, c.Group)
	default:
		panic(fmt.Sprintf("meta: Table.Apply: unknown command type %T", c))
	}
	return nil
}

func (t *Table) create(seg Segment) error {
	k, i, ok := findID(t.segs.c, t.ids.c, seg.ID)
	if ok {
		return fmt.Errorf("%w: %s", ErrSegmentExists, seg.ID)
	}
	if err := checkChainLink(t.topics, seg, t.Segment); err != nil {
		return err
	}
	seg.ID = t.intern(seg.ID)
	seg.Replicas = t.packReplicas(seg.Replicas)
	seg.Version = 1
	serial := t.segs.add(seg, t.gen)
	t.ids.insert(k, i, serial, t.gen)
	for j, b := range seg.Replicas {
		if !slices.Contains(seg.Replicas[:j], b) {
			t.hold(b, serial)
		}
	}
	return nil
}

// replace stores next in place of prev, the segment's current value, unless
// that changes what sealing fixed (invariant 4): whatever a command's ApplyTo
// computes, a sealed segment's offsets, size and checksum stay as they are.
// next.Replicas is not shared with anything.
func (t *Table) replace(op string, serial uint32, prev, next Segment) error {
	if err := SealedChange(op, prev, next); err != nil {
		return err
	}
	if next.Version == prev.Version {
		return nil // sealed again with the same values: nothing changes
	}
	t.segs.set(serial, next, t.gen)
	for _, b := range prev.Replicas {
		if !next.HasReplica(b) {
			t.release(b, serial)
		}
	}
	for j, b := range next.Replicas {
		if !prev.HasReplica(b) && !slices.Contains(next.Replicas[:j], b) {
			t.hold(b, serial)
		}
	}
	return nil
}

// hold adds serial to broker b's index.
func (t *Table) hold(b BrokerID, serial uint32) {
	l := t.held[b]
	if l == nil {
		if t.held == nil {
			t.held = map[BrokerID]*serialList{}
		}
		l = &serialList{top: t.gen}
		t.held[b] = l
		i, _ := slices.BinarySearch(t.heldIDs, b)
		t.heldIDs = slices.Insert(slices.Clone(t.heldIDs), i, b) // never in place
	}
	if k, i, ok := l.findSerial(serial); !ok {
		l.insert(k, i, serial, t.gen)
	}
}

// release removes serial from broker b's index.
func (t *Table) release(b BrokerID, serial uint32) {
	if l := t.held[b]; l != nil {
		if k, i, ok := l.findSerial(serial); ok {
			l.remove(k, i, t.gen)
		}
	}
}

// idArenaSize is the size of each block of the id arena.
const idArenaSize = 64 << 10

// intern copies id into the id arena: the string shares a block with
// other ids and the block is never written again where a string points.
func (t *Table) intern(id SegmentID) SegmentID {
	if len(id) > idArenaSize/8 {
		return SegmentID(strings.Clone(string(id)))
	}
	if t.idArena == nil || t.idArena.Cap()-t.idArena.Len() < len(id) {
		t.idArena = &strings.Builder{}
		t.idArena.Grow(idArenaSize)
	}
	start := t.idArena.Len()
	t.idArena.WriteString(string(id))
	return SegmentID(t.idArena.String()[start:])
}

// packReplicas copies rs into the replica arena (nil when empty). The
// slice's capacity ends at its length: an append to it copies.
func (t *Table) packReplicas(rs []BrokerID) []BrokerID {
	if len(rs) == 0 {
		return nil
	}
	if cap(t.rsArena)-len(t.rsArena) < len(rs) {
		t.rsArena = make([]BrokerID, 0, max(4096, len(rs)))
	}
	n := len(t.rsArena)
	t.rsArena = append(t.rsArena, rs...)
	return t.rsArena[n:len(t.rsArena):len(t.rsArena)]
}

// lookup returns the serial of segment id.
func (t *Table) lookup(id SegmentID) (uint32, bool) {
	k, i, ok := findID(t.segs.c, t.ids.c, id)
	if !ok {
		return 0, false
	}
	return t.ids.c[k][i], true
}

// findID locates id in an id index over segs: the chunk and position
// where it is or would be inserted (chunk len(ids) only when ids is empty;
// past the last chunk's end when id follows every id).
func findID(segs [][][]Segment, ids [][]uint32, id SegmentID) (k, i int, ok bool) {
	idOf := func(s uint32) SegmentID { h, m, i := segAt(s); return segs[h][m][i].ID }
	k, _ = slices.BinarySearchFunc(ids, id, func(c []uint32, id SegmentID) int {
		if idOf(c[len(c)-1]) < id {
			return -1
		}
		return 1
	})
	if k == len(ids) {
		if k == 0 {
			return 0, 0, false
		}
		return k - 1, len(ids[k-1]), false
	}
	i, ok = slices.BinarySearchFunc(ids[k], id, func(s uint32, id SegmentID) int { return cmp.Compare(idOf(s), id) })
	return k, i, ok
}

// CheckRestore returns nil unless installing s in place of t would change a
// segment that t holds sealed (invariant 4): its start_offset, length,
// byte_size or checksum, or unseal it. The error wraps ErrSealed and names
// the first such segment (in s's order), the fields, and their old and new
// values. A segment s does not hold is not checked.
func (t *Table) CheckRestore(s *Snapshot) error {
	for i := range s.Segments {
		next := &s.Segments[i]
		if serial, ok := t.lookup(next.ID); ok {
			if err := SealedChange("restore snapshot", *t.segs.get(serial), *next); err != nil {
				return fmt.Errorf("snapshot at index %d: %w", s.Index, err)
			}
		}
	}
	return nil
}

// Segment returns a copy of the segment named id.
func (t *Table) Segment(id SegmentID) (Segment, bool) {
	serial, ok := t.lookup(id)
	if !ok {
		return Segment{}, false
	}
	return t.segs.get(serial).Clone(), true
}

// Len is the number of segments.
func (t *Table) Len() int { return t.segs.n }

// Snapshot returns a sorted copy of the whole table.
func (t *Table) Snapshot() Snapshot { return t.peek().Snapshot() }

// View returns the table as it is now, immutable and shared: O(chunks +
// brokers) to make, and the same *View again while nothing was applied
// since. From then on each change copies the chunks it writes to
// (copy-on-write), so the View never changes.
func (t *Table) View() *View {
	if t.view == nil {
		t.view = t.peek()
		t.gen++
		t.sampleView(t.view)
	}
	return t.view
}

// peek returns a View valid only until the next change: it does not mark
// the table's memory shared.
func (t *Table) peek() *View {
	v := &View{index: t.index, factor: t.factor, brokers: t.brokers, topics: t.topics, groups: t.groups,
		segs: t.segs.c, ids: t.ids.c, starts: make([]int, len(t.ids.c)+1),
		held: make([]heldView, len(t.heldIDs))}
	if v.brokers == nil {
		v.brokers = []Broker{}
	}
	for k, c := range t.ids.c {
		v.starts[k+1] = v.starts[k] + len(c)
	}
	for i, b := range t.heldIDs {
		l := t.held[b]
		v.held[i] = heldView{id: b, n: l.n, c: l.c}
	}
	return v
}
