package cluster

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// TestSnapshotKeepsTopics: topics and partition chains survive Persist and
// Restore; a snapshot without the topics key restores with none.
func TestSnapshotKeepsTopics(t *testing.T) {
	f := newFSM(zerolog.Nop())
	fillFSM(t, f, 10)
	id0, id1 := meta.PartitionSegmentID("orders", 1, 0), meta.PartitionSegmentID("orders", 1, 1)
	res := f.ApplyBatch([]*raft.Log{
		logOf(t, 1<<40, meta.CreateTopic{Topic: meta.Topic{Name: "orders", Partitions: 2}}),
		logOf(t, 1<<40+1, meta.CreateTopic{Topic: meta.Topic{Name: "a.b", Partitions: 1}}),
		logOf(t, 1<<40+2, meta.CreateSegment{Segment: meta.Segment{ID: id0, Replicas: []meta.BrokerID{1, 2}}}),
		logOf(t, 1<<40+3, meta.SealSegment{ID: id0, Length: 4, ByteSize: 400, Checksum: meta.CRC32C(9)}),
		logOf(t, 1<<40+4, meta.CreateSegment{Segment: meta.Segment{ID: id1, StartOffset: 4, Replicas: []meta.BrokerID{2, 3}}}),
		logOf(t, 1<<40+5, meta.CreateTopic{Topic: meta.Topic{Name: "orders", Partitions: 9}}),
	})
	for i, r := range res[:5] {
		if err := r.(applyResult).err; err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&memSink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	g := newFSM(zerolog.Nop())
	if err := g.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
		t.Fatal(err)
	}
	want, got := f.table.Snapshot(), g.snapshot()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restored topics %+v, want %+v", got.Topics, want.Topics)
	}
	if tp := []meta.Topic{{Name: "a.b", Partitions: 1}, {Name: "orders", Partitions: 2}}; !reflect.DeepEqual(got.Topics, tp) {
		t.Fatalf("restored topics %+v, want %+v", got.Topics, tp)
	}
	if c := g.view().Chain("orders", 1); len(c) != 2 || c[1].ID != id1 || c[1].StartOffset != 4 {
		t.Fatalf("restored chain %v", c)
	}
	if flat, err := readSnapshot(bytes.NewReader(buf.Bytes())); err != nil || !reflect.DeepEqual(flat, want) {
		t.Fatalf("readSnapshot: %v", err)
	}

	old := `{"index":7,"replication_factor":3,"brokers":[],"segments":[]}`
	h := newFSM(zerolog.Nop())
	if err := h.Restore(io.NopCloser(strings.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	if ts := h.view().Topics(); len(ts) != 0 {
		t.Fatalf("old snapshot restored topics %+v", ts)
	}
	bad := `{"index":7,"replication_factor":3,"brokers":[],"topics":[{"name":"b","partitions":1},{"name":"a","partitions":1}],"segments":[]}`
	if err := h.Restore(io.NopCloser(strings.NewReader(bad))); err == nil || !strings.Contains(err.Error(), "topics not sorted") {
		t.Fatalf("restore of unsorted topics: %v", err)
	}
}
