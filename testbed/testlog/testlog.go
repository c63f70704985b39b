package testlog

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects what is written to it. The zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // protected by mu
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the non-empty lines written so far that contain sub (all
// of them when sub is "").
func (b *Buffer) Lines(sub string) []string {
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if l != "" && strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}
