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
