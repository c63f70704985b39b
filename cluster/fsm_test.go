package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
	"pgregory.net/rapid"
)

func logOf(t testing.TB, index uint64, c meta.Command) *raft.Log {
	b, err := meta.EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: b}
}

// fillFSM creates n sealed segments with increasing ids, in batches as
// raft would deliver them.
func fillFSM(t testing.TB, f *fsm, n int) uint64 {
	idx := uint64(1)
	f.ApplyBatch([]*raft.Log{logOf(t, idx, meta.SetReplicationFactor{Factor: 3})})
	var batch []*raft.Log
	for i := range n {
		id := meta.SegmentID(fmt.Sprintf("seg-%08d", i))
		s := meta.Segment{ID: id, StartOffset: uint64(i) * 100, Length: 100, ByteSize: 1 << 20, Replicas: []meta.BrokerID{1, 2, 3}}
		idx++
		batch = append(batch, logOf(t, idx, meta.CreateSegment{Segment: s}))
		idx++
		batch = append(batch, logOf(t, idx, meta.SealSegment{ID: id, Length: 100, ByteSize: 1 << 20, Checksum: meta.CRC32C(uint32(i))}))
		if len(batch) >= 512 {
			f.ApplyBatch(batch)
			batch = batch[:0]
		}
	}
	f.ApplyBatch(batch)
	return idx
}

func TestSnapshotPersistRestoreManySegments(t *testing.T) {
	n := 100_000
	if testing.Short() || raceEnabled {
		n = 10_000
	}
	f := newFSM(zerolog.Nop())
	fillFSM(t, f, n)
	f.ApplyBatch([]*raft.Log{logOf(t, 1<<40, meta.RegisterBroker{Broker: meta.Broker{ID: 2, Rack: "b"}})})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	sink := &memSink{Buffer: &buf}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !sink.closed {
		t.Fatal("Persist did not close the sink")
	}
	g := newFSM(zerolog.Nop())
	if err := g.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	want, got := f.table.Snapshot(), g.snapshot()
	if len(got.Segments) != n || !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %d segments at index %d, want %d at %d (or contents differ)", len(got.Segments), got.Index, len(want.Segments), want.Index)
	}
	if g.factor() != 3 || g.applied != want.Index {
		t.Fatalf("restored factor %d applied %d", g.factor(), g.applied)
	}
	// And it is the JSON of a meta.Snapshot, readable in one piece.
	var whole bytes.Buffer
	if err := writeSnapshot(&whole, &want); err != nil {
		t.Fatal(err)
	}
	if got, err := readSnapshot(&whole); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("readSnapshot: %v", err)
	}
}

// TestSnapshotMillionSegmentsMemory checks that persisting and restoring
// 10^6 segments stays within a sane heap, in either format: the stream
// never holds the whole encoding.
func TestSnapshotMillionSegmentsMemory(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("10^6 segments: skipped with -short and under -race (run without them)")
	}
	const n = 1_000_000
	segs := make([]meta.Segment, n)
	arena := make([]meta.BrokerID, 3*n)
	for i := range segs {
		r := arena[3*i : 3*i+3 : 3*i+3]
		r[0], r[1], r[2] = 1, 2, 3
		segs[i] = meta.Segment{ID: meta.SegmentID(fmt.Sprintf("seg-%08d", i)), Length: 100, ByteSize: 1 << 20, Sealed: true, Checksum: meta.CRC32C(uint32(i)), Replicas: r, Version: 2}
	}
	s := meta.Snapshot{Index: 7, ReplicationFactor: 3, Brokers: []meta.Broker{}, Segments: segs}
	for _, format := range []string{"json", "compact"} {
		pr, pw := io.Pipe()
		go func() {
			if format == "json" {
				pw.CloseWithError(writeSnapshot(pw, &s))
				return
			}
			pw.CloseWithError(writeCompact(pw, s, n, func(yield func(int, *meta.Segment) bool) {
				for i := range segs {
					if !yield(i, &segs[i]) {
						return
					}
				}
			}))
		}()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		counted := &countReader{r: pr}
		got, err := readSnapshot(counted)
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if len(got.Segments) != n || !reflect.DeepEqual(got.Segments[n-1], segs[n-1]) {
			t.Fatalf("%s: read %d segments", format, len(got.Segments))
		}
		// What stays is the decoded state: a Segment (88 bytes) plus its id
		// and replica set, ~120 bytes; the encoding is never held whole.
		live := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("%s, 10^6 segments: %d MB encoded; %d MB live after reading (%d B/segment); %d MB allocated in all",
			format, counted.n>>20, live>>20, live/n, (after.TotalAlloc-before.TotalAlloc)>>20)
		if live > 200*n {
			t.Fatalf("%s: reading %d segments keeps %d MB live, more than 200 B/segment", format, n, live>>20)
		}
		runtime.KeepAlive(got)
	}
}

// copySnapshot deep-copies s.
func copySnapshot(s *meta.Snapshot) meta.Snapshot { return meta.NewView(*s).Snapshot() }

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

type memSink struct {
	*bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	for _, in := range []string{
		``, `[]`, `{"index":1,"surprise":2}`,
		`{"index":1,"replication_factor":3,"brokers":[],"segments":[{"id":"b"},{"id":"a"}]}`,
		`{"index":1,"replication_factor":3,"brokers":[],"segments":[{"id":"a"}`,
	} {
		f := newFSM(zerolog.Nop())
		fillFSM(t, f, 3)
		before := f.snapshot()
		if err := f.Restore(io.NopCloser(bytes.NewReader([]byte(in)))); err == nil {
			t.Errorf("Restore(%q) succeeded", in)
		}
		if !reflect.DeepEqual(f.snapshot(), before) {
			t.Errorf("a failed Restore(%q) changed the state", in)
		}
	}
}

// TestCacheMatchesTable applies random commands, valid and refused, and
// checks after every batch that the patched cache equals a fresh
// Table.Snapshot, and that a caller's copy shares no memory with it.
func TestCacheMatchesTable(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := newFSM(zerolog.Nop())
		ids := []meta.SegmentID{"a", "b", "c", "d", "e"}
		brokers := rapid.SliceOfNDistinct(rapid.Uint32Range(1, 6), 1, 3, func(v uint32) uint32 { return v })
		idx := uint64(0)
		held := f.snapshot() // a copy taken early must never change
		heldWant := fmt.Sprint(held)
		var views []*meta.View // nor may a shared view
		var viewsWant []string
		for range rapid.IntRange(1, 40).Draw(rt, "n") {
			var c meta.Command
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			rs := func(label string) []meta.BrokerID {
				var out []meta.BrokerID
				for _, b := range brokers.Draw(rt, label) {
					out = append(out, meta.BrokerID(b))
				}
				return out
			}
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0:
				c = meta.CreateSegment{Segment: meta.Segment{ID: id, Replicas: rs("create")}}
			case 1:
				c = meta.SealSegment{ID: id, Length: 1, ByteSize: 10, Checksum: meta.CRC32C(1)}
			case 2, 3:
				cur, _ := f.segment(id)
				exp := cur.Replicas
				if rapid.Bool().Draw(rt, "stale") {
					exp = rs("stale")
				}
				c = meta.SetSegmentReplicas{ID: id, Expected: exp, Replicas: rs("set")}
			case 4:
				c = meta.RegisterBroker{Broker: meta.Broker{ID: meta.BrokerID(rapid.IntRange(1, 4).Draw(rt, "b")), Rack: rapid.StringN(0, 3, 3).Draw(rt, "rack")}}
			case 5:
				c = meta.SetReplicationFactor{Factor: rapid.IntRange(1, 5).Draw(rt, "f")}
			case 6: // refused for a broker not registered yet
				mode := rapid.SampledFrom([]meta.BrokerMode{meta.ModeActive, meta.ModeDecommissioning}).Draw(rt, "mode")
				c = meta.SetBrokerMode{Broker: meta.BrokerID(rapid.IntRange(1, 4).Draw(rt, "mb")), Mode: mode}
			}
			idx += uint64(rapid.IntRange(1, 3).Draw(rt, "gap"))
			f.ApplyBatch([]*raft.Log{logOf(t, idx, c)})
			if rapid.Bool().Draw(rt, "view") {
				v := f.view()
				if want := f.table.Snapshot(); !reflect.DeepEqual(v.Snapshot(), want) {
					rt.Fatalf("after %s:\nview %+v\ntable %+v", c.Op(), v.Snapshot(), want)
				}
				views = append(views, v)
				viewsWant = append(viewsWant, fmt.Sprint(v.Snapshot()))
			}
			if rapid.Bool().Draw(rt, "read") {
				got := f.snapshot()
				if want := f.table.Snapshot(); !reflect.DeepEqual(got, want) {
					rt.Fatalf("after %s:\ncache %+v\ntable %+v", c.Op(), got, want)
				}
				for i := range got.Segments { // scribble on the copy
					for j := range got.Segments[i].Replicas {
						got.Segments[i].Replicas[j] = 99
					}
				}
			}
		}
		if !reflect.DeepEqual(f.snapshot(), f.table.Snapshot()) {
			rt.Fatal("cache and table differ at the end")
		}
		if fmt.Sprint(held) != heldWant {
			rt.Fatal("an earlier caller's snapshot changed")
		}
		for i, v := range views {
			if fmt.Sprint(v.Snapshot()) != viewsWant[i] {
				rt.Fatalf("view %d changed under its holder:\n%v\nwas\n%v", i, v.Snapshot(), viewsWant[i])
			}
		}
	})
}

func TestApplyBatchResponses(t *testing.T) {
	f := newFSM(zerolog.Nop())
	out := f.ApplyBatch([]*raft.Log{
		logOf(t, 1, meta.CreateSegment{Segment: seg("a", 1)}),
		{Index: 2, Type: raft.LogNoop},
		logOf(t, 3, meta.CreateSegment{Segment: seg("a", 1)}),
		{Index: 4, Type: raft.LogCommand, Data: []byte(`{"op":"launch"}`)},
	})
	if r, ok := out[0].(applyResult); !ok || r.err != nil {
		t.Fatalf("first create: %#v", out[0])
	}
	if out[1] != nil {
		t.Fatalf("noop response %#v", out[1])
	}
	if r, ok := out[2].(applyResult); !ok || r.err == nil {
		t.Fatalf("duplicate create: %#v", out[2])
	}
	if r, ok := out[3].(applyResult); !ok || r.err == nil {
		t.Fatalf("undecodable command: %#v", out[3])
	}
	if f.applied != 4 {
		t.Fatalf("applied %d, want 4", f.applied)
	}
}

// A snapshot that would change a segment this node holds sealed (the
// attack: byte_size 0 on sealed segments) is refused, naming the segment
// and the field, and the state is left as it was; one that only adds to
// the state restores.
func TestRestoreRefusesSealedChange(t *testing.T) {
	f := newFSM(zerolog.Nop())
	fillFSM(t, f, 3)
	before := f.snapshot()
	persist := func(s meta.Snapshot) io.ReadCloser {
		var buf bytes.Buffer
		if err := writeSnapshot(&buf, &s); err != nil {
			t.Fatal(err)
		}
		return io.NopCloser(&buf)
	}
	bad := copySnapshot(&before)
	bad.Index += 10
	for _, i := range []int{0, 2} {
		bad.Segments[i].ByteSize = 0
	}
	err := f.Restore(persist(bad))
	if !errors.Is(err, ErrBadSnapshot) || !errors.Is(err, meta.ErrSealed) ||
		!strings.Contains(err.Error(), "seg-00000000") || !strings.Contains(err.Error(), "byte_size 1048576 -> 0") {
		t.Fatalf("Restore(byte_size 0) = %v, want ErrBadSnapshot and meta.ErrSealed naming seg-00000000 and byte_size 1048576 -> 0", err)
	}
	if got := f.snapshot(); !reflect.DeepEqual(got, before) {
		t.Fatal("a refused Restore changed the state")
	}
	if seg, _ := f.segment("seg-00000002"); seg.ByteSize != 1<<20 {
		t.Fatalf("segment after refused restore: %+v", seg)
	}

	good := copySnapshot(&before)
	good.Index += 10
	good.Segments = append(good.Segments, meta.Segment{ID: "seg-99999999", StartOffset: 300, Replicas: []meta.BrokerID{1}})
	if err := f.Restore(persist(good)); err != nil {
		t.Fatalf("Restore of a snapshot that only adds a segment: %v", err)
	}
	if got := f.snapshot(); len(got.Segments) != 4 || got.Index != good.Index {
		t.Fatalf("restored %d segments at index %d", len(got.Segments), got.Index)
	}
}

// Readers iterate Views while commands apply (creates that append to the
// last chunk a View holds, replica changes that copy chunks): under -race
// this shows that no View's memory is written.
func TestViewsReadWhileApplying(t *testing.T) {
	f := newFSM(zerolog.Nop())
	idx := fillFSM(t, f, 3000)
	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				v := f.view()
				n, held := 0, 0
				for _, s := range v.All() {
					n += len(s.Replicas)
				}
				for range v.HeldBy(2) {
					held++
				}
				if held != v.Held(2) || n < v.Len() {
					t.Errorf("view at %d: HeldBy(2) yielded %d, Held says %d", v.Index(), held, v.Held(2))
					return
				}
			}
		}()
	}
	cur := []meta.BrokerID{1, 2, 3}
	for i := range 2000 {
		idx++
		var c meta.Command = meta.CreateSegment{Segment: seg(fmt.Sprintf("seg-9%07d", i), 1, 2)}
		if i%2 == 1 {
			next := []meta.BrokerID{cur[1], cur[2], cur[0]}
			c = meta.SetSegmentReplicas{ID: "seg-00001500", Expected: cur, Replicas: next}
			cur = next
		}
		if r := f.ApplyBatch([]*raft.Log{logOf(t, idx, c)})[0].(applyResult); r.err != nil {
			t.Fatal(r.err)
		}
	}
	close(done)
	readers.Wait()
	if v := f.view(); v.Len() != 4000 || v.Held(1) != 4000 {
		t.Fatalf("%d segments, broker 1 holds %d", v.Len(), v.Held(1))
	}
}
