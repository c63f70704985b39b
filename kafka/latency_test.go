package kafka

import (
	"testing"
	"time"
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
