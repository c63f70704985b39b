package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestLatencyP99(t *testing.T) {
	var l Latency
	t0 := time.Unix(1000, 0)
	if _, ok := l.P99(time.Time{}); ok {
		t.Fatal("p99 of no request")
	}
	for i := 1; i <= 200; i++ { // 1 ms .. 200 ms, ending at t0+i s
		l.Observe(t0.Add(time.Duration(i)*time.Second), time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		since time.Time
		want  time.Duration
		ok    bool
	}{
		{time.Time{}, 198 * time.Millisecond, true},               // rank ceil(0.99*200) = 198
		{t0.Add(100 * time.Second), 199 * time.Millisecond, true}, // 101..200: rank 99 of 100
		{t0.Add(199 * time.Second), 200 * time.Millisecond, true},
		{t0.Add(200 * time.Second), 0, false},
	} {
		got, ok := l.P99(c.since)
		if got != c.want || ok != c.ok {
			t.Errorf("P99(since %v) = %v, %v; want %v, %v", c.since.Sub(t0), got, ok, c.want, c.ok)
		}
	}
}

// The ring keeps the latest latencyRing requests: an old slow one drops out.
func TestLatencyKeepsTheLatest(t *testing.T) {
	var l Latency
	t0 := time.Unix(1000, 0)
	l.Observe(t0, time.Hour)
	for i := 1; i <= latencyRing; i++ {
		l.Observe(t0.Add(time.Duration(i)), time.Millisecond)
	}
	if got, _ := l.P99(time.Time{}); got != time.Millisecond {
		t.Fatalf("p99 %v: the overwritten hour-long request still counts", got)
	}
}

// A request weighs its records: one slow produce of 100 records among 99
// fast ones of one record each is more than 1% of what the clients wait
// on, so it is the p99; counted once, it would not be.
func TestLatencyWeighsRecords(t *testing.T) {
	var l Latency
	t0 := time.Unix(1000, 0)
	for i := 1; i <= 99; i++ {
		l.Observe(t0.Add(time.Duration(i)), time.Millisecond)
	}
	l.ObserveN(t0.Add(100), time.Second, 100)
	if got, _ := l.P99(time.Time{}); got != time.Second {
		t.Fatalf("p99 %v, want the 100-record request's 1s", got)
	}
	var one Latency
	for i := 1; i <= 99; i++ {
		one.Observe(t0.Add(time.Duration(i)), time.Millisecond)
	}
	one.ObserveN(t0.Add(100), time.Second, 0) // below 1 counts as 1
	if got, _ := one.P99(time.Time{}); got != time.Millisecond {
		t.Fatalf("p99 %v with the slow request weighing one: want 1ms (rank 99 of 100)", got)
	}
}

// testClock is a clock the test moves by hand; the server's first reading
// of it is reported on first.
type testClock struct {
	mu    sync.Mutex
	now   time.Time
	reads int
	first chan struct{}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reads++; c.reads == 1 {
		close(c.first)
	}
	return c.now
}

// AfterFunc never runs f: these tests serve no consumer group, whose
// timeouts are the only timers the listener sets.
func (c *testClock) AfterFunc(time.Duration, func()) func() bool { return func() bool { return true } }

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A Produce counts from its size prefix to its response written: a body
// that arrives slowly is time the producer waits, and the request weighs
// its records. The clock is the test's: it reads t0 until the server has
// read it once (on the size prefix) and t0+late after, and the body is
// sent only after the move, so a Produce timed from its first byte takes
// exactly late and one timed from its last byte would take 0.
func TestLatencyProduceFromFirstByte(t *testing.T) {
	tc := newTestCluster(t)
	clock := &testClock{now: time.Unix(1000, 0), first: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.Latency = new(Latency)
	cfg.Clock = clock
	addr := startServer(t, tc, cfg)
	if err := tc.CreateTopic(context.Background(), "slow", 1); err != nil {
		t.Fatal(err)
	}
	req := produceRequest("slow", 0, makeBatch(-1, -1, -1, "a", "b", "c"))
	if got := produceRecords(req); got != 3 {
		t.Fatalf("produceRecords = %d, want the batch's 3", got)
	}
	rc := dialRaw(t, addr)
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, 1)
	const late = 5 * time.Second
	if _, err := rc.c.Write(frame[:16]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-clock.first: // the server read the size prefix and the clock
	case <-time.After(time.Minute): // a bound on a hang, not a measurement
		t.Fatal("the server has not read its clock on a request's size prefix: does it time the Produce from its last byte?")
	}
	clock.advance(late)
	if _, err := rc.c.Write(frame[16:]); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(req.GetVersion())
	if err := rc.recv(resp, 1); err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	// The server records a Produce's latency once its response is written,
	// which may be after the response arrived here; it reads the next
	// request on the connection only after that. The answer to one more
	// request (one the latency does not count) is the event to wait on.
	rc.corr = 1
	rc.do(kmsg.NewPtrApiVersionsRequest())
	if got, ok := cfg.Latency.P99(time.Time{}); !ok || got != late {
		t.Fatalf("p99 %v (%v): want the %v from the size prefix to the response (0 would be timed from the last byte)", got, ok, late)
	}
	bad := produceRequest("slow", 0, []byte("not a batch"))
	if got := produceRecords(bad); got != 1 {
		t.Fatalf("produceRecords of an unparsable batch = %d, want 1", got)
	}
}
