package kafka

import (
	"context"
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

// A Produce counts from its size prefix to its response written: a body
// that arrives slowly is time the producer waits, and the request weighs
// its records. Only a lower bound on time is asserted (a slow machine
// only makes it slower).
func TestLatencyProduceFromFirstByte(t *testing.T) {
	tc := newTestCluster(t)
	cfg := DefaultConfig()
	cfg.Latency = new(Latency)
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
	const pause = 300 * time.Millisecond
	if _, err := rc.c.Write(frame[:16]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause) // the body is late: the producer is waiting
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
	if got, ok := cfg.Latency.P99(time.Time{}); !ok || got < pause {
		t.Fatalf("p99 %v (%v): want at least the %v the body took to arrive", got, ok, pause)
	}
	bad := produceRequest("slow", 0, []byte("not a batch"))
	if got := produceRecords(bad); got != 1 {
		t.Fatalf("produceRecords of an unparsable batch = %d, want 1", got)
	}
}
