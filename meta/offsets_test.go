package meta

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCommitOffsetsRoundTrip(t *testing.T) {
	for _, c := range []Command{
		CommitOffsets{Group: "g", Offsets: []PartitionOffset{{Topic: "t", Partition: 1, Offset: 5, LeaderEpoch: -1, Metadata: "m"}}},
		DeleteGroupOffsets{Group: "g"},
	} {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCommand(b)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip %s: got %+v, %v; want %+v", b, got, err, c)
		}
	}
}

func TestCommitOffsetsValidate(t *testing.T) {
	o := PartitionOffset{Topic: "t", Partition: 0, Offset: 0, LeaderEpoch: -1}
	with := func(f func(*PartitionOffset)) []PartitionOffset {
		x := o
		f(&x)
		return []PartitionOffset{x}
	}
	for _, bad := range []struct {
		c    Command
		want string
	}{
		{CommitOffsets{Group: "", Offsets: []PartitionOffset{o}}, "group id \"\": 0 bytes, want 1 to 255"},
		{CommitOffsets{Group: strings.Repeat("g", MaxGroupLen+1), Offsets: []PartitionOffset{o}}, "256 bytes"},
		{CommitOffsets{Group: "g"}, "group g: no offsets"},
		{CommitOffsets{Group: "g", Offsets: with(func(x *PartitionOffset) { x.Topic = "a b" })}, "byte ' ' at 1"},
		{CommitOffsets{Group: "g", Offsets: with(func(x *PartitionOffset) { x.Partition = -1 })}, "partition -1: want 0 to 99999"},
		{CommitOffsets{Group: "g", Offsets: with(func(x *PartitionOffset) { x.Offset = -2 })}, "t/0: -2 is negative"},
		{CommitOffsets{Group: "g", Offsets: with(func(x *PartitionOffset) { x.Metadata = strings.Repeat("m", MaxOffsetMetadata+1) })}, "metadata of 4097 bytes"},
		{CommitOffsets{Group: "g", Offsets: []PartitionOffset{o, o}}, "partition t/0 given twice"},
		{DeleteGroupOffsets{}, "delete_group_offsets: group id"},
	} {
		err := bad.c.Validate()
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: Validate = %v, want ErrInvalid containing %q", bad.c, err, bad.want)
		}
	}
}

// TestCommitOffsetsApply: a commit replaces the offsets it names and keeps
// the others; one naming an unregistered partition changes nothing; a
// View taken before a commit keeps what it held; a snapshot keeps the
// offsets and one without them loads with none.
func TestCommitOffsetsApply(t *testing.T) {
	tb := NewTable(3)
	if err := tb.Apply(1, CreateTopic{Topic{Name: "t", Partitions: 2}}); err != nil {
		t.Fatal(err)
	}
	p := func(part int32, off int64) PartitionOffset {
		return PartitionOffset{Topic: "t", Partition: part, Offset: off, LeaderEpoch: -1}
	}
	if err := tb.Apply(2, CommitOffsets{Group: "g", Offsets: []PartitionOffset{p(1, 7), p(0, 3)}}); err != nil {
		t.Fatal(err)
	}
	before := tb.View()
	if err := tb.Apply(3, CommitOffsets{Group: "g", Offsets: []PartitionOffset{p(0, 4)}}); err != nil {
		t.Fatal(err)
	}
	want := []PartitionOffset{p(0, 4), p(1, 7)}
	if got := tb.View().Offsets("g"); !reflect.DeepEqual(got, want) {
		t.Fatalf("offsets %+v, want %+v", got, want)
	}
	if got := before.Offsets("g"); !reflect.DeepEqual(got, []PartitionOffset{p(0, 3), p(1, 7)}) {
		t.Fatalf("an earlier View changed: %+v", got)
	}
	for _, bad := range []CommitOffsets{
		{Group: "g", Offsets: []PartitionOffset{p(0, 9), p(2, 1)}},
		{Group: "g", Offsets: []PartitionOffset{{Topic: "u", Offset: 1}}},
	} {
		if err := tb.Apply(4, bad); !errors.Is(err, ErrUnknownTopic) {
			t.Fatalf("%+v: %v, want ErrUnknownTopic", bad, err)
		}
	}
	if got := tb.View().Offsets("g"); !reflect.DeepEqual(got, want) {
		t.Fatalf("offsets after refused commits %+v, want %+v", got, want)
	}
	if err := tb.Apply(5, CommitOffsets{Group: "a", Offsets: []PartitionOffset{p(1, 1)}}); err != nil {
		t.Fatal(err)
	}
	s := tb.Snapshot()
	if len(s.Groups) != 2 || s.Groups[0].Group != "a" || s.Groups[1].Group != "g" {
		t.Fatalf("snapshot groups %+v, want a and g", s.Groups)
	}
	if got := TableFromSnapshot(s).View().Offsets("g"); !reflect.DeepEqual(got, want) {
		t.Fatalf("offsets from the snapshot %+v, want %+v", got, want)
	}
	s.Groups = nil
	if got := TableFromSnapshot(s).View().Groups(); len(got) != 0 {
		t.Fatalf("a snapshot without groups loads %+v", got)
	}
	if err := tb.Apply(6, DeleteGroupOffsets{Group: "g"}); err != nil {
		t.Fatal(err)
	}
	if got := tb.View().Groups(); len(got) != 1 || got[0].Group != "a" {
		t.Fatalf("after deleting g: %+v", got)
	}
}
