package kafka

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
)

// latencyRing is how many recent handling times Latency keeps: at a higher
// request rate the p99 is that of the latest latencyRing requests.
const latencyRing = 4096

// Latency keeps the times of the latest Produce and Fetch requests and
// answers their p99, each request weighted by what a client waits on in
// it. A Produce counts from the moment its size prefix was read to the
// moment its response was written (receiving the body, decryption, the
// replicated append, encoding, encryption, the write), once per record
// it carries: a stall that holds a batch of a thousand records weighs as
// a thousand late records, as the producers see it. A Fetch counts its
// handling without the wait for data the client asked for
// (MaxWaitMillis), once. The broker adds what else a client waits on
// (ObserveN): on a follower, each frame of a partition leader, as the
// longer of its own append and the leader's previous replicate round,
// once per record of the frame. What a request
// spent queued in the socket before it was read is not seen. It is safe
// for concurrent use.
type Latency struct {
	mu      sync.Mutex
	ends    [latencyRing]time.Time     // protected by mu
	took    [latencyRing]time.Duration // protected by mu
	weight  [latencyRing]int32         // protected by mu
	next    int                        // protected by mu: the slot to write
	scratch []sample                   // protected by mu: P99's buffer
}

type sample struct {
	took   time.Duration
	weight int64
}

// Observe records one request that ended at end after took, weighing one;
// on a nil Latency it does nothing.
func (l *Latency) Observe(end time.Time, took time.Duration) { l.ObserveN(end, took, 1) }

// ObserveN records one request that ended at end after took, weighing n
// (its records; below 1 counts as 1); on a nil Latency it does nothing.
func (l *Latency) ObserveN(end time.Time, took time.Duration, n int) {
	if l == nil {
		return
	}
	w := int32(min(max(n, 1), math.MaxInt32))
	l.mu.Lock()
	l.ends[l.next], l.took[l.next], l.weight[l.next] = end, took, w
	l.next = (l.next + 1) % latencyRing
	l.mu.Unlock()
}

// P99 is the 99th percentile (nearest rank, by weight) of the times of the
// requests that ended after since among the latest kept, and false when
// none did.
func (l *Latency) P99(since time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.scratch = l.scratch[:0]
	var total int64
	for i, end := range l.ends {
		if end.After(since) {
			l.scratch = append(l.scratch, sample{l.took[i], int64(l.weight[i])})
			total += int64(l.weight[i])
		}
	}
	if len(l.scratch) == 0 {
		return 0, false
	}
	slices.SortFunc(l.scratch, func(a, b sample) int { return cmp.Compare(a.took, b.took) })
	rank := (total*99 + 99) / 100 // ceil(0.99 total), 1-based
	var seen int64
	for _, s := range l.scratch {
		if seen += s.weight; seen >= rank {
			return s.took, true
		}
	}
	return l.scratch[len(l.scratch)-1].took, true
}
