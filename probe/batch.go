package probe

import (
	"math"
	"slices"
	"strings"
)

// CWD as the directory descriptor of Batch.Add makes the name relative to
// the working directory, or absolute (AT_FDCWD).
const CWD = -100

// Batch is a reusable list of stat targets: each a directory descriptor and
// a file name relative to it. Add copies the name into one arena of
// NUL-terminated names, so once its slices have grown to a batch's size a
// Batch refilled after Reset allocates nothing.
//
// A Batch is not safe for concurrent use, and must not change while
// ProbeBatch runs. The directory descriptors stay the caller's: they must
// stay open while ProbeBatch runs.
type Batch struct {
	arena []byte
	ents  []entry
	// paths, when not nil, is the batch instead of arena and ents: each
	// path relative to CWD, copied into a scratch buffer when probed
	// (Prober.Probe's batch, which must not copy a large batch up front).
	paths []string
	// follow: the last component of a name may be a symbolic link to
	// follow (Prober.Probe's stat(2) semantics); otherwise it is not.
	follow bool
}

// entry is one target: arena[off:off+n] is the name, arena[off+n] its NUL.
type entry struct {
	dirfd int32
	off   uint32
	n     uint32
	bad   bool // empty, or holds a NUL byte: answered EINVAL
}

// Reset empties the batch and keeps its memory.
func (b *Batch) Reset() {
	b.paths = nil
	b.arena = b.arena[:0]
	b.ents = b.ents[:0]
}

// Grow makes room for n more targets whose names (suffixes included) add
// up to nameBytes, so that the Adds that follow do not reallocate.
func (b *Batch) Grow(n, nameBytes int) {
	b.ents = slices.Grow(b.ents, n)
	b.arena = slices.Grow(b.arena, nameBytes+n)
}

// Add appends the target name+suffix relative to dirfd (CWD: the working
// directory). An empty name or one holding a NUL byte is kept, and
// ProbeBatch answers it with ErrFailed (EINVAL).
func (b *Batch) Add(dirfd int, name, suffix string) {
	off, n := len(b.arena), len(name)+len(suffix)
	if off+n >= math.MaxUint32 {
		// Past what an entry can address: answered EINVAL, nameless.
		b.ents = append(b.ents, entry{dirfd: int32(dirfd), bad: true})
		return
	}
	b.arena = append(b.arena, name...)
	b.arena = append(b.arena, suffix...)
	b.arena = append(b.arena, 0)
	bad := n == 0 || strings.IndexByte(name, 0) >= 0 || strings.IndexByte(suffix, 0) >= 0
	b.ents = append(b.ents, entry{dirfd: int32(dirfd), off: uint32(off), n: uint32(n), bad: bad})
}

// Len is the number of targets.
func (b *Batch) Len() int {
	if b.paths != nil {
		return len(b.paths)
	}
	return len(b.ents)
}

// Entry returns target i: its directory descriptor and name (which
// allocates; for messages).
func (b *Batch) Entry(i int) (dirfd int, name string) {
	return b.dirfd(i), b.name(i)
}

func (b *Batch) dirfd(i int) int {
	if b.paths != nil {
		return CWD
	}
	return int(b.ents[i].dirfd)
}

// name is target i's name as a string (allocates in an arena batch:
// errors only).
func (b *Batch) name(i int) string {
	if b.paths != nil {
		return b.paths[i]
	}
	e := b.ents[i]
	return string(b.arena[e.off : e.off+e.n])
}

// cname is the address of target i's NUL-terminated name: in the arena,
// or for a path batch a copy in *scratch. ok is false for a name that is
// empty or holds a NUL byte.
func (b *Batch) cname(i int, scratch *[]byte) (p *byte, ok bool) {
	if b.paths != nil {
		path := b.paths[i]
		if len(path) == 0 || strings.IndexByte(path, 0) >= 0 {
			return nil, false
		}
		*scratch = append(append((*scratch)[:0], path...), 0)
		return &(*scratch)[0], true
	}
	e := &b.ents[i]
	if e.bad {
		return nil, false
	}
	return &b.arena[e.off], true
}

// detach gives the batch an arena of its own, leaving the current one to
// whoever still holds it (operations an aborted io_uring run left in
// flight): the kernel may still read those names, so Add after Reset must
// not overwrite them.
func (b *Batch) detach() {
	b.arena = slices.Clone(b.arena)
}
