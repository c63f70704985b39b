//go:build invariants

package cluster

import (
	"strings"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

func wantPanic(t *testing.T, name string, f func(), want ...string) {
	t.Helper()
	defer func() {
		t.Helper()
		msg, _ := recover().(string)
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: panic %q lacks %q", name, msg, w)
			}
		}
	}()
	f()
}

// Hand-built bad states make the fsm's checks fire, naming what broke.
func TestFSMInvariantsFire(t *testing.T) {
	sealed := meta.Segment{ID: "a", Length: 2, ByteSize: 10, Sealed: true, Checksum: meta.CRC32C(7), Replicas: []meta.BrokerID{1}, Version: 2}
	prev := meta.NewView(meta.Snapshot{Index: 5, Segments: []meta.Segment{sealed}})
	changed := sealed
	changed.Checksum = meta.CRC32C(8)
	next := meta.TableFromSnapshot(meta.Snapshot{Index: 6, Segments: []meta.Segment{changed}})
	wantPanic(t, "restore", func() { checkRestored(prev, next, 6) }, "after restore at index 6", "segment a", "sealed as")
	wantPanic(t, "restore index", func() { checkRestored(prev, next, 7) }, "table index 6, snapshot index 7")
	checkRestored(prev, meta.TableFromSnapshot(meta.Snapshot{Index: 6, Segments: []meta.Segment{sealed}}), 6) // same: passes

	f := newFSM(zerolog.Nop())
	if err := f.table.Apply(5, meta.SetReplicationFactor{Factor: 3}); err != nil {
		t.Fatal(err)
	}
	f.applied = 4
	wantPanic(t, "apply", f.checkApplied, "table index 5 past the last applied entry 4")
}
