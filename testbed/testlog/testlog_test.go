package testlog

import (
	"fmt"
	"sync"
	"testing"
)

func TestConcurrentWritersAndLines(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				fmt.Fprintf(&b, "writer %d line %d\n", i, j)
			}
		}()
	}
	wg.Wait()
	if n := len(b.Lines("")); n != 800 {
		t.Fatalf("%d lines, want 800", n)
	}
	if n := len(b.Lines("writer 3 ")); n != 100 {
		t.Fatalf("%d lines of writer 3, want 100", n)
	}
}
