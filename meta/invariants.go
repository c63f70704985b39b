//go:build invariants

package meta

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
)

// Expensive checks of the state machine, compiled in with -tags invariants
// (make test) and out otherwise (invariants_off.go), as Pebble does. After
// every Apply, every Builder.Finish (a restore) and every View taken, the
// table is checked whole and a broken property panics with a message that
// names the segment (or broker, or View) and the property:
//
//   - a replica set names no broker twice and no broker zero;
//   - a sealed segment keeps the offsets, length, byte_size and checksum it
//     was first seen sealed with, and stays sealed;
//   - the id index lists every serial once, in strictly increasing id
//     order, in non-empty chunks of at most listChunk; every segStore chunk
//     but the last is full;
//   - each broker's index (View.HeldBy/Held) is exactly the serials of the
//     segments naming it, ascending, its count right; heldIDs is sorted;
//   - topics are valid and sorted by name; every partition segment names a
//     registered topic and partition, and each partition's chain is seq
//     0..n with no gap, all sealed but the last, each starting where the
//     one before ends (invariant 9);
//   - committed offsets' groups are valid, sorted and unique, each one's
//     offsets sorted, of registered partitions (invariant 11);
//   - the last few Views taken (a sample) read as they did when taken.
//
// On tables of more than invFull segments a check runs on every k-th call
// only (k = segments/invFull + 1), so that the cost per Apply stays bounded.

// Invariants reports whether the expensive checks are compiled in.
const Invariants = true

const (
	invFull  = 256 // segments a table may hold and be checked every time
	invViews = 4   // Views kept to check that later applies leave them unchanged
)

// invState is what the checks remember across calls.
type invState struct {
	sealed map[SegmentID]Segment // each sealed segment as first seen sealed
	views  [invViews]viewSample
	next   int // slot of views written next
	calls  int
}

type viewSample struct {
	v   *View
	sum uint64
}

// due counts a call and reports whether this one runs the checks.
func (t *Table) due() bool {
	t.inv.calls++
	n := t.segs.n
	return n <= invFull || t.inv.calls%(n/invFull+1) == 0
}

// checkInvariants checks the whole table after op (a command's Op, or
// "restore"); it panics on the first broken property.
func (t *Table) checkInvariants(op string) {
	if !t.due() {
		return
	}
	fail := func(format string, args ...any) {
		panic(fmt.Sprintf("meta: invariant broken after %s at index %d: %s", op, t.index, fmt.Sprintf(format, args...)))
	}
	v := t.peek()
	checkOrder(v, t.segs.n, fail)
	checkReplicas(v, fail)
	t.checkSealed(v, fail)
	t.checkHeld(v, fail)
	checkChains(v, fail)
	checkGroups(v, fail)
	for _, s := range t.inv.views {
		if s.v != nil && viewSum(s.v) != s.sum {
			fail("a View taken at index %d changed after it was taken (copy-on-write broken)", s.v.index)
		}
	}
}

// sampleView remembers v, just taken, to check later that it never changes.
func (t *Table) sampleView(v *View) {
	if !t.due() {
		return
	}
	t.inv.views[t.inv.next] = viewSample{v: v, sum: viewSum(v)}
	t.inv.next = (t.inv.next + 1) % invViews
}

// checkOrder checks the chunks: segStore full but for the last, the id
// index strictly sorted by id, every serial in it once.
func checkOrder(v *View, n int, fail func(string, ...any)) {
	for h, grp := range v.segs {
		if h < len(v.segs)-1 && len(grp) != segGroup {
			fail("segment group %d holds %d chunks, want %d (only the last may be partial)", h, len(grp), segGroup)
		}
		for m, c := range grp {
			if (h < len(v.segs)-1 || m < len(grp)-1) && len(c) != segChunk {
				fail("segment chunk %d of group %d holds %d segments, want %d (only the last may be partial)", m, h, len(c), segChunk)
			}
		}
	}
	seen := make([]bool, n)
	var last *Segment
	for k, c := range v.ids {
		if len(c) == 0 || len(c) > listChunk {
			fail("id index chunk %d holds %d serials, want 1 to %d", k, len(c), listChunk)
		}
		for _, s := range c {
			if int(s) >= n || seen[s] {
				fail("id index lists serial %d (of %d segments) twice or out of range", s, n)
			}
			seen[s] = true
			seg := v.seg(s)
			if last != nil && last.ID >= seg.ID {
				fail("segment %s: follows %s in the id index (chunk order not sorted)", seg.ID, last.ID)
			}
			last = seg
		}
	}
	if v.Len() != n {
		fail("the id index holds %d segments, the table %d", v.Len(), n)
	}
}

// checkChains checks invariant 9: the topic registry and the chain of
// every partition.
func checkChains(v *View, fail func(string, ...any)) {
	for i, tp := range v.topics {
		if err := tp.Validate(); err != nil {
			fail("topic %s: %v", tp.Name, err)
		}
		if i > 0 && v.topics[i-1].Name >= tp.Name {
			fail("topic %s: follows %s (not sorted by name)", tp.Name, v.topics[i-1].Name)
		}
	}
	type key struct {
		topic string
		p     int32
	}
	last := map[key]*Segment{}
	for _, seg := range v.All() {
		topic, p, seq, ok := ParsePartitionSegment(seg.ID)
		if !ok {
			continue
		}
		if tp, ok := v.Topic(topic); !ok || p >= tp.Partitions {
			fail("segment %s: topic %q partition %d is not registered", seg.ID, topic, p)
		}
		k := key{topic, p}
		prev := last[k]
		var pseq uint64
		if prev != nil {
			_, _, pseq, _ = ParsePartitionSegment(prev.ID)
		}
		switch {
		case prev == nil && seq != 0:
			fail("segment %s: partition chain starts at seq %d, want 0", seg.ID, seq)
		case prev == nil && seg.StartOffset != 0:
			fail("segment %s: partition chain starts at offset %d, want 0", seg.ID, seg.StartOffset)
		case prev != nil && seq != pseq+1:
			fail("segment %s: follows %s in its chain (a gap)", seg.ID, prev.ID)
		case prev != nil && !prev.Sealed:
			fail("segment %s: follows %s, which is active", seg.ID, prev.ID)
		case prev != nil && seg.StartOffset != prev.EndOffset():
			fail("segment %s: starts at %d, %s ends at %d", seg.ID, seg.StartOffset, prev.ID, prev.EndOffset())
		}
		last[k] = seg
	}
}

// checkReplicas checks invariant 3 on every segment.
func checkReplicas(v *View, fail func(string, ...any)) {
	for _, seg := range v.All() {
		for j, r := range seg.Replicas {
			if r == 0 {
				fail("segment %s: replica set %v names broker 0", seg.ID, seg.Replicas)
			}
			if slices.Contains(seg.Replicas[:j], r) {
				fail("segment %s: replica set %v names broker %d twice", seg.ID, seg.Replicas, r)
			}
		}
	}
}

// checkSealed checks invariant 4 against what each sealed segment was
// first seen sealed with.
func (t *Table) checkSealed(v *View, fail func(string, ...any)) {
	if t.inv.sealed == nil {
		t.inv.sealed = map[SegmentID]Segment{}
	}
	for _, seg := range v.All() {
		was, ok := t.inv.sealed[seg.ID]
		switch {
		case ok && !seg.Sealed:
			fail("segment %s: unsealed (sealed at version %d)", seg.ID, was.Version)
		case ok && (was.StartOffset != seg.StartOffset || was.Length != seg.Length || was.ByteSize != seg.ByteSize || was.Checksum != seg.Checksum):
			fail("segment %s: sealed with start_offset %d length %d byte_size %d checksum %v, now %d %d %d %v",
				seg.ID, was.StartOffset, was.Length, was.ByteSize, was.Checksum, seg.StartOffset, seg.Length, seg.ByteSize, seg.Checksum)
		case !ok && seg.Sealed:
			t.inv.sealed[seg.ID] = Segment{ID: seg.ID, StartOffset: seg.StartOffset, Length: seg.Length,
				ByteSize: seg.ByteSize, Checksum: seg.Checksum, Version: seg.Version}
		}
	}
}

// checkHeld checks that each broker's index is the filter of all segments
// by that broker.
func (t *Table) checkHeld(v *View, fail func(string, ...any)) {
	if !slices.IsSorted(t.heldIDs) || len(t.heldIDs) != len(t.held) {
		fail("heldIDs %v: not sorted or not the %d brokers indexed", t.heldIDs, len(t.held))
	}
	want := map[BrokerID]int{}
	for _, seg := range v.All() {
		for _, r := range seg.Replicas {
			want[r]++ // checkReplicas ran: no broker twice
		}
	}
	for _, h := range v.held {
		n, last := 0, int64(-1)
		for _, c := range h.c {
			if len(c) == 0 {
				fail("broker %d: an empty chunk in its index", h.id)
			}
			for _, s := range c {
				seg := v.seg(s)
				if int64(s) <= last {
					fail("broker %d: index not ascending at segment %s (serial %d after %d)", h.id, seg.ID, s, last)
				}
				if !seg.HasReplica(h.id) {
					fail("segment %s: in broker %d's index, but its replicas %v do not name it", seg.ID, h.id, seg.Replicas)
				}
				last, n = int64(s), n+1
			}
		}
		if n != h.n || n != want[h.id] {
			fail("broker %d: index lists %d segments (count %d), %d segments name it", h.id, n, h.n, want[h.id])
		}
		delete(want, h.id)
	}
	for b, n := range want {
		if n > 0 {
			fail("broker %d: named by %d segments, but has no index", b, n)
		}
	}
}

// viewSum hashes everything a View's readers can see.
func viewSum(v *View) uint64 {
	var x uint64
	put := func(xs ...uint64) {
		for _, y := range xs {
			x = bits.RotateLeft64((x^y)*0x9e3779b97f4a7c15, 31)
		}
	}
	str := func(s string) { put(maphash.String(sumSeed, s)) }
	put(v.index, uint64(v.factor))
	for _, br := range v.brokers {
		str(fmt.Sprintf("%+v", br))
	}
	for _, tp := range v.topics {
		str(tp.Name)
		put(uint64(tp.Partitions))
	}
	for _, g := range v.groups {
		str(g.Group)
		for _, o := range g.Offsets {
			str(fmt.Sprintf("%+v", o))
		}
	}
	for _, seg := range v.All() {
		str(string(seg.ID))
		put(seg.StartOffset, seg.Length, uint64(seg.ByteSize), seg.Version, uint64(seg.Checksum), uint64(len(seg.Replicas)))
		if seg.Sealed {
			put(1)
		}
		for _, r := range seg.Replicas {
			put(uint64(r))
		}
	}
	for _, hv := range v.held {
		put(uint64(hv.id), uint64(hv.n))
		for _, c := range hv.c {
			for _, s := range c {
				put(uint64(s))
			}
		}
	}
	return x
}

var sumSeed = maphash.MakeSeed()

// checkGroups checks invariant 11 on v (the invariants build): groups
// sorted and unique, each valid, its offsets sorted and of registered
// partitions.
func checkGroups(v *View, fail func(string, ...any)) {
	for i, g := range v.groups {
		if err := g.Validate(); err != nil {
			fail("group %s: %v", g.Group, err)
		}
		if i > 0 && v.groups[i-1].Group >= g.Group {
			fail("group %s: follows %s (not sorted by id)", g.Group, v.groups[i-1].Group)
		}
		if !slices.IsSortedFunc(g.Offsets, comparePartition) {
			fail("group %s: offsets not sorted by topic and partition", g.Group)
		}
		for _, o := range g.Offsets {
			if t, ok := v.Topic(o.Topic); !ok || o.Partition >= t.Partitions {
				fail("group %s: an offset of %s/%d, not a registered partition", g.Group, o.Topic, o.Partition)
			}
		}
	}
}
