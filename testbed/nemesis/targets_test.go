package nemesis

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/harness"
)

// TestFileTargetsTakeOnlyWholeCopiesOnDisk: a file fault draws its copies
// from the files the broker holds, not from what the metadata names on
// it. A broker swapped to an empty directory, or still receiving a
// backfill, has replicas in the metadata without a whole file; the
// nemesis of 2026-12-07 drew such a copy and the fault missed ("no copy
// file: broker 4, segment nem-00108").
func TestFileTargetsTakeOnlyWholeCopiesOnDisk(t *testing.T) {
	b := &harness.Broker{ID: 4, Dir: t.TempDir()}
	seg := func(id string, size int64) meta.Segment {
		return meta.Segment{ID: meta.SegmentID(id), Sealed: true, ByteSize: size, Replicas: []meta.BrokerID{2, 3, 4}}
	}
	whole, short, missing := seg("whole", 1000), seg("short", 1000), seg("missing", 1000)
	write := func(s meta.Segment, size int64) {
		p := store.CopyPath(b.Dir, s.ID)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(whole, harness.SealedSize(whole))
	write(short, 300) // a backfill in flight
	snap := meta.Snapshot{Segments: []meta.Segment{missing, short, whole}}
	n := &runner{o: Options{RF: 3}, active: map[meta.BrokerID]FaultKind{}, damaged: map[meta.SegmentID]bool{}}

	for seed := range uint64(20) {
		d, why := n.fileTargets(Event{Copies: 3, Seed: seed}, b, snap)
		if len(d.segments) != 1 || d.segments[0].ID != whole.ID {
			t.Fatalf("seed %d: drew %v (%s), want only %s: the one whole copy on disk", seed, d.segments, why, whole.ID)
		}
	}

	// Under a fault elsewhere in its set, the whole copy is no candidate
	// either, and the answer says why.
	n.active[2] = harness.KindKill
	if d, why := n.fileTargets(Event{Copies: 1, Seed: 1}, b, snap); len(d.segments) != 0 || why == "" {
		t.Fatalf("with broker 2 under a fault: drew %v, why %q; want none and a reason", d.segments, why)
	}
}
