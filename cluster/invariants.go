//go:build invariants

package cluster

import (
	"fmt"

	"github.com/malachi-log/malachi/meta"
)

// Checks of the fsm compiled in with -tags invariants (make test), beside
// meta's checks of the table itself; invariants_off.go has the no-ops.
// Each panics naming the segment or index and the broken property.

// checkApplied runs with f.mu held after a batch: the table has applied
// no command past the last command entry the fsm saw.
func (f *fsm) checkApplied() {
	if ti := f.table.Index(); ti > f.applied {
		panic(fmt.Sprintf("cluster: invariant broken after apply: table index %d past the last applied entry %d", ti, f.applied))
	}
}

// checkRestored runs after a Restore replaced prev by next: next is at the
// snapshot's index, and every segment prev held sealed is in next with
// the same offsets, length, byte_size and checksum, still sealed
// (invariant 5).
func checkRestored(prev *meta.View, next *meta.Table, index uint64) {
	if next.Index() != index {
		panic(fmt.Sprintf("cluster: invariant broken after restore: table index %d, snapshot index %d", next.Index(), index))
	}
	for _, was := range prev.All() {
		if !was.Sealed {
			continue
		}
		now, ok := next.Segment(was.ID)
		if !ok {
			continue // a snapshot may predate the segment: not invariant 5's concern
		}
		if !now.Sealed || now.StartOffset != was.StartOffset || now.Length != was.Length || now.ByteSize != was.ByteSize || now.Checksum != was.Checksum {
			panic(fmt.Sprintf("cluster: invariant broken after restore at index %d: segment %s: sealed as %+v, restored as %+v", index, was.ID, *was, now))
		}
	}
}
