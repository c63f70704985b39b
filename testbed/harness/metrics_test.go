package harness

import (
	"bufio"
	"strings"
	"testing"
)

func TestParseSample(t *testing.T) {
	text := `# HELP malachi_heal_backfill_bytes_total Bytes.
# TYPE malachi_heal_backfill_bytes_total counter
malachi_heal_backfill_bytes_total_extra 9
malachi_heal_failed_segments{reason="x"} 3
malachi_heal_backfill_bytes_total 1.048576e+06
`
	sc := newScanner(text)
	v, err := parseSample(sc, BackfillMetric)
	if err != nil || v != 1048576 {
		t.Fatalf("%v, %v", v, err)
	}
	if _, err := parseSample(newScanner("other 1\n"), BackfillMetric); err == nil || !strings.Contains(err.Error(), "not exposed") {
		t.Fatalf("missing metric: %v", err)
	}
}

func newScanner(s string) *bufio.Scanner { return bufio.NewScanner(strings.NewReader(s)) }
