//go:build linux

package probe

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
)

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// The prober never opens a file: /proc/self/fd, sampled continuously while
// 10,000 probes run, never holds more entries than before the batch (the
// sampler's own directory descriptor is counted each time).
func TestProbeOpensNoFile(t *testing.T) {
	dir := t.TempDir()
	paths := make([]string, 10000)
	for i := range paths {
		paths[i] = filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(paths[i], nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	engines(t, func(t *testing.T, p *Prober) {
		out := make([]Result, len(paths))
		before := countFDs(t)
		var stop atomic.Bool
		maxSeen := make(chan int)
		go func() {
			m := 0
			for !stop.Load() {
				m = max(m, countFDs(t))
			}
			maxSeen <- m
		}()
		for range 5 {
			if err := p.Probe(context.Background(), paths, out); err != nil {
				t.Fatal(err)
			}
		}
		stop.Store(true)
		during := <-maxSeen
		after := countFDs(t)
		for i, r := range out {
			if r.Err != nil {
				t.Fatalf("%s: %v", paths[i], r.Err)
			}
		}
		if during > before || after != before {
			t.Fatalf("/proc/self/fd: %d entries before, up to %d during, %d after 50,000 probes", before, during, after)
		}
		t.Logf("/proc/self/fd: %d before, max %d during, %d after", before, during, after)
	})
}
