package catchup

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Limits are the knobs an operator sets for one broker's transfers.
type Limits struct {
	// BytesPerSecond caps the bytes per second moved by all transfers that
	// share one Throttle (one broker). 0 means no cap.
	BytesPerSecond int64
	// MaxTransfers caps the transfers running at once through one
	// Throttle in each direction: those it receives (Client.Fetch) and,
	// apart, those it sends (Server). 0 means no cap. The two directions
	// never wait on each other's slots: a broker whose fetches hold every
	// receiving slot still serves the fetches of a broker fetching from
	// it, so two brokers fetching from each other cannot wait on each
	// other.
	MaxTransfers int
	// QueueWait is how long a transfer waits for a free slot before it is
	// refused with ErrBusy. 0 refuses at once.
	QueueWait time.Duration
	// IdleTimeout ends a transfer whose socket moves no byte for this long.
	// The deadline is pushed before every chunk and, on the zero-copy
	// target, again as bytes land within one; elsewhere it is pushed per
	// chunk only, so there a chunk (1 MiB, or the throttle's) must move
	// within IdleTimeout. 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Background runs each transfer (its bytes, and a received copy's
	// commit: verify, fsync) on a thread at the lowest CPU and
	// best-effort I/O priority (Linux), so that a broker's work for its
	// clients (Produce, Fetch) runs first on a busy machine, and the
	// transfer takes what the clients leave.
	Background bool
}

// DefaultIdleTimeout is the idle timeout when Limits.IdleTimeout is 0.
const DefaultIdleTimeout = 30 * time.Second

// maxChunk is the most bytes moved between two deadline refreshes, two
// progress callbacks and two token-bucket waits, but on the zero-copy
// target without a byte cap (spliceChunk). It is also the pipe size asked
// for by the splice path and the buffer size of the read/write path.
const maxChunk = 1 << 20

// spliceChunk is the zero-copy target's chunk when no byte cap applies.
// The target pushes its deadline as bytes land, so a chunk only spaces
// progress callbacks and bounds its socket reads: near a chunk's end the
// wake-up mark must fall to what the chunk still wants, and each end cost
// a few small wake-ups. BenchmarkCatchupPaired, 1 GiB, 12 rounds, three
// times, against 1 MiB chunks: CPU over both ends 0.90-0.91x, MB/s
// 1.12-1.13x (16 MiB: 0.92x; 64 MiB: 0.98x, its first chunk waits on every
// skb, before the mark knows the rate).
const spliceChunk = 4 << 20

// DefaultLimits returns limits suited to a broker on a 10 GbE link: no
// bandwidth cap, 4 transfers at once, a 10 s queue, a 30 s idle timeout.
func DefaultLimits() Limits {
	return Limits{MaxTransfers: 4, QueueWait: 10 * time.Second, IdleTimeout: DefaultIdleTimeout}
}

// Validate reports the first limit that makes no sense, naming it.
func (l Limits) Validate() error {
	switch {
	case l.BytesPerSecond < 0:
		return fmt.Errorf("catchup: limits: BytesPerSecond = %d: want 0 (no cap) or more", l.BytesPerSecond)
	case l.BytesPerSecond > 0 && l.BytesPerSecond < 4096:
		return fmt.Errorf("catchup: limits: BytesPerSecond = %d: want 0 (no cap) or at least 4096", l.BytesPerSecond)
	case l.MaxTransfers < 0:
		return fmt.Errorf("catchup: limits: MaxTransfers = %d: want 0 (no cap) or more", l.MaxTransfers)
	case l.QueueWait < 0:
		return fmt.Errorf("catchup: limits: QueueWait = %v: want 0 or more", l.QueueWait)
	case l.IdleTimeout < 0:
		return fmt.Errorf("catchup: limits: IdleTimeout = %v: want 0 (default %v) or more", l.IdleTimeout, DefaultIdleTimeout)
	}
	return nil
}

// Throttle applies one broker's Limits to every transfer that shares it: a
// token bucket for bytes per second and a semaphore for concurrent
// transfers. A broker gives the same Throttle to its Server and its Client
// when the limits cover both directions, or one each. SetRate changes the
// byte rate while transfers run. Safe for concurrent use. A nil *Throttle
// applies no limit and the default idle timeout.
type Throttle struct {
	limits Limits // BytesPerSecond is rate's value at NewThrottle
	// bucket is the token bucket, consulted only while rate > 0. It never
	// holds rate.Inf: a limiter moved from Inf back to a finite limit
	// within one clock reading would compute 0×Inf tokens (NaN) and stop
	// limiting.
	bucket *rate.Limiter
	rate   atomic.Int64 // bytes per second; 0: no cap
	chunk  atomic.Int64 // chunkFor(rate)
	moved  atomic.Int64 // bytes moved by the transfers through t
	// fetchSlots and serveSlots are the receiving and sending transfers'
	// semaphores; nil: no cap.
	fetchSlots, serveSlots chan struct{}
	setMu                  sync.Mutex // orders SetRate calls
}

// NewThrottle returns a Throttle for l, or l's validation error.
func NewThrottle(l Limits) (*Throttle, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	t := &Throttle{limits: l, bucket: rate.NewLimiter(rate.Limit(maxChunk), maxChunk)}
	t.chunk.Store(maxChunk)
	if l.BytesPerSecond > 0 {
		t.setRate(l.BytesPerSecond)
	}
	if l.MaxTransfers > 0 {
		t.fetchSlots = make(chan struct{}, l.MaxTransfers)
		t.serveSlots = make(chan struct{}, l.MaxTransfers)
	}
	return t, nil
}

// chunkFor is the chunk under a cap of bps bytes per second: at most an
// eighth of a second's worth keeps the flow smooth at low rates; the
// token bucket's burst is one chunk.
func chunkFor(bps int64) int64 {
	if bps == 0 {
		return maxChunk
	}
	return min(int64(maxChunk), max(4096, bps/8))
}

// SetRate changes the bytes per second all transfers through t may move
// together, from their next chunk on; 0 removes the cap. bps must be 0 or
// at least 4096 (as Limits.BytesPerSecond); anything else is refused with
// an error naming it and changes nothing. A transfer waiting for tokens
// when the rate changes waits out what it reserved (at most one chunk at
// the old rate) first. SetRate on a nil *Throttle is refused.
func (t *Throttle) SetRate(bps int64) error {
	if t == nil {
		return fmt.Errorf("catchup: SetRate(%d) on a nil Throttle", bps)
	}
	if err := (Limits{BytesPerSecond: bps}).Validate(); err != nil {
		return fmt.Errorf("catchup: SetRate: %w", err)
	}
	t.setMu.Lock()
	defer t.setMu.Unlock()
	t.setRate(bps)
	return nil
}

// setRate applies a valid bps; the caller orders the calls.
func (t *Throttle) setRate(bps int64) {
	c := chunkFor(bps)
	if bps > 0 {
		// The bucket first: a transfer that sees rate > 0 finds it set.
		t.bucket.SetLimit(rate.Limit(bps))
		t.bucket.SetBurst(int(c))
	}
	t.chunk.Store(c)
	t.rate.Store(bps)
}

// Rate returns the bytes per second t applies now; 0: no cap.
func (t *Throttle) Rate() int64 {
	if t == nil {
		return 0
	}
	return t.rate.Load()
}

// Moved returns the bytes the transfers through t have moved since it was
// made (a counter that only grows: a caller reads its rate of change).
func (t *Throttle) Moved() int64 {
	if t == nil {
		return 0
	}
	return t.moved.Load()
}

// add counts n bytes moved.
func (t *Throttle) add(n int) {
	if t != nil && n > 0 {
		t.moved.Add(int64(n))
	}
}

// Limits returns the limits t applies, BytesPerSecond as it is now.
func (t *Throttle) Limits() Limits {
	if t == nil {
		return Limits{}
	}
	l := t.limits
	l.BytesPerSecond = t.rate.Load()
	return l
}

// atPriority runs a transfer's work (a Fetch's receive and commit, a
// Server's send) and returns when it is done: on a background thread
// with Limits.Background (inBackground), else on the caller's.
func (t *Throttle) atPriority(run func()) {
	if t != nil && t.limits.Background {
		inBackground(run)
		return
	}
	run()
}

func (t *Throttle) idle() time.Duration {
	if t == nil || t.limits.IdleTimeout == 0 {
		return DefaultIdleTimeout
	}
	return t.limits.IdleTimeout
}

func (t *Throttle) chunkSize() int {
	if t == nil {
		return maxChunk
	}
	return int(t.chunk.Load())
}

// spliceChunkSize is the zero-copy target's chunk: spliceChunk without a
// byte cap, else the throttle's.
func (t *Throttle) spliceChunkSize() int {
	if t == nil || t.rate.Load() == 0 {
		return spliceChunk
	}
	return int(t.chunk.Load())
}

// acquireFetch takes a receiving transfer's slot, acquireServe a sending
// one's, each waiting up to QueueWait. The error wraps ErrBusy (or the
// context's error).
func (t *Throttle) acquireFetch(ctx context.Context) (release func(), err error) {
	if t == nil {
		return func() {}, nil
	}
	return t.take(ctx, t.fetchSlots)
}

func (t *Throttle) acquireServe(ctx context.Context) (release func(), err error) {
	if t == nil {
		return func() {}, nil
	}
	return t.take(ctx, t.serveSlots)
}

// take takes a slot of slots (nil: no cap), waiting up to QueueWait.
func (t *Throttle) take(ctx context.Context, slots chan struct{}) (release func(), err error) {
	if slots == nil {
		return func() {}, nil
	}
	release = func() { <-slots }
	select {
	case slots <- struct{}{}:
		return release, nil
	default:
	}
	if t.limits.QueueWait == 0 {
		return nil, fmt.Errorf("%w: %d of %d running", ErrBusy, len(slots), cap(slots))
	}
	timer := time.NewTimer(t.limits.QueueWait)
	defer timer.Stop()
	select {
	case slots <- struct{}{}:
		return release, nil
	case <-timer.C:
		return nil, fmt.Errorf("%w: %d of %d running, no slot freed in %v", ErrBusy, len(slots), cap(slots), t.limits.QueueWait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// wait takes n bytes' worth of tokens, at most one burst at a time: a
// chunk sized before SetRate lowered the rate may exceed the new burst.
func (t *Throttle) wait(ctx context.Context, n int) error {
	if t == nil {
		return nil
	}
	for n > 0 && t.rate.Load() > 0 {
		c := min(n, t.bucket.Burst())
		if err := t.bucket.WaitN(ctx, c); err != nil {
			if ctx.Err() == nil && c > t.bucket.Burst() {
				continue // SetRate lowered the burst between the two reads
			}
			return err
		}
		n -= c
	}
	return nil
}
