package meta

import (
	"cmp"
	"iter"
	"slices"
)

// View is the metadata at one applied index, immutable and shared: what
// Table.View and NewView return. Every method is safe for concurrent use.
// The slices and *Segment it returns are shared with other holders and
// must not be modified.
type View struct {
	index   uint64
	factor  int
	brokers []Broker
	topics  []Topic        // sorted by name
	groups  []GroupOffsets // sorted by group
	segs    [][][]Segment  // by serial: segs[h][m][i], h, m, i = segAt(s)
	ids     [][]uint32     // serials in id order
	starts  []int          // starts[k]: position of ids[k][0]; starts[len(ids)] = Len
	held    []heldView     // sorted by broker
}

type heldView struct {
	id BrokerID
	n  int
	c  [][]uint32 // serials, ascending
}

// NewView returns a View holding a copy of s, for tests and tools. s need
// not be sorted or valid (it is not validated, as TableFromSnapshot does
// not); of segments sharing an id, the last wins.
func NewView(s Snapshot) *View { return TableFromSnapshot(s).View() }

// Index is the applied index the view reflects.
func (v *View) Index() uint64 { return v.index }

// ReplicationFactor is the number of replicas every segment should have.
func (v *View) ReplicationFactor() int { return v.factor }

// Brokers returns the registered brokers sorted by id; shared, the caller
// must not modify it.
func (v *View) Brokers() []Broker { return v.brokers }

// Broker returns the registered broker id.
func (v *View) Broker(id BrokerID) (Broker, bool) {
	i, ok := slices.BinarySearchFunc(v.brokers, id, func(b Broker, id BrokerID) int { return cmp.Compare(b.ID, id) })
	if !ok {
		return Broker{}, false
	}
	return v.brokers[i], true
}

// Len is the number of segments.
func (v *View) Len() int { return v.starts[len(v.starts)-1] }

func (v *View) seg(serial uint32) *Segment { h, m, i := segAt(serial); return &v.segs[h][m][i] }

// At returns the i-th segment in id order (0 <= i < Len, else it panics);
// shared, the caller must not modify it. O(log chunks).
func (v *View) At(i int) *Segment {
	if i < 0 || i >= v.Len() {
		panic("meta: View.At: index out of range")
	}
	k, ok := slices.BinarySearch(v.starts, i)
	if !ok {
		k--
	}
	return v.seg(v.ids[k][i-v.starts[k]])
}

// Find returns the position of segment id in id order, or where it would
// be inserted and false.
func (v *View) Find(id SegmentID) (int, bool) {
	k, i, ok := findID(v.segs, v.ids, id)
	if k == len(v.ids) {
		return 0, false
	}
	return v.starts[k] + i, ok
}

// Segment returns the segment named id; shared, the caller must not
// modify it.
func (v *View) Segment(id SegmentID) (*Segment, bool) {
	k, i, ok := findID(v.segs, v.ids, id)
	if !ok {
		return nil, false
	}
	return v.seg(v.ids[k][i]), true
}

// All yields every segment with its position, in id order; the segments
// are shared and must not be modified.
func (v *View) All() iter.Seq2[int, *Segment] {
	return func(yield func(int, *Segment) bool) {
		pos := 0
		for _, c := range v.ids {
			for _, s := range c {
				if !yield(pos, v.seg(s)) {
					return
				}
				pos++
			}
		}
	}
}

func (v *View) heldBy(b BrokerID) *heldView {
	i, ok := slices.BinarySearchFunc(v.held, b, func(h heldView, b BrokerID) int { return cmp.Compare(h.id, b) })
	if !ok {
		return nil
	}
	return &v.held[i]
}

// HeldBy yields every segment whose Replicas name b, once each, in the
// order the segments were created (restored from a snapshot: id order,
// then creation order). O(segments yielded): an index kept by
// Table.Apply, not a scan. The segments are shared and must not be
// modified.
func (v *View) HeldBy(b BrokerID) iter.Seq[*Segment] {
	return func(yield func(*Segment) bool) {
		h := v.heldBy(b)
		if h == nil {
			return
		}
		for _, c := range h.c {
			for _, s := range c {
				if !yield(v.seg(s)) {
					return
				}
			}
		}
	}
}

// Held is the number of segments whose Replicas name b.
func (v *View) Held(b BrokerID) int {
	if h := v.heldBy(b); h != nil {
		return h.n
	}
	return 0
}

// Snapshot returns a deep copy of the view, sorted by id, sharing no
// memory with it: three allocations but for the ids, which are immutable
// strings and shared.
func (v *View) Snapshot() Snapshot {
	s := Snapshot{Index: v.index, ReplicationFactor: v.factor,
		Brokers:  append(make([]Broker, 0, len(v.brokers)), v.brokers...),
		Topics:   slices.Clone(v.topics),
		Groups:   cloneGroups(v.groups),
		Segments: make([]Segment, v.Len())}
	n := 0
	for _, seg := range v.All() {
		n += len(seg.Replicas)
	}
	arena := make([]BrokerID, n)
	off := 0
	for i, seg := range v.All() {
		s.Segments[i] = *seg
		if len(seg.Replicas) == 0 {
			s.Segments[i].Replicas = nil
			continue
		}
		k := copy(arena[off:], seg.Replicas)
		s.Segments[i].Replicas = arena[off : off+k : off+k]
		off += k
	}
	return s
}
