//go:build invariants

package meta

import (
	"strings"
	"testing"
)

// mustPanic runs f and checks that it panics with a message holding every
// one of want.
func mustPanic(t *testing.T, name string, f func(), want ...string) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		msg, _ := r.(string)
		if r == nil {
			t.Fatalf("%s: no panic", name)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: panic %q lacks %q", name, msg, w)
			}
		}
	}()
	f()
}

// brokenTable returns a table of two segments, "a" sealed, on brokers 1-3.
func brokenTable(t *testing.T) *Table {
	t.Helper()
	tab := NewTable(3)
	for i, id := range []SegmentID{"a", "b"} {
		if err := tab.Apply(uint64(i+1), CreateSegment{Segment: Segment{ID: id, Replicas: []BrokerID{1, 2}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tab.Apply(3, SealSegment{ID: "a", Length: 2, ByteSize: 10, Checksum: CRC32C(7)}); err != nil {
		t.Fatal(err)
	}
	return tab
}

// next is a valid command that the checks run after.
var next = SetReplicationFactor{Factor: 3}

// Each property: a bit flipped in the table behind Apply's back makes the
// next Apply panic, naming the segment (or broker, or View) and what broke.
func TestInvariantsFire(t *testing.T) {
	seg := func(tab *Table, id SegmentID) *Segment { s, _ := tab.lookup(id); return tab.segs.get(s) }
	cases := []struct {
		name   string
		break_ func(*Table)
		want   []string
	}{
		{"replica twice", func(tab *Table) { seg(tab, "b").Replicas[1] = 1 }, []string{"segment b", "names broker 1 twice"}},
		{"sealed checksum", func(tab *Table) { seg(tab, "a").Checksum = CRC32C(8) }, []string{"segment a", "sealed with", "checksum"}},
		{"unsealed", func(tab *Table) { seg(tab, "a").Sealed = false }, []string{"segment a", "unsealed"}},
		{"held index", func(tab *Table) { tab.release(2, 1) }, []string{"broker 2", "segments name it"}},
		{"held leftover", func(tab *Table) { tab.hold(3, 0) }, []string{"segment a", "broker 3's index"}},
		{"chunk order", func(tab *Table) { c := tab.ids.c[0]; c[0], c[1] = c[1], c[0] }, []string{"segment a", "chunk order not sorted"}},
		{"view changed", func(tab *Table) {
			v := tab.View()
			v.seg(1).StartOffset = 99 // a write into memory a View shares (copy-on-write broken)
		}, []string{"View taken at index 3 changed"}},
	}
	for _, c := range cases {
		tab := brokenTable(t)
		c.break_(tab)
		mustPanic(t, c.name, func() { tab.Apply(4, next) }, append(c.want, "after set_replication_factor at index 4")...)
	}
}

// A restore checks what it built: a snapshot naming a broker twice panics
// at Finish.
func TestInvariantsCheckRestore(t *testing.T) {
	b := NewBuilder(nil)
	if err := b.Add(&Segment{ID: "a", Replicas: []BrokerID{2, 2}}); err != nil {
		t.Fatal(err)
	}
	mustPanic(t, "restore", func() { b.Finish(1, 3, nil) }, "after restore", "segment a", "names broker 2 twice")
}

// A healthy table passes: every command kind, a View, a refused command.
func TestInvariantsHoldOnGoodTable(t *testing.T) {
	tab := brokenTable(t)
	_ = tab.View()
	for i, c := range []Command{
		RegisterBroker{Broker: Broker{ID: 4}},
		SetSegmentReplicas{ID: "a", Expected: []BrokerID{1, 2}, Replicas: []BrokerID{2, 4}},
		SetSegmentReplicas{ID: "a", Expected: []BrokerID{1, 2}, Replicas: []BrokerID{3}}, // stale: refused
		SealSegment{ID: "a", Length: 2, ByteSize: 10, Checksum: CRC32C(7)},               // idempotent
	} {
		_ = tab.Apply(uint64(4+i), c)
	}
	if got := tab.View().Held(4); got != 1 {
		t.Fatalf("broker 4 holds %d segments, want 1", got)
	}
}

// A restore of a partition chain with a gap or an active segment before
// the last, or of a segment of an unregistered topic, panics naming it.
func TestInvariantsCheckChains(t *testing.T) {
	rs := []BrokerID{1}
	for _, c := range []struct {
		name   string
		topics []Topic
		segs   []Segment
		want   string
	}{
		{"unknown topic", nil, []Segment{{ID: PartitionSegmentID("t", 0, 0), Replicas: rs}}, `topic "t" partition 0 is not registered`},
		{"gap", []Topic{{"t", 1}}, []Segment{
			{ID: PartitionSegmentID("t", 0, 0), Sealed: true, Checksum: CRC32C(0), Replicas: rs},
			{ID: PartitionSegmentID("t", 0, 2), Replicas: rs}}, "(a gap)"},
		{"active before the last", []Topic{{"t", 1}}, []Segment{
			{ID: PartitionSegmentID("t", 0, 0), Replicas: rs},
			{ID: PartitionSegmentID("t", 0, 1), Replicas: rs}}, "which is active"},
		{"offsets", []Topic{{"t", 1}}, []Segment{
			{ID: PartitionSegmentID("t", 0, 0), Length: 2, ByteSize: 9, Sealed: true, Checksum: CRC32C(0), Replicas: rs},
			{ID: PartitionSegmentID("t", 0, 1), StartOffset: 3, Replicas: rs}}, "starts at 3"},
	} {
		b := NewBuilder(nil)
		for i := range c.segs {
			if err := b.Add(&c.segs[i]); err != nil {
				t.Fatal(err)
			}
		}
		b.SetTopics(c.topics)
		mustPanic(t, c.name, func() { b.Finish(1, 3, nil) }, "after restore", c.want)
	}
}
