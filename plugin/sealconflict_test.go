package plugin

import (
	"crypto/sha256"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// The attack, end to end over real stores and RPCs: metadata replayed
// from an injected snapshot says a sealed segment has byte_size 0 (length
// 0, the checksum of nothing), so every copy looks overrun. The heal
// passes must leave all three copies byte for byte as they are and report
// the segment seal_conflict, pass after pass, never healthy.
func TestInjectedSealMetadataDestroysNothing(t *testing.T) {
	cp := newMemCP()
	ins := []*instance{startInstance(t, cp, 1, nil), startInstance(t, cp, 2, nil), startInstance(t, cp, 3, nil)}
	var seg meta.Segment
	for _, in := range ins {
		seg = sealedCopy(t, in.db, "s", 200, 1, 2, 3)
	}
	addSegment(t, cp, seg)
	type file struct {
		size int64
		sum  [32]byte
	}
	read := func(in *instance) file {
		t.Helper()
		b, err := os.ReadFile(in.db.Path("s"))
		if err != nil {
			t.Fatal(err)
		}
		return file{int64(len(b)), sha256.Sum256(b)}
	}
	before := read(ins[0])

	// A snapshot restore on the control plane: the poisoned seal.
	cp.mu.Lock()
	snap := cp.t.Snapshot()
	snap.Index++
	s, _ := snap.Segment("s")
	s.Length, s.ByteSize, s.Checksum = 0, 0, meta.CRC32C(0)
	cp.t, cp.index = meta.TableFromSnapshot(snap), snap.Index
	cp.mu.Unlock()

	cp.setLeader(true)
	leader := ins[0].p
	conflicted := func(r *heal.Report) bool {
		return r != nil && slices.ContainsFunc(r.Failed, func(f heal.Failure) bool {
			return f.Segment == "s" && f.Reason == heal.SealConflict
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for !conflicted(leader.Status().LastPass) {
		if time.Now().After(deadline) {
			t.Fatalf("no seal_conflict reported: %+v", leader.Status().LastPass)
		}
		time.Sleep(10 * time.Millisecond)
	}
	first := leader.Status().Passes
	for seen := first; seen < first+5; {
		st := leader.Status()
		if st.Passes > seen {
			seen = st.Passes
			r := st.LastPass
			if !conflicted(r) || slices.Contains(r.Healed, "s") || len(r.Settled) != 0 || len(r.Deleted) != 0 || len(r.Confirmed) != 0 {
				t.Fatalf("pass %d: %+v, want s reported seal_conflict and left alone", seen, r)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d passes after the first conflict", seen-first)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, in := range ins {
		if got := read(in); got != before {
			t.Fatalf("broker %d's copy changed: %d bytes, want %d (sha256 %x, want %x)", in.id, got.size, before.size, got.sum, before.sum)
		}
		if err := in.db.Verify("s", seg); err != nil {
			t.Fatalf("broker %d's copy no longer verifies against the true seal: %v", in.id, err)
		}
	}
}
