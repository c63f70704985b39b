package meta

import (
	"slices"
	"unsafe"
)

// The Table's storage: segments by serial in chunks (segStore), and sorted
// lists of serials in chunks (serialList), both copy-on-write against the
// Views that share them.
//
// A serial is a segment's position in creation order (uint32: at most
// 2^32-1 segments per table). Sharing works by generation: the Table's gen
// increments each time a View is taken; a chunk, or a top-level array of
// chunks, may be written in place only while its recorded generation equals
// the Table's (no View has seen it since it was made or copied). Otherwise
// the writer copies it first.
//
// INVARIANT: memory a View can reach is never written, with one exception
// that no reader can observe: segStore appends to the last chunk's array past
// the length any View holds.
//
// segStore's chunk headers are themselves in groups (segGroup), so that a
// change after a View copies its chunk, its group's headers and the array
// of groups (4 KB + 12 KB + 24 B a group: ~25 KB at 10^7 segments), never
// every chunk header (4.7 MB at 10^7 with 51-segment chunks in one array).

// segChunk is the segments per segStore chunk: the most whose array,
// with the 8-byte header the Go allocator puts before an object of over
// 512 bytes that holds pointers, fits in 4 KB, a size class (51 of 80
// bytes): no chunk wastes more than one segment's bytes (64 segments would
// take the 5,376-byte class, ~4 B per segment more). Small because a
// change copies the chunk it writes to when a View shares it: the pass
// that replaces a dead broker's 20,000 replicas at 10^7 segments writes to
// ~20,000 chunks (at 1,024 segments a chunk it copied 800 MB; at 51,
// ~80 MB). Their headers are grouped (segGroup) so that the array of
// headers copied with a chunk stays small too.
const segChunk = (4096 - 8) / int(unsafe.Sizeof(Segment{}))

// segGroup is the chunks per segStore group.
const segGroup = 512

// segAt is the group, the chunk within it and the slot of serial.
func segAt(serial uint32) (h, m, i uint32) {
	k := serial / uint32(segChunk)
	return k / segGroup, k % segGroup, serial % uint32(segChunk)
}

// listChunk is the most serials a serialList chunk holds (4 KB: a change
// copies the chunk it writes to when a View shares it, as segStore's). A
// variable only so that tests can make chunks small; never changed while
// a Table exists.
var listChunk = 1024

// segStore holds segments indexed by serial: group, chunk and slot
// segAt(s). Every chunk but the last is full, and every group but the last.
type segStore struct {
	c    [][][]Segment // shared with Views (every level)
	gen  []uint64      // gen[h*segGroup+m]: generation chunk c[h][m] was made or copied in; private
	hgen []uint64      // hgen[h]: generation group c[h]'s header array was made or copied in; private
	top  uint64        // generation c's array was made in
	n    int
}

func (s *segStore) get(serial uint32) *Segment {
	h, m, i := segAt(serial)
	return &s.c[h][m][i]
}

// ownTop makes c's array writable at generation g.
func (s *segStore) ownTop(g uint64) {
	if s.top != g {
		s.c = slices.Clip(slices.Clone(s.c))
		s.top = g
	}
}

// ownGroup makes c's array and group h's header array writable at
// generation g.
func (s *segStore) ownGroup(h int, g uint64) {
	s.ownTop(g)
	if s.hgen[h] != g {
		s.c[h] = slices.Clip(slices.Clone(s.c[h]))
		s.hgen[h] = g
	}
}

// set stores seg at serial, copying the chunk first if a View may hold it.
func (s *segStore) set(serial uint32, seg Segment, g uint64) {
	h, m, i := segAt(serial)
	s.ownGroup(int(h), g)
	if k := int(h)*segGroup + int(m); s.gen[k] != g {
		nc := make([]Segment, len(s.c[h][m]), segChunk)
		copy(nc, s.c[h][m])
		s.c[h][m], s.gen[k] = nc, g
	}
	s.c[h][m][i] = seg
}

// add appends seg and returns its serial. Appending to a shared last chunk
// writes past the length any View holds, which no View reads.
func (s *segStore) add(seg Segment, g uint64) uint32 {
	if s.n == 1<<32-1 {
		panic("meta: more than 2^32-1 segments in one table")
	}
	serial := uint32(s.n)
	s.ownTop(g)
	if s.n%segChunk == 0 {
		if (s.n/segChunk)%segGroup == 0 {
			s.c = append(s.c, make([][]Segment, 0, segGroup))
			s.hgen = append(s.hgen, g)
		}
		h := len(s.c) - 1
		s.ownGroup(h, g)
		s.c[h] = append(s.c[h], make([]Segment, 0, segChunk))
		s.gen = append(s.gen, g)
	}
	h := len(s.c) - 1
	s.ownGroup(h, g)
	m := len(s.c[h]) - 1
	s.c[h][m] = append(s.c[h][m], seg)
	s.n++
	return serial
}

// serialList is a sorted sequence of serials in chunks of at most
// listChunk, copy-on-write like segStore. The order is the caller's: by
// segment id (the id index) or by serial (a broker's replicas); the caller
// locates positions and the list inserts and removes.
type serialList struct {
	c   [][]uint32 // shared with Views
	gen []uint64   // private, as in segStore
	top uint64
	n   int
}

func (l *serialList) ownTop(g uint64) {
	if l.top != g {
		l.c = slices.Clip(slices.Clone(l.c))
		l.top = g
	}
}

// growCap is the capacity a chunk of n serials is given when it must grow.
func growCap(n int) int { return min(listChunk, n+n/4+16) }

// insert puts v at position i of chunk k (k == len(c) only when the list is
// empty). A full chunk splits: at its end, a new chunk starts (so serials
// added in order fill chunks fully); elsewhere it splits in half.
func (l *serialList) insert(k, i int, v uint32, g uint64) {
	l.ownTop(g)
	l.n++
	if k == len(l.c) {
		l.c = append(l.c, append(make([]uint32, 0, 16), v))
		l.gen = append(l.gen, g)
		return
	}
	c := l.c[k]
	if len(c) >= listChunk {
		if i == len(c) {
			l.c = slices.Insert(l.c, k+1, append(make([]uint32, 0, 16), v))
			l.gen = slices.Insert(l.gen, k+1, g)
			return
		}
		h := len(c) / 2
		left := append(make([]uint32, 0, growCap(h)), c[:h]...)
		right := append(make([]uint32, 0, growCap(len(c)-h)), c[h:]...)
		l.c[k], l.gen[k] = left, g
		l.c = slices.Insert(l.c, k+1, right)
		l.gen = slices.Insert(l.gen, k+1, g)
		if i > h {
			k, i = k+1, i-h
		}
		c = l.c[k]
	}
	if l.gen[k] != g || len(c) == cap(c) {
		nc := make([]uint32, len(c)+1, growCap(len(c)+1))
		copy(nc, c[:i])
		nc[i] = v
		copy(nc[i+1:], c[i:])
		l.c[k], l.gen[k] = nc, g
		return
	}
	c = c[:len(c)+1]
	copy(c[i+1:], c[i:])
	c[i] = v
	l.c[k] = c
}

// remove deletes position i of chunk k; an emptied chunk goes.
func (l *serialList) remove(k, i int, g uint64) {
	l.ownTop(g)
	l.n--
	c := l.c[k]
	if len(c) == 1 {
		l.c = slices.Delete(l.c, k, k+1)
		l.gen = slices.Delete(l.gen, k, k+1)
		return
	}
	if l.gen[k] != g {
		nc := make([]uint32, 0, len(c)-1)
		nc = append(append(nc, c[:i]...), c[i+1:]...)
		l.c[k], l.gen[k] = nc, g
		return
	}
	l.c[k] = slices.Delete(c, i, i+1)
}

// appendFull appends v at the end, for builders: chunks fill to listChunk.
func (l *serialList) appendFull(v uint32, g uint64) {
	l.ownTop(g)
	k := len(l.c) - 1
	if k < 0 || len(l.c[k]) == listChunk || l.gen[k] != g {
		l.c = append(l.c, make([]uint32, 0, listChunk))
		l.gen = append(l.gen, g)
		k++
	}
	l.c[k] = append(l.c[k], v)
	l.n++
}

// trim gives the last chunk its exact size (after a build).
func (l *serialList) trim() {
	if k := len(l.c) - 1; k >= 0 {
		l.c[k] = slices.Clip(slices.Clone(l.c[k]))
	}
}

// findSerial locates v in a list sorted by serial: the chunk and position
// where it is or would be inserted, and whether it is there.
func (l *serialList) findSerial(v uint32) (k, i int, ok bool) {
	k, _ = slices.BinarySearchFunc(l.c, v, func(c []uint32, v uint32) int {
		if c[len(c)-1] < v {
			return -1
		}
		return 1
	})
	if k == len(l.c) {
		if k == 0 {
			return 0, 0, false
		}
		return k - 1, len(l.c[k-1]), false
	}
	i, ok = slices.BinarySearch(l.c[k], v)
	return k, i, ok
}
