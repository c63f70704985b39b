package ratelog

import (
	"testing"
	"time"
)

func TestAllowOncePerInterval(t *testing.T) {
	var l Limiter
	t0 := time.Unix(1000, 0)
	if ok, _ := l.Allow("a", t0); !ok {
		t.Fatal("first line of a refused")
	}
	for i := range 5 {
		if ok, _ := l.Allow("a", t0.Add(time.Duration(i+1)*time.Second)); ok {
			t.Fatal("a second line of a within the minute")
		}
	}
	if ok, _ := l.Allow("b", t0.Add(time.Second)); !ok {
		t.Fatal("another key is held by a's line")
	}
	ok, n := l.Allow("a", t0.Add(time.Minute))
	if !ok || n != 5 {
		t.Fatalf("after the interval: ok %v suppressed %d, want true 5", ok, n)
	}
}

func TestMemoryBounded(t *testing.T) {
	var l Limiter
	t0 := time.Unix(1000, 0)
	for i := range 10000 {
		l.Allow(string(rune(i)), t0.Add(time.Duration(i)*time.Minute))
	}
	if len(l.keys) > 4097 {
		t.Fatalf("%d keys kept", len(l.keys))
	}
}
