package cluster

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// TestSnapshotKeepsOffsets: committed offsets applied by the FSM (a
// refused commit changing nothing) survive Persist and Restore; a snapshot
// without the groups key restores with none, one with groups out of
// order is refused.
func TestSnapshotKeepsOffsets(t *testing.T) {
	f := newFSM(zerolog.Nop())
	off := func(p int32, o int64) meta.PartitionOffset {
		return meta.PartitionOffset{Topic: "orders", Partition: p, Offset: o, LeaderEpoch: -1, Metadata: "m"}
	}
	res := f.ApplyBatch([]*raft.Log{
		logOf(t, 1, meta.CreateTopic{Topic: meta.Topic{Name: "orders", Partitions: 2}}),
		logOf(t, 2, meta.CommitOffsets{Group: "g", Offsets: []meta.PartitionOffset{off(0, 5), off(1, 2)}}),
		logOf(t, 3, meta.CommitOffsets{Group: "g", Offsets: []meta.PartitionOffset{off(0, 9), off(7, 1)}}),
		logOf(t, 4, meta.CommitOffsets{Group: "h", Offsets: []meta.PartitionOffset{off(1, 1)}}),
	})
	for i, r := range res {
		err := r.(applyResult).err
		if i == 2 {
			if !errors.Is(err, meta.ErrUnknownTopic) {
				t.Fatalf("commit of partition 7: %v, want meta.ErrUnknownTopic", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	want := []meta.PartitionOffset{off(0, 5), off(1, 2)}
	if got := f.view().Offsets("g"); !reflect.DeepEqual(got, want) {
		t.Fatalf("offsets %+v, want %+v", got, want)
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
	if got := g.view().Offsets("g"); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored offsets %+v, want %+v", got, want)
	}
	if got, w := g.snapshot(), f.table.Snapshot(); !reflect.DeepEqual(got, w) {
		t.Fatalf("restored %+v, want %+v", got, w)
	}
	old := `{"index":7,"replication_factor":3,"brokers":[],"segments":[]}`
	if err := g.Restore(io.NopCloser(strings.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	if gs := g.view().Groups(); len(gs) != 0 {
		t.Fatalf("a snapshot without groups restored %+v", gs)
	}
	bad := `{"index":7,"replication_factor":3,"brokers":[],"groups":[{"group":"b","offsets":[]},{"group":"a","offsets":[]}],"segments":[]}`
	if err := g.Restore(io.NopCloser(strings.NewReader(bad))); !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), "groups not sorted") {
		t.Fatalf("restore of unsorted groups: %v", err)
	}
}
