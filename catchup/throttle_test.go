package catchup

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

// paceAt is the bytes per second the token bucket grants to a transfer
// taking n bytes beyond one burst at at, in chunks: measured on the
// bucket's own clock (reservations at a given time), not the wall's.
func paceAt(t *testing.T, th *Throttle, at time.Time, n int) float64 {
	t.Helper()
	burst := th.bucket.Burst()
	if !th.bucket.AllowN(at, burst) { // the bucket is full long after its last use
		t.Fatalf("a full burst of %d was refused at %v", burst, at)
	}
	var last time.Duration
	for left := n; left > 0; left -= burst {
		r := th.bucket.ReserveN(at, min(left, burst))
		if !r.OK() {
			t.Fatalf("reservation of %d refused", min(left, burst))
		}
		last = r.DelayFrom(at)
	}
	return float64(n) / last.Seconds()
}

// A Throttle made without a cap gets one from SetRate, changes it while in
// use, and loses it again with SetRate(0).
func TestThrottleSetRate(t *testing.T) {
	th, err := NewThrottle(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if th.Rate() != 0 || th.spliceChunkSize() != spliceChunk || th.wait(cancelled, 64<<20) != nil {
		t.Fatalf("uncapped throttle: rate %d, splice chunk %d, or its wait consulted the bucket", th.Rate(), th.spliceChunkSize())
	}
	at := time.Now().Add(time.Hour) // later than any use of the bucket below
	for _, c := range []struct {
		bps   int64
		chunk int
	}{{64 << 10, 8 << 10}, {16 << 20, maxChunk}, {1 << 20, 128 << 10}} {
		if err := th.SetRate(c.bps); err != nil {
			t.Fatal(err)
		}
		if th.Rate() != c.bps || th.Limits().BytesPerSecond != c.bps || th.chunkSize() != c.chunk || th.spliceChunkSize() != c.chunk {
			t.Fatalf("SetRate(%d): rate %d, limits %d, chunk %d, splice chunk %d; want chunk %d",
				c.bps, th.Rate(), th.Limits().BytesPerSecond, th.chunkSize(), th.spliceChunkSize(), c.chunk)
		}
		if float64(th.bucket.Limit()) != float64(c.bps) || th.bucket.Burst() != c.chunk {
			t.Fatalf("SetRate(%d): bucket limit %v burst %d", c.bps, th.bucket.Limit(), th.bucket.Burst())
		}
		if got := paceAt(t, th, at, 4<<20); math.Abs(got-float64(c.bps)) > float64(c.bps)/1000 {
			t.Fatalf("SetRate(%d): the bucket paces 4 MiB at %.0f B/s", c.bps, got)
		}
		if th.wait(cancelled, 1) == nil {
			t.Fatalf("SetRate(%d): wait did not consult the bucket", c.bps)
		}
		at = at.Add(time.Hour)
	}
	if err := th.SetRate(0); err != nil {
		t.Fatal(err)
	}
	if th.Rate() != 0 || th.chunkSize() != maxChunk || th.spliceChunkSize() != spliceChunk || th.wait(cancelled, 64<<20) != nil {
		t.Fatalf("SetRate(0): rate %d, chunk %d, splice chunk %d, or its wait consulted the bucket", th.Rate(), th.chunkSize(), th.spliceChunkSize())
	}
	for _, bad := range []int64{-1, 4095} {
		if err := th.SetRate(bad); err == nil || th.Rate() != 0 {
			t.Fatalf("SetRate(%d) = %v, rate now %d", bad, err, th.Rate())
		}
	}
	var none *Throttle
	if none.SetRate(1<<20) == nil {
		t.Fatal("SetRate on a nil Throttle accepted")
	}
}

// A chunk sized before SetRate lowered the burst is taken a burst at a
// time, not refused.
func TestThrottleWaitSplitsOldChunk(t *testing.T) {
	th, _ := NewThrottle(Limits{BytesPerSecond: 64 << 20})
	c := th.chunkSize()
	if err := th.SetRate(128 << 10); err != nil {
		t.Fatal(err)
	}
	if err := th.wait(context.Background(), 2*th.bucket.Burst()); err != nil || c <= th.bucket.Burst() {
		t.Fatalf("wait(%d) with burst %d: %v", 2*th.bucket.Burst(), th.bucket.Burst(), err)
	}
}

// A transfer started without a cap follows SetRate from its next chunk:
// its chunks shrink to the new rate's, and every byte is counted in Moved.
func TestThrottleSetRateDuringTransfer(t *testing.T) {
	fx := newFixture(t, 3<<20, DefaultLimits(), ModeDefault, ModeReadWrite)
	th, _ := NewThrottle(DefaultLimits())
	fx.cl.Throttle = th
	const slower = 4 << 20
	var mu sync.Mutex
	var steps []int64
	prev := int64(0)
	progress := func(done, _ int64) {
		mu.Lock()
		defer mu.Unlock()
		if done == 0 {
			return // the call at the start
		}
		steps = append(steps, done-prev)
		prev = done
		if len(steps) == 1 {
			if err := th.SetRate(slower); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, progress); err != nil {
		t.Fatal(err)
	}
	if len(steps) < 2 || steps[0] != maxChunk {
		t.Fatalf("steps %v: want a first chunk of %d", steps, maxChunk)
	}
	for _, s := range steps[1:] {
		if s > chunkFor(slower) {
			t.Fatalf("steps %v: a chunk after SetRate(%d) exceeds %d", steps, slower, chunkFor(slower))
		}
	}
	if th.Moved() != 3<<20 {
		t.Fatalf("Moved() = %d, want %d", th.Moved(), 3<<20)
	}
}

// SetRate from one goroutine while others take tokens: every wait ends
// without an error, whatever rate (or none) it meets. Run with -race.
func TestThrottleSetRateConcurrent(t *testing.T) {
	th, _ := NewThrottle(DefaultLimits())
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if err := th.wait(context.Background(), th.chunkSize()); err != nil {
					errs <- err
					return
				}
				th.add(th.chunkSize())
			}
		}()
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := th.SetRate([]int64{64 << 20, 0, 16 << 20, 8 << 20}[i%4]); err != nil {
				errs <- err
				return
			}
			_ = th.Limits()
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if th.Moved() == 0 {
		t.Fatal("nothing counted")
	}
}
