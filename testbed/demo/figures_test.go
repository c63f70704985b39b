package demo

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/testbed/stage"

	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/plugin"
)

// TestReportPrintsOneRereplicatedFigure: the text report gives one
// re-replicated figure, defined where it is printed; the demo's estimate
// from copy sizes, a different measure (765 MiB against 1.7 GiB here),
// stays in the JSON.
func TestReportPrintsOneRereplicatedFigure(t *testing.T) {
	r := &Report{Brokers: 5, ReplicationFactor: 3, Segments: 2}
	kill := healedStage("kill", 1, 765<<20)
	kill.BytesEstimated = 1740 << 20
	r.Faults = []stage.Report{kill}
	r.finish(harness.Evaluation{Sealed: 2, Healthy: 2}, 0, nil)
	var text bytes.Buffer
	r.writeText(&text)
	out := text.String()
	measured, estimated := bytesize.Format(765<<20), bytesize.Format(1740<<20)
	if strings.Contains(out, estimated) {
		t.Errorf("the text report prints the estimate %s beside the re-replicated %s:\n%s", estimated, measured, out)
	}
	if want := "re-replicated      " + measured + " (" + rereplicatedMeaning + ")"; !strings.Contains(out, want) {
		t.Errorf("text report lacks %q:\n%s", want, out)
	}
	doc, js := reportJSON(t, r)
	if doc["bytes_estimated"] != float64(1740<<20) {
		t.Errorf("bytes_estimated %v, want it kept in the JSON: %s", doc["bytes_estimated"], js)
	}
}

// TestDemoHelpStatesThePluginDefault: `malachi-demo -h` gives the settle
// batch default the plugin has (it said 64 when it was 512).
func TestDemoHelpStatesThePluginDefault(t *testing.T) {
	var out bytes.Buffer
	if _, err := ParseFlags([]string{"-h"}, &out); !errors.Is(err, ErrHelp) {
		t.Fatalf("-h: %v, want ErrHelp", err)
	}
	usage := out.String()
	i := strings.Index(usage, "-settle-batch")
	if i < 0 {
		t.Fatalf("no -settle-batch in:\n%s", usage)
	}
	line := usage[i:]
	if j := strings.Index(line, "\n  -"); j > 0 {
		line = line[:j]
	}
	if want := fmt.Sprintf("(default %d)", plugin.DefaultConfig().SettleBatch); !strings.Contains(line, want) {
		t.Errorf("-settle-batch usage %q lacks %q", line, want)
	}
	if strings.Contains(line, "64") {
		t.Errorf("-settle-batch usage %q still names 64", line)
	}
}
