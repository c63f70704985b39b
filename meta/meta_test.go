package meta

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sealed(id SegmentID, replicas ...BrokerID) Segment {
	return Segment{ID: id, StartOffset: 100, Length: 10, ByteSize: 1000, Sealed: true, Checksum: CRC32C(0), Replicas: replicas}
}

func TestSegmentValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		seg  Segment
		want string // substring of the error, "" for valid
	}{
		{"valid", sealed("s1", 1, 2, 3), ""},
		{"checksum zero is still a checksum", sealed("s1", 1), ""},
		{"broker twice", sealed("s1", 1, 2, 1), "broker 1 appears twice"},
		{"broker zero", sealed("s1", 1, 0), "broker id 0"},
		{"negative size", Segment{ID: "s1", ByteSize: -1, Replicas: []BrokerID{1}}, "byte_size -1 is negative"},
		{"sealed without checksum", Segment{ID: "s1", Length: 1, ByteSize: 10, Sealed: true, Replicas: []BrokerID{1}}, "sealed without a checksum"},
		{"bytes without records", Segment{ID: "s1", ByteSize: 10, Replicas: []BrokerID{1}}, "10 bytes for zero records"},
		{"empty id", sealed("", 1), "segment id is empty"},
		{"escaping id", sealed("../etc", 1), "starts with a dot"},
		{"slash in id", sealed("a/b", 1), `byte '/' at 1`},
		{"long id", sealed(SegmentID(strings.Repeat("a", 201)), 1), "more than 200"},
		{"overflow", Segment{ID: "s", StartOffset: ^uint64(0), Length: 2, ByteSize: 1, Replicas: []BrokerID{1}}, "overflows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.seg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate() = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestChecksumText(t *testing.T) {
	for _, c := range []Checksum{NoChecksum, CRC32C(0), CRC32C(0xdeadbeef)} {
		b, _ := c.MarshalText()
		var got Checksum
		if err := got.UnmarshalText(b); err != nil || got != c {
			t.Fatalf("round trip %v: got %v, %v", c, got, err)
		}
	}
	var c Checksum
	if err := c.UnmarshalText([]byte("md5:00")); err == nil {
		t.Fatal("accepted md5:00")
	}
}

func TestCommandRoundTrip(t *testing.T) {
	cmds := []Command{
		RegisterBroker{Broker{ID: 3, Rack: "r1", RPCAddr: "127.0.0.1:1", DataAddr: "127.0.0.1:2"}},
		CreateSegment{Segment{ID: "s1", StartOffset: 5, Replicas: []BrokerID{1, 2}}},
		SealSegment{ID: "s1", Length: 3, ByteSize: 90, Checksum: CRC32C(7)},
		SetSegmentReplicas{ID: "s1", Expected: []BrokerID{1, 2}, Replicas: []BrokerID{1, 3}},
		SetReplicationFactor{Factor: 3},
	}
	for _, c := range cmds {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		b2, _ := EncodeCommand(got)
		if string(b) != string(b2) {
			t.Fatalf("round trip: %s != %s", b, b2)
		}
	}
	for _, bad := range []struct{ in, want string }{
		{`{"op":"drop_everything","args":{}}`, `op "drop_everything" is unknown`},
		{`{"op":"seal_segment","args":{"id":"s1","byte_size":1,"checksum":"crc32c:00000001","extra":1}}`, "unknown field"},
		{`{"op":"set_segment_replicas","args":{"id":"s1","expected":[1],"replicas":[2,2]}}`, "appears twice"},
		{`{"op":"seal_segment","args":{"id":"s1","byte_size":1}}`, "no checksum"},
		{`{"op":`, "unexpected end"},
	} {
		_, err := DecodeCommand([]byte(bad.in))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("DecodeCommand(%s) = %v, want error containing %q", bad.in, err, bad.want)
		}
	}
}

func TestTableCompareAndSet(t *testing.T) {
	tb := NewTable(3)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tb.Apply(1, CreateSegment{Segment{ID: "s1", Replicas: []BrokerID{1, 2, 3}}}))
	if err := tb.Apply(2, CreateSegment{Segment{ID: "s1", Replicas: []BrokerID{1}}}); !errors.Is(err, ErrSegmentExists) {
		t.Fatalf("second create: %v", err)
	}
	must(tb.Apply(3, SealSegment{ID: "s1", Length: 2, ByteSize: 64, Checksum: CRC32C(9)}))
	must(tb.Apply(4, SetSegmentReplicas{ID: "s1", Expected: []BrokerID{1, 2, 3}, Replicas: []BrokerID{1, 2, 4}}))
	// The same command again is stale: its expected set was replaced.
	err := tb.Apply(5, SetSegmentReplicas{ID: "s1", Expected: []BrokerID{1, 2, 3}, Replicas: []BrokerID{1, 2, 5}})
	if !errors.Is(err, ErrStaleReplicas) {
		t.Fatalf("stale CAS: %v", err)
	}
	seg, _ := tb.Segment("s1")
	if !SameReplicas(seg.Replicas, []BrokerID{1, 2, 4}) || seg.Version != 3 {
		t.Fatalf("after CAS: %+v", seg)
	}
	if err := tb.Apply(6, SealSegment{ID: "s1", Length: 3, ByteSize: 64, Checksum: CRC32C(9)}); !errors.Is(err, ErrSealed) {
		t.Fatalf("reseal with other length: %v", err)
	}
	if err := tb.Apply(7, SetSegmentReplicas{ID: "nope", Expected: nil, Replicas: []BrokerID{1}}); !errors.Is(err, ErrUnknownSegment) {
		t.Fatalf("unknown segment: %v", err)
	}
	snap := tb.Snapshot()
	if snap.Index != 7 || len(snap.Segments) != 1 {
		t.Fatalf("snapshot: %+v", snap)
	}
	if err := snap.Validate(); err != nil {
		t.Fatal(err)
	}
	// The snapshot shares nothing with the table.
	snap.Segments[0].Replicas[0] = 99
	if seg, _ := tb.Segment("s1"); seg.Replicas[0] != 1 {
		t.Fatal("snapshot aliases the table")
	}
}

// A sealed segment's start_offset, length, byte_size and checksum never
// change (invariant 4): a command that would change them is refused with
// ErrSealed naming the segment, the field and both values, and changes
// nothing; sealing again with the same values is idempotent.
func TestSealedSegmentImmutable(t *testing.T) {
	tb := NewTable(3)
	if err := tb.Apply(1, CreateSegment{Segment{ID: "s1", StartOffset: 100, Replicas: []BrokerID{1, 2, 3}}}); err != nil {
		t.Fatal(err)
	}
	seal := SealSegment{ID: "s1", Length: 10, ByteSize: 263168, Checksum: CRC32C(0xabcd)}
	if err := tb.Apply(2, seal); err != nil {
		t.Fatal(err)
	}
	want, _ := tb.Segment("s1")
	if err := tb.Apply(3, seal); err != nil {
		t.Fatalf("sealing again with the same values: %v", err)
	}
	if got, _ := tb.Segment("s1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("idempotent re-seal changed the segment: %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name  string
		c     SealSegment
		wants []string
	}{
		{"byte_size 0", SealSegment{ID: "s1", Length: 10, ByteSize: 0, Checksum: CRC32C(0xabcd)}, []string{"s1", "byte_size 263168 -> 0"}},
		{"length", SealSegment{ID: "s1", Length: 0, ByteSize: 263168, Checksum: CRC32C(0xabcd)}, []string{"s1", "length 10 -> 0"}},
		{"checksum", SealSegment{ID: "s1", Length: 10, ByteSize: 263168, Checksum: CRC32C(0)}, []string{"s1", "checksum crc32c:0000abcd -> crc32c:00000000"}},
		{"all", SealSegment{ID: "s1", Length: 0, ByteSize: 0, Checksum: CRC32C(0)}, []string{"length 10 -> 0", "byte_size 263168 -> 0", "checksum crc32c:0000abcd -> crc32c:00000000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tb.Apply(9, tc.c)
			if !errors.Is(err, ErrSealed) {
				t.Fatalf("Apply(%+v) = %v, want ErrSealed", tc.c, err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if got, _ := tb.Segment("s1"); !reflect.DeepEqual(got, want) {
				t.Fatalf("refused command changed the segment: %+v, want %+v", got, want)
			}
		})
	}
	// The other commands cannot reach these fields either.
	if err := tb.Apply(10, CreateSegment{Segment{ID: "s1", StartOffset: 0, Replicas: []BrokerID{1}}}); !errors.Is(err, ErrSegmentExists) {
		t.Fatalf("create over a sealed segment: %v", err)
	}
	if err := tb.Apply(11, SetSegmentReplicas{ID: "s1", Expected: []BrokerID{1, 2, 3}, Replicas: []BrokerID{1, 2, 4}}); err != nil {
		t.Fatal(err)
	}
	got, _ := tb.Segment("s1")
	if got.StartOffset != want.StartOffset || got.Length != want.Length || got.ByteSize != want.ByteSize || got.Checksum != want.Checksum || !got.Sealed {
		t.Fatalf("set replicas changed the seal: %+v, want %+v", got, want)
	}
}

// A snapshot that would change a sealed segment of the table is refused by
// CheckRestore, naming the segment and the field; an equal or extending one
// is not.
func TestCheckRestoreSealed(t *testing.T) {
	tb := NewTable(3)
	mustApply := func(i uint64, c Command) {
		t.Helper()
		if err := tb.Apply(i, c); err != nil {
			t.Fatal(err)
		}
	}
	mustApply(1, CreateSegment{Segment{ID: "a", StartOffset: 0, Replicas: []BrokerID{1, 2, 3}}})
	mustApply(2, SealSegment{ID: "a", Length: 10, ByteSize: 263168, Checksum: CRC32C(7)})
	mustApply(3, CreateSegment{Segment{ID: "b", StartOffset: 10, Replicas: []BrokerID{1, 2, 3}}})

	good := tb.Snapshot()
	good.Index = 9
	good.Segments = append(good.Segments, Segment{ID: "c", StartOffset: 20, Replicas: []BrokerID{1}})
	good.Segments[1].Length, good.Segments[1].ByteSize, good.Segments[1].Checksum, good.Segments[1].Sealed = 3, 90, CRC32C(1), true
	if err := tb.CheckRestore(&good); err != nil {
		t.Fatalf("a snapshot that seals an active segment and adds one: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Segment)
		want string
	}{
		{"byte_size 0", func(s *Segment) { s.ByteSize = 0 }, "byte_size 263168 -> 0"},
		{"start_offset", func(s *Segment) { s.StartOffset = 5 }, "start_offset 0 -> 5"},
		{"checksum", func(s *Segment) { s.Checksum = CRC32C(8) }, "checksum crc32c:00000007 -> crc32c:00000008"},
		{"unsealed", func(s *Segment) { s.Sealed = false }, "sealed true -> false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := tb.Snapshot()
			tc.edit(&bad.Segments[0])
			err := tb.CheckRestore(&bad)
			if !errors.Is(err, ErrSealed) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), " a:") {
				t.Fatalf("CheckRestore = %v, want ErrSealed naming segment a and %q", err, tc.want)
			}
		})
	}
}

func TestSnapshotSameReplicaSets(t *testing.T) {
	a := Snapshot{Segments: []Segment{{ID: "a", Replicas: []BrokerID{1, 2, 3}}, {ID: "b", Replicas: []BrokerID{2, 3, 4}}}}
	b := Snapshot{Segments: []Segment{{ID: "a", Replicas: []BrokerID{1, 2, 3}}, {ID: "b", Replicas: []BrokerID{2, 3, 4}}}}
	if !a.SameReplicaSets(&b) {
		t.Error("the same sets differ")
	}
	b.Segments[1].Replicas = []BrokerID{4, 3, 1}
	if a.SameReplicaSets(&b) {
		t.Error("a changed set is the same")
	}
	if a.SameReplicaSets(&Snapshot{Segments: a.Segments[:1]}) {
		t.Error("a missing segment is the same")
	}
}
