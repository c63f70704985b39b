package heal

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// benchInput builds a pass over n sealed segments at replication factor 3
// on 60 brokers in 3 racks, with anomalies on one copy of every
// 1/anomalyShare-th segment (a mix of short, missing, overrun and latched).
// It returns the input, whose View holds the segments, and the same
// metadata as a flat snapshot, for the baseline.
func benchInput(n int, anomalyShare float64) (Input, meta.Snapshot) {
	const nb = 60
	in := Input{
		Now:    t0,
		Policy: Policy{Grace: 10 * time.Second, SettleBatch: 64, MaxBackfillsPerBroker: 8, MaxBackfills: 256},
	}
	snap := meta.Snapshot{Index: 1, ReplicationFactor: 3, Brokers: brokers(nb, "r1", "r2", "r3")}
	reps := make([]meta.BrokerID, 3*n)
	snap.Segments = make([]meta.Segment, n)
	for i := range snap.Segments {
		r := reps[3*i : 3*i+3 : 3*i+3]
		r[0], r[1], r[2] = meta.BrokerID(i%nb+1), meta.BrokerID((i+1)%nb+1), meta.BrokerID((i+2)%nb+1)
		snap.Segments[i] = meta.Segment{ID: meta.SegmentID(fmt.Sprintf("seg-%09d", i)), Length: 1000, ByteSize: 1 << 20,
			Sealed: true, Checksum: meta.CRC32C(uint32(i)), Replicas: r, Version: 1}
	}
	in.Reports = make([]ProbeReport, nb)
	for b := range in.Reports {
		in.Reports[b] = ProbeReport{Broker: meta.BrokerID(b + 1), Index: 1, Copies: 3 * n / nb}
		in.Seen = append(in.Seen, Seen{Broker: meta.BrokerID(b + 1), At: t0})
	}
	if anomalyShare > 0 {
		every := int(1 / anomalyShare)
		kinds := []Kind{Short, Overrun, Missing, Latched}
		for i := 0; i < n; i += every {
			s := &snap.Segments[i]
			k := kinds[(i/every)%len(kinds)]
			b := s.Replicas[(i/every)%3]
			r := &in.Reports[b-1]
			r.Facts = append(r.Facts, factOf(s.ID, k, map[Kind]int64{Short: 1000, Overrun: 1<<20 + 40}[k], false))
		}
	}
	in.View = meta.NewView(snap)
	return in, snap
}

func benchPass(b *testing.B, n int, share float64) {
	in, _ := benchInput(n, share)
	var p Planner
	if _, err := p.Plan(in); err != nil { // warm the buffers
		b.Fatal(err)
	}
	runtime.GC() // the setup's garbage is not the pass's
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	var plan Plan
	for i := 0; i < b.N; i++ {
		plan, _ = p.Plan(in)
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	segs := float64(b.N) * float64(n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/segs, "ns/segment")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/segs, "allocs/segment")
	b.ReportMetric(float64(len(plan.Actions)), "actions/pass")
}

// BenchmarkPass: the pass over 100,000 and 1,000,000 sealed segments at
// replication factor 3, healthy and with 1% anomalies. Cost per segment
// must not grow with the count.
func BenchmarkPass(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("segments=%d/baseline", n), func(b *testing.B) { benchBaseline(b, n) })
		b.Run(fmt.Sprintf("segments=%d/baseline-view", n), func(b *testing.B) { benchBaselineView(b, n) })
		for _, share := range []float64{0, 0.01} {
			b.Run(fmt.Sprintf("segments=%d/anomalies=%g%%", n, share*100), func(b *testing.B) { benchPass(b, n, share) })
		}
	}
}

// benchBaseline is the least any pass must do: read every segment's id,
// seal flag and replicas once. BenchmarkPass is quoted as a ratio to it.
func benchBaseline(b *testing.B, n int) {
	_, snap := benchInput(n, 0)
	runtime.GC()
	b.ResetTimer()
	var sum uint64
	for i := 0; i < b.N; i++ {
		for j := range snap.Segments {
			s := &snap.Segments[j]
			if s.Sealed {
				sum += uint64(len(s.ID))
			}
			for _, r := range s.Replicas {
				sum += uint64(r)
			}
		}
	}
	b.StopTimer()
	if sum == 0 {
		b.Fatal("no work")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*float64(n)), "ns/segment")
}

// benchBaselineView is benchBaseline over the pass's meta.View (All), the
// least a pass over a view must do.
func benchBaselineView(b *testing.B, n int) {
	in, _ := benchInput(n, 0)
	runtime.GC()
	b.ResetTimer()
	var sum uint64
	for i := 0; i < b.N; i++ {
		for _, s := range in.View.All() {
			if s.Sealed {
				sum += uint64(len(s.ID))
			}
			for _, r := range s.Replicas {
				sum += uint64(r)
			}
		}
	}
	b.StopTimer()
	if sum == 0 {
		b.Fatal("no work")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*float64(n)), "ns/segment")
}
