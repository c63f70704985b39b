package hclogzero

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/rs/zerolog"
)

// keys returns the keys of one JSON line in order, repeats included.
func keys(t *testing.T, line string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if _, err := dec.Token(); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	var out []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, k.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
	}
	return out
}

// Raft logs hclog.Fmt values and keys that the host sets itself: a line
// carries each key once and the formatted value, not ["%+v", …].
func TestFieldsOnceAndFmtFormatted(t *testing.T) {
	var buf bytes.Buffer
	host := zerolog.New(&buf).With().Uint32("broker", 1).Logger()
	l := New(host, "raft").Named("net").With("peer", "2")
	l.Info("initial configuration", "servers", hclog.Fmt("%+v", []int{1, 2}), "broker", "3", "component", "x", "err", errors.New("boom"))
	line := strings.TrimSpace(buf.String())
	seen := map[string]bool{}
	for _, k := range keys(t, line) {
		if seen[k] {
			t.Errorf("key %q twice in %s", k, line)
		}
		seen[k] = true
	}
	for _, want := range []string{`"servers":"[1 2]"`, `"component":"raft.net"`, `"broker":1`, `"broker_":"3"`, `"peer":"2"`, `"err":"boom"`} {
		if !strings.Contains(line, want) {
			t.Errorf("line %s lacks %s", line, want)
		}
	}
}
