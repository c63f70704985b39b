package pebblelog

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// Pebble ends most messages with a newline: the record carries the line
// without it, tagged with the component and the store.
func TestMessageTrimmedAndTagged(t *testing.T) {
	var buf bytes.Buffer
	New(zerolog.New(&buf), "scrub").Errorf("[JOB %d] compacted\n", 3)
	out := buf.String()
	for _, want := range []string{`"message":"[JOB 3] compacted"`, `"component":"pebble"`, `"pebble_store":"scrub"`, `"level":"error"`} {
		if !strings.Contains(out, want) {
			t.Errorf("record %s lacks %s", out, want)
		}
	}
}

// Fatalf runs the OnFatal hook with the message, logs and panics.
func TestFatalRunsHookThenPanics(t *testing.T) {
	var buf bytes.Buffer
	var got string
	l := New(zerolog.New(&buf), "confirm").OnFatal(func(msg string) { got = msg })
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("Fatalf returned")
		}
		if got != "MANIFEST write failed" || !strings.Contains(buf.String(), `"level":"fatal"`) {
			t.Errorf("hook saw %q, log %s", got, buf.String())
		}
	}()
	l.Fatalf("MANIFEST write failed\n")
}
