package cluster

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// fullSnapshot is a snapshot in which every field of meta.Snapshot, and
// of every struct it holds, is set (not zero) in at least one element:
// checkEveryFieldSet says so, and fails naming a field added to meta
// without a value here.
func fullSnapshot() meta.Snapshot {
	until := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	return meta.Snapshot{
		Index:             42,
		ReplicationFactor: 3,
		Brokers: []meta.Broker{
			{ID: 1, Rack: "r1", AdminAddr: "a:1", RaftAddr: "a:2", RPCAddr: "a:3", DataAddr: "a:4", KafkaAddr: "a:5",
				Mode: meta.ModeMaintenance, Until: until},
			{ID: 2},
			{ID: 3, Rack: "r2"},
		},
		Topics: []meta.Topic{{Name: "orders", Partitions: 2}},
		Groups: []meta.GroupOffsets{{Group: "billing", Offsets: []meta.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 17, LeaderEpoch: 2, Metadata: "m"}, {Topic: "orders", Partition: 1, Offset: 0}}}},
		Segments: []meta.Segment{
			{ID: "a-0001", StartOffset: 10, Length: 5, ByteSize: 900, Sealed: true, Checksum: meta.CRC32C(0), Replicas: []meta.BrokerID{1, 2, 3}, Version: 7},
			{ID: "a-0002", StartOffset: 15, Length: 0, Version: 1},                                           // follows a-0001; no replicas
			{ID: "a-0003", StartOffset: 3, Length: 4, ByteSize: 8, Replicas: []meta.BrokerID{3}, Version: 2}, // starts before the last end
			{ID: "b", StartOffset: math.MaxUint64, Length: 0, ByteSize: math.MinInt64, Version: 0},           // extremes, an id sharing nothing
			{ID: meta.SegmentID("b-" + strings.Repeat("x", 150)), StartOffset: 1, Length: math.MaxUint64 - 1, ByteSize: math.MaxInt64,
				Sealed: true, Checksum: meta.CRC32C(math.MaxUint32), Replicas: []meta.BrokerID{math.MaxUint32, 1}, Version: math.MaxUint64},
			{ID: "k.orders.00001.0000000000", StartOffset: 0, Length: 1, ByteSize: 1, Replicas: []meta.BrokerID{2}, Version: 1},
		},
	}
}

// checkEveryFieldSet fails for each field of the structs in vals (all of
// one type), and recursively of the structs they hold (through slices),
// that is zero in every one of them.
func checkEveryFieldSet(t *testing.T, vals []reflect.Value, path string) {
	t.Helper()
	if len(vals) == 0 {
		t.Errorf("%s is empty in the fixture", path)
		return
	}
	typ := vals[0].Type()
	if typ == reflect.TypeFor[time.Time]() {
		return
	}
	for i := 0; i < typ.NumField(); i++ {
		var inner []reflect.Value // the structs this field holds, in every value
		set := false
		for _, v := range vals {
			f := v.Field(i)
			set = set || !f.IsZero()
			switch {
			case f.Kind() == reflect.Struct:
				inner = append(inner, f)
			case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct:
				for j := 0; j < f.Len(); j++ {
					inner = append(inner, f.Index(j))
				}
			}
		}
		name := path + "." + typ.Field(i).Name
		if !set {
			t.Errorf("%s is zero in every element of the fixture: give it a value", name)
			continue
		}
		if len(inner) > 0 {
			checkEveryFieldSet(t, inner, name)
		}
	}
}

// TestSnapshotCarriesEveryField: a snapshot with every field set (as a
// table keeps it: an empty replica set is nil) comes
// back whole through Persist and Restore (the compact format), and
// through the JSON format of version 1. A field added to meta.Snapshot,
// Broker, Topic or Segment fails here until the fixture sets it, and then
// until both formats carry it (viewHeader and decodeField for the
// header's, appendCompact and compactReader.segment for a segment's).
func TestSnapshotCarriesEveryField(t *testing.T) {
	want := fullSnapshot()
	checkEveryFieldSet(t, []reflect.Value{reflect.ValueOf(want)}, "Snapshot")
	f := newFSM(zerolog.Nop())
	f.table = meta.TableFromSnapshot(want)
	if got := f.snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatalf("meta.TableFromSnapshot does not keep the fixture:\n got %+v\nwant %+v", got, want)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := snap.Persist(&memSink{Buffer: &compact}); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(compact.Bytes(), []byte(compactMagic)) {
		t.Fatalf("Persist wrote %.40q..., not the compact format", compact.Bytes())
	}
	var legacy bytes.Buffer
	if err := writeSnapshot(&legacy, &want); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"compact": compact.Bytes(), "json": legacy.Bytes()} {
		g := newFSM(zerolog.Nop())
		if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			t.Fatalf("%s: Restore: %v", name, err)
		}
		if got := g.snapshot(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: restored\n %+v\nwant %+v", name, got, want)
		}
		if got, err := readSnapshot(bytes.NewReader(data)); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: readSnapshot: %v\n got %+v\nwant %+v", name, err, got, want)
		}
	}
	t.Logf("%d segments: %d bytes compact, %d bytes JSON", len(want.Segments), compact.Len(), legacy.Len())
}

// compactOf returns s in the compact format.
func compactOf(t testing.TB, s meta.Snapshot) []byte {
	var buf bytes.Buffer
	if err := writeCompact(&buf, s, len(s.Segments), func(yield func(int, *meta.Segment) bool) {
		for i := range s.Segments {
			if !yield(i, &s.Segments[i]) {
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Corrupt, cut or extended compact snapshots are refused with
// ErrBadSnapshot, saying what was wrong; none panics.
func TestCompactRefusesDamage(t *testing.T) {
	good := compactOf(t, fullSnapshot())
	if _, err := readSnapshot(bytes.NewReader(good)); err != nil {
		t.Fatal(err)
	}
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	// The only segment's flags byte (4: replicas nil) follows its id
	// (shared 0, length 1, "a").
	one := compactOf(t, meta.Snapshot{Brokers: []meta.Broker{}, Segments: []meta.Segment{{ID: "a"}}})
	one[bytes.LastIndex(one, []byte{0, 1, 'a', flagNilReplicas})+3] |= 0x80
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"cut in a segment", good[:len(good)-20], "unexpected EOF"},
		{"cut before the crc", good[:len(good)-2], "end"},
		{"a byte after the end", append(bytes.Clone(good), 0), "after the end"},
		{"a flipped bit", with(func(b []byte) []byte { b[len(b)-12] ^= 0x10; return b }), ""},
		{"a later version", with(func(b []byte) []byte { b[len(compactMagic)] = 3; return b }), "version 3"},
		{"unknown flags", one, "flags 0x84"},
	}
	for _, c := range cases {
		_, err := readSnapshot(bytes.NewReader(c.data))
		if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrBadSnapshot saying %q", c.name, err, c.want)
		}
	}
}

// A compact snapshot that would change a sealed segment is refused as a
// JSON one is (TestRestoreRefusesSealedChange), and the state kept.
func TestCompactRefusesSealedChange(t *testing.T) {
	f := newFSM(zerolog.Nop())
	fillFSM(t, f, 3)
	before := f.snapshot()
	bad := copySnapshot(&before)
	bad.Index += 10
	bad.Segments[1].Checksum = meta.CRC32C(12345)
	err := f.Restore(io.NopCloser(bytes.NewReader(compactOf(t, bad))))
	if !errors.Is(err, ErrBadSnapshot) || !errors.Is(err, meta.ErrSealed) || !strings.Contains(err.Error(), "seg-00000001") {
		t.Fatalf("Restore(changed checksum) = %v, want ErrBadSnapshot and meta.ErrSealed naming seg-00000001", err)
	}
	if got := f.snapshot(); !reflect.DeepEqual(got, before) {
		t.Fatal("a refused Restore changed the state")
	}
}

// FuzzCompactDecode: no input makes the decoder panic (either format),
// and what it accepts it writes back to the same segments: written,
// read and written again, the bytes are the same.
func FuzzCompactDecode(f *testing.F) {
	f.Add(compactOf(f, fullSnapshot()))
	f.Add(compactOf(f, meta.Snapshot{Brokers: []meta.Broker{}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := readSnapshot(bytes.NewReader(data))
		if err != nil {
			return
		}
		first := compactOf(t, s)
		again, err := readSnapshot(bytes.NewReader(first))
		if err != nil || !reflect.DeepEqual(again.Segments, s.Segments) {
			t.Fatalf("accepted %+v; written and read again: %+v, %v", s, again, err)
		}
		if second := compactOf(t, again); !bytes.Equal(second, first) {
			t.Fatalf("accepted %+v; written twice: %q, then %q", s, first, second)
		}
	})
}
