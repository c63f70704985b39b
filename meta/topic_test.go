package meta

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestCreateTopicRoundTrip(t *testing.T) {
	for _, c := range []Command{CreateTopic{Topic{Name: "orders.v1_x-y", Partitions: 3}}, AllocateProducerIDs{Broker: 2}} {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCommand(b)
		if err != nil || got != c {
			t.Fatalf("round trip %s: got %+v, %v; want %+v", b, got, err, c)
		}
	}
}

func TestCreateTopicValidate(t *testing.T) {
	long := strings.Repeat("a", MaxTopicLen)
	if err := (CreateTopic{Topic{Name: long, Partitions: MaxPartitions}}).Validate(); err != nil {
		t.Fatalf("a name of %d bytes, %d partitions: %v", MaxTopicLen, MaxPartitions, err)
	}
	for _, bad := range []struct {
		tp   Topic
		want string
	}{
		{Topic{Name: "", Partitions: 1}, "topic name is empty"},
		{Topic{Name: ".", Partitions: 1}, `topic name "." is reserved`},
		{Topic{Name: "..", Partitions: 1}, `topic name ".." is reserved`},
		{Topic{Name: "a b", Partitions: 1}, `byte ' ' at 1`},
		{Topic{Name: "a/b", Partitions: 1}, `byte '/' at 1`},
		{Topic{Name: long + "a", Partitions: 1}, "more than 181"},
		{Topic{Name: "t", Partitions: 0}, "0 partitions: want 1 to 100000"},
		{Topic{Name: "t", Partitions: MaxPartitions + 1}, "100001 partitions"},
	} {
		err := CreateTopic{bad.tp}.Validate()
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: Validate = %v, want ErrInvalid containing %q", bad.tp, err, bad.want)
		}
	}
}

func TestCreateTopicApply(t *testing.T) {
	tb := NewTable(3)
	if err := tb.Apply(1, CreateTopic{Topic{Name: "b", Partitions: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Apply(2, CreateTopic{Topic{Name: "a", Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	v := tb.View()
	err := tb.Apply(3, CreateTopic{Topic{Name: "b", Partitions: 5}})
	if !errors.Is(err, ErrTopicExists) || !strings.Contains(err.Error(), "b (2 partitions)") {
		t.Fatalf("create an existing topic: %v, want ErrTopicExists naming it", err)
	}
	if err := tb.Apply(4, AllocateProducerIDs{Broker: 1}); err != nil {
		t.Fatal(err)
	}
	want := []Topic{{"a", 1}, {"b", 2}}
	if got := tb.View().Topics(); !reflect.DeepEqual(got, want) {
		t.Fatalf("topics %+v, want %+v", got, want)
	}
	if got := v.Topics(); !reflect.DeepEqual(got, want) {
		t.Fatalf("an earlier View's topics %+v, want %+v", got, want)
	}
	if tp, ok := tb.View().Topic("b"); !ok || tp.Partitions != 2 {
		t.Fatalf("Topic(b) = %+v, %v", tp, ok)
	}
	if ProducerIDBlock(4) == ProducerIDBlock(5) || ProducerIDBlock(5)-ProducerIDBlock(4) != ProducerIDBlockSize {
		t.Fatalf("blocks of indexes 4 and 5 overlap")
	}
}

func TestPartitionSegmentIDRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		topic := rapid.StringMatching(`[A-Za-z0-9._-]{1,181}`).Filter(func(s string) bool { return s != "." && s != ".." }).Draw(t, "topic")
		p := rapid.Int32Range(0, MaxPartitions-1).Draw(t, "partition")
		seq := rapid.Uint64Range(0, MaxSeq).Draw(t, "seq")
		id := PartitionSegmentID(topic, p, seq)
		if err := id.Validate(); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		gt, gp, gs, ok := ParsePartitionSegment(id)
		if !ok || gt != topic || gp != p || gs != seq {
			t.Fatalf("%s parsed as %q %d %d %v", id, gt, gp, gs, ok)
		}
	})
}

// TestParsePartitionSegmentUnambiguous: any id that parses is exactly the
// one PartitionSegmentID writes for what it parsed to.
func TestParsePartitionSegmentUnambiguous(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		id := SegmentID(rapid.StringMatching(`k\.[a-z0-9.]{0,6}\.[0-9]{1,6}\.[0-9]{9,11}`).Draw(t, "id"))
		if topic, p, seq, ok := ParsePartitionSegment(id); ok {
			if back := PartitionSegmentID(topic, p, seq); back != id {
				t.Fatalf("%s parsed as %q %d %d, formats back as %s", id, topic, p, seq, back)
			}
		}
	})
	for _, id := range []SegmentID{"k.", "k.t.0000.0000000000", "k..00000.0000000000", "x.t.00000.0000000000", "k.t.00000.000000000a", "k.t_00000.0000000000", "load-00001"} {
		if topic, p, seq, ok := ParsePartitionSegment(id); ok {
			t.Errorf("%s parsed as %q %d %d", id, topic, p, seq)
		}
	}
}

func TestPartitionChain(t *testing.T) {
	tb := NewTable(3)
	rs := []BrokerID{1, 2, 3}
	seg := func(topic string, p int32, seq, start uint64) CreateSegment {
		return CreateSegment{Segment{ID: PartitionSegmentID(topic, p, seq), StartOffset: start, Replicas: rs}}
	}
	idx := uint64(0)
	apply := func(c Command) error { idx++; return tb.Apply(idx, c) }
	if err := apply(seg("t", 0, 0, 0)); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("segment of an unknown topic: %v, want ErrUnknownTopic", err)
	}
	for _, c := range []Command{CreateTopic{Topic{"t", 2}}, CreateTopic{Topic{"t.x", 1}}} {
		if err := apply(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []struct {
		c    CreateSegment
		want error
	}{
		{seg("t", 2, 0, 0), ErrUnknownTopic},
		{seg("t", 0, 0, 5), ErrInvalid},
		{seg("t", 0, 1, 0), ErrUnknownSegment},
	} {
		if err := apply(bad.c); !errors.Is(err, bad.want) {
			t.Fatalf("create %s at %d: %v, want %v", bad.c.Segment.ID, bad.c.Segment.StartOffset, err, bad.want)
		}
	}
	for _, c := range []CreateSegment{seg("t", 0, 0, 0), seg("t", 1, 0, 0), seg("t.x", 0, 0, 0)} {
		if err := apply(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := apply(seg("t", 0, 1, 0)); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("create seq 1 while seq 0 is active: %v, want ErrNotSealed", err)
	}
	if err := apply(SealSegment{ID: PartitionSegmentID("t", 0, 0), Length: 3, ByteSize: 300, Checksum: CRC32C(1)}); err != nil {
		t.Fatal(err)
	}
	if err := apply(seg("t", 0, 1, 2)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "ends at 3") {
		t.Fatalf("create seq 1 at 2 after seq 0 ended at 3: %v, want ErrInvalid", err)
	}
	if err := apply(seg("t", 0, 1, 3)); err != nil {
		t.Fatal(err)
	}
	v := tb.View()
	var got []SegmentID
	for _, s := range v.Chain("t", 0) {
		got = append(got, s.ID)
	}
	want := []SegmentID{PartitionSegmentID("t", 0, 0), PartitionSegmentID("t", 0, 1)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("chain of t/0: %v, want %v", got, want)
	}
	if c := v.Chain("t.x", 0); len(c) != 1 || c[0].ID != PartitionSegmentID("t.x", 0, 0) {
		t.Fatalf("chain of t.x/0: %v", c)
	}
	if c := v.Chain("t", 1); len(c) != 1 {
		t.Fatalf("chain of t/1: %v", c)
	}
	// The topics survive the flat snapshot and back.
	s := v.Snapshot()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if back := TableFromSnapshot(s).Snapshot(); !reflect.DeepEqual(back, s) {
		t.Fatalf("snapshot round trip: topics %+v, want %+v", back.Topics, s.Topics)
	}
}
