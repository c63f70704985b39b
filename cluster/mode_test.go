package cluster

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// TestSnapshotKeepsBrokerMode: a broker's lifecycle mode and maintenance
// end survive Persist and Restore, and a snapshot written before the
// fields existed restores with every broker active.
func TestSnapshotKeepsBrokerMode(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	f := newFSM(zerolog.Nop())
	fillFSM(t, f, 10)
	f.ApplyBatch([]*raft.Log{
		logOf(t, 1<<40, meta.RegisterBroker{Broker: meta.Broker{ID: 2, Rack: "b"}}),
		logOf(t, 1<<40+1, meta.RegisterBroker{Broker: meta.Broker{ID: 3, Rack: "c"}}),
		logOf(t, 1<<40+2, meta.SetBrokerMode{Broker: 2, Mode: meta.ModeDecommissioning}),
		logOf(t, 1<<40+3, meta.SetBrokerMode{Broker: 3, Mode: meta.ModeMaintenance, IssuedAt: t0, Until: t0.Add(30 * time.Minute)}),
	})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&memSink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	g := newFSM(zerolog.Nop())
	if err := g.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if want, got := f.table.Snapshot(), g.snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored brokers %+v, want %+v", got.Brokers, want.Brokers)
	}
	v := g.view()
	if b, _ := v.Broker(2); !b.Is(meta.ModeDecommissioning) {
		t.Fatalf("broker 2 restored as %+v", b)
	}
	if b, _ := v.Broker(3); !b.InMaintenance(t0) || !b.Until.Equal(t0.Add(30*time.Minute)) {
		t.Fatalf("broker 3 restored as %+v", b)
	}

	old := `{"index":7,"replication_factor":3,"brokers":[{"id":1,"rack":"a","raft_addr":"h:1"},{"id":2}],"segments":[]}`
	h := newFSM(zerolog.Nop())
	if err := h.Restore(io.NopCloser(strings.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	for _, b := range h.view().Brokers() {
		if !b.Is(meta.ModeActive) || !b.Until.IsZero() {
			t.Fatalf("old snapshot broker %+v: want active", b)
		}
	}
}
