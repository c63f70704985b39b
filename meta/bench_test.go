package meta

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/malachi-log/malachi/testbed/benchenv"
)

// Benchmarks at 10^6 and 10^7 sealed segments, RF 3, 1,000 brokers, ids
// like "t-0001-000000012345" (19 bytes). Each reports load1, the load
// average when it ran. Run one size at a time, e.g.
//
//	go test -run X -bench 'Memory|View|HeldBy' -benchmem -benchtime 1x -count 5 ./meta/   (memory)
//	go test -run X -bench 'View|HeldBy' -benchmem -count 5 ./meta/

const benchBrokers = 1000

var benchSizes = []struct {
	name string
	n    int
}{{"segments=10^6", 1_000_000}, {"segments=10^7", 10_000_000}}

// benchSegment is the i-th of n segments in id order: topics t-0000 to
// t-0999, each a run of sequence numbers.
func benchSegment(i, n int, rs []BrokerID) Segment {
	per := max(1, n/benchBrokers)
	b := BrokerID(i%benchBrokers + 1)
	rs[0], rs[1], rs[2] = b, (b+332)%benchBrokers+1, (b+665)%benchBrokers+1
	return Segment{ID: SegmentID(fmt.Sprintf("t-%04d-%012d", i/per, i%per)), StartOffset: uint64(i%per) * 1000, Length: 1000,
		ByteSize: 1 << 20, Sealed: true, Checksum: CRC32C(uint32(i)), Replicas: rs, Version: 2}
}

// buildTable builds n segments the way a restore does.
func buildTable(n int) *Table {
	b := NewBuilder(nil)
	rs := make([]BrokerID, 3)
	for i := range n {
		s := benchSegment(i, n, rs)
		if err := b.Add(&s); err != nil {
			panic(err)
		}
	}
	brokers := make([]Broker, benchBrokers)
	for i := range brokers {
		brokers[i] = Broker{ID: BrokerID(i + 1), Rack: "r" + strconv.Itoa(i%10)}
	}
	return b.Finish(uint64(2*n), 3, brokers)
}

// applyTable builds n segments by Apply, created interleaved across
// topics (each topic's next segment in turn), then sealed.
func applyTable(n int) *Table {
	t := NewTable(3)
	per := max(1, n/benchBrokers)
	idx := uint64(0)
	for seq := range per {
		for topic := range benchBrokers {
			i := topic*per + seq
			s := benchSegment(i, n, make([]BrokerID, 3))
			s.Sealed, s.Checksum, s.Length, s.ByteSize = false, NoChecksum, 0, 0
			idx++
			if err := t.Apply(idx, CreateSegment{Segment: s}); err != nil {
				panic(err)
			}
			idx++
			if err := t.Apply(idx, SealSegment{ID: s.ID, Length: 1000, ByteSize: 1 << 20, Checksum: CRC32C(uint32(i))}); err != nil {
				panic(err)
			}
		}
	}
	return t
}

// mapTable is the layout before views: map[SegmentID]Segment.
func mapTable(n int) map[SegmentID]Segment {
	m := make(map[SegmentID]Segment)
	rs := make([]BrokerID, 3)
	for i := range n {
		s := benchSegment(i, n, rs)
		m[s.ID] = s.Clone()
	}
	return m
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemory reports the live heap per segment (B/segment) of the
// table built by restore (layout=table-restore) and by Apply
// (layout=table-apply, creates interleaved across topics), against the
// map-based layout before views (baseline=map). Run with -benchtime 1x.
func BenchmarkMemory(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			for _, layout := range []string{"baseline=map", "layout=table-restore", "layout=table-apply"} {
				b.Run(layout, func(b *testing.B) {
					for b.Loop() {
						before := liveHeap()
						var keep any
						switch layout {
						case "baseline=map":
							keep = mapTable(sz.n)
						case "layout=table-restore":
							keep = buildTable(sz.n)
						default:
							keep = applyTable(sz.n)
						}
						after := liveHeap()
						runtime.KeepAlive(keep)
						b.ReportMetric(float64(after-before)/float64(sz.n), "B/segment")
					}
					benchenv.ReportLoad(b)
				})
			}
		})
	}
}

// BenchmarkView compares, per operation: baseline=flat-snapshot, the flat
// deep copy every reader made before views (Snapshot); view-unchanged,
// View with nothing applied since; apply-no-view, one SetSegmentReplicas
// with no View taken in between (writes in place); apply+view, one
// SetSegmentReplicas and then View (the copy-on-write of the chunks it
// touches plus a new View).
func BenchmarkView(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			t := buildTable(sz.n)
			id := t.View().At(sz.n / 2).ID
			cur := []BrokerID{}
			if s, ok := t.Segment(id); ok {
				cur = s.Replicas
			}
			idx := t.Index()
			cas := func() {
				next := []BrokerID{cur[1], cur[2], cur[0]}
				idx++
				if err := t.Apply(idx, SetSegmentReplicas{ID: id, Expected: cur, Replicas: next}); err != nil {
					b.Fatal(err)
				}
				cur = next
			}
			b.Run("baseline=flat-snapshot", func(b *testing.B) {
				for b.Loop() {
					if s := t.Snapshot(); len(s.Segments) != sz.n {
						b.Fatal(len(s.Segments))
					}
				}
				benchenv.ReportLoad(b)
			})
			b.Run("view-unchanged", func(b *testing.B) {
				for b.Loop() {
					if t.View().Len() != sz.n {
						b.Fatal("len")
					}
				}
				benchenv.ReportLoad(b)
			})
			b.Run("apply-no-view", func(b *testing.B) {
				for b.Loop() {
					cas()
				}
				benchenv.ReportLoad(b)
			})
			b.Run("apply+view", func(b *testing.B) {
				for b.Loop() {
					cas()
					if t.View().Len() != sz.n {
						b.Fatal("len")
					}
				}
				benchenv.ReportLoad(b)
			})
		})
	}
}

// BenchmarkHeldBy compares finding one broker's copies: held-by, the
// per-broker index (View.HeldBy); baseline=scan, a filter over every
// segment of a View; baseline=flat-copy+scan, today's probe (a flat
// Snapshot, then the filter).
func BenchmarkHeldBy(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			v := buildTable(sz.n).View()
			want := v.Held(7)
			check := func(n int) {
				if n != want || n == 0 {
					b.Fatalf("found %d copies, want %d", n, want)
				}
			}
			b.Run("held-by", func(b *testing.B) {
				for b.Loop() {
					n := 0
					for s := range v.HeldBy(7) {
						n += int(s.Length / 1000)
					}
					check(n)
				}
				benchenv.ReportLoad(b)
			})
			b.Run("baseline=scan", func(b *testing.B) {
				for b.Loop() {
					n := 0
					for _, s := range v.All() {
						if s.HasReplica(7) {
							n++
						}
					}
					check(n)
				}
				benchenv.ReportLoad(b)
			})
			b.Run("baseline=flat-copy+scan", func(b *testing.B) {
				for b.Loop() {
					s := v.Snapshot()
					n := 0
					for i := range s.Segments {
						if s.Segments[i].HasReplica(7) {
							n++
						}
					}
					check(n)
				}
				benchenv.ReportLoad(b)
			})
		})
	}
}
