package kafka

import (
	"slices"
	"sync"
	"time"
)

// latencyRing is how many recent handling times Latency keeps: at a higher
// request rate the p99 is that of the latest latencyRing requests.
const latencyRing = 4096

// Latency keeps the handling times of the latest Produce and Fetch
// requests and answers their p99. For Produce the time is the whole
// handling (validation, the replicated append, its acknowledgement); for
// Fetch it leaves out the time spent waiting for data to arrive, which
// the client asked for (MaxWaitMillis). The broker adds what else a
// client waits on (Observe): a follower's append of the leader's frame.
// It is safe for concurrent use.
type Latency struct {
	mu      sync.Mutex
	ends    [latencyRing]time.Time     // protected by mu
	took    [latencyRing]time.Duration // protected by mu
	next    int                        // protected by mu: the slot to write
	scratch []time.Duration            // protected by mu: P99's buffer
}

// Observe records one request that ended at end after took; on a nil
// Latency it does nothing.
func (l *Latency) Observe(end time.Time, took time.Duration) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.ends[l.next], l.took[l.next] = end, took
	l.next = (l.next + 1) % latencyRing
	l.mu.Unlock()
}

// P99 is the 99th percentile (nearest rank) of the handling times of the
// requests that ended after since among the latest kept, and false when
// none did.
func (l *Latency) P99(since time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.scratch = l.scratch[:0]
	for i, end := range l.ends {
		if end.After(since) {
			l.scratch = append(l.scratch, l.took[i])
		}
	}
	if len(l.scratch) == 0 {
		return 0, false
	}
	slices.Sort(l.scratch)
	rank := (len(l.scratch)*99 + 99) / 100 // ceil(0.99 n), 1-based
	return l.scratch[rank-1], true
}
