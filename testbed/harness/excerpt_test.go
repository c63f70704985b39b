package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSegmentsNamed(t *testing.T) {
	got := SegmentsNamed("s-00011 never reported lost; copy /d/b4/copies/91/s-00011.seg", "delete all of s-00007, nem-00140 and x-1",
		"1 segments unhealthy, e.g. k.demo-clients.00000.0000000002: copy on broker 1: latched",
		`lost: demo-clients/12@4043 key "kl-p001-000001981" acknowledged, read demo-clients/12@4043 key "kl-p000-000002259"`)
	if strings.Join(got, ",") != "s-00011,s-00007,nem-00140,k.demo-clients.00000.0000000002,k.demo-clients.00012." {
		t.Fatalf("SegmentsNamed = %v", got)
	}
}

func TestLogExcerpt(t *testing.T) {
	dir := t.TempDir()
	write := func(b, text string) {
		if err := os.MkdirAll(filepath.Join(dir, b), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, b, "malachid.log"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b1", `{"broker":1,"segment":"s-00011","time":"2026-12-06T20:27:51.500Z","message":"scrub found a corrupt copy"}
{"broker":1,"segment":"s-00003","time":"2026-12-06T20:27:51.600Z","message":"other"}
`)
	write("b2", `{"broker":2,"segment":"s-00011","time":"2026-12-06T20:27:51.009Z","message":"first"}
{"broker":2,"segment":"s-00011","time":"2026-12-06T20:27:52.000Z","message":"last"}
`)
	got := LogExcerpt(dir, []string{"s-00011"}, 10)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "first") || !strings.Contains(lines[1], `"broker":1`) || !strings.Contains(lines[2], "last") {
		t.Fatalf("excerpt not the three s-00011 lines in time order:\n%s", got)
	}
	if got := LogExcerpt(dir, []string{"s-00011"}, 1); !strings.HasPrefix(got, "(2 earlier lines left out)") || !strings.Contains(got, "last") {
		t.Fatalf("capped excerpt:\n%s", got)
	}
	if got := LogExcerpt(dir, nil, 10); got != "" {
		t.Fatalf("no segments: %q", got)
	}
}
