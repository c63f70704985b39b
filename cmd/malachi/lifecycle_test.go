package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
)

// TestWriteLifecycle: status prints a decommission's progress (left,
// rate, ETA, blocked reasons), a drained broker as one that can be
// stopped, and maintenance windows, from the heal report.
func TestWriteLifecycle(t *testing.T) {
	now := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	rep := heal.Report{Index: 9, UnderReplicated: 0,
		Decommission: []heal.Drain{
			{Broker: 2, Up: true, Segments: 12, Bytes: 12 << 20, Moving: 4, Rate: 1 << 20, ETA: 12 * time.Second,
				Blocked:  map[string]int{heal.DrainNoSpareBroker: 3, heal.DrainRackConstraint: 1},
				Examples: []heal.BlockedSegment{{Segment: "s1", Reason: heal.DrainNoSpareBroker}}},
			{Broker: 5, Drained: true},
		},
		Maintenance:      []heal.Maintenance{{Broker: 3, Until: now.Add(30 * time.Minute)}},
		MaintenanceFloor: []heal.MaintenanceFloor{{Segment: "s9", Broker: 3, Reason: "one_healthy_copy"}},
	}
	doc, err := json.Marshal(map[string]any{"enabled": true, "broker": 1, "last_pass": rep})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	writeLifecycle(&out, doc, now)
	got := out.String()
	for _, want := range []string{
		"decommission broker 2: 12 segments (12.0 MiB) left, 4 moving this pass, 1.0 MiB/s, ETA 12s",
		"blocked this pass: no_spare_broker 3, rack_constraint 1 (e.g. s1 no_spare_broker)",
		"decommission broker 5: drained: no replica set names it; it can be stopped",
		"maintenance broker 3: until 2026-12-03T16:30:00Z (30m0s left), not answering; its absence is not a failure",
		"healed in spite of maintenance: s9 (its copy on broker 3: one_healthy_copy)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	writeLifecycle(&out, json.RawMessage(`{"heal":"disabled"}`), now)
	if out.Len() != 0 {
		t.Fatalf("disabled heal printed %q", out.String())
	}
}

func TestLifecycleCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"decommission", "--help"}, 0, "usage: malachi decommission ID"},
		{[]string{"maintenance", "3", "-h"}, 0, "usage: malachi maintenance ID"},
		{[]string{"decommission", "--admin", "127.0.0.1:1"}, 2, "no broker id"},
		{[]string{"decommission", "0", "--admin", "127.0.0.1:1"}, 2, "broker id"},
		{[]string{"maintenance", "3", "--admin", "127.0.0.1:1"}, 2, "exactly one of --for DURATION and --end"},
		{[]string{"maintenance", "3", "--for", "1m", "--end", "--admin", "127.0.0.1:1"}, 2, "exactly one of"},
		{[]string{"decommission", "3", "4", "--admin", "127.0.0.1:1"}, 2, `unexpected argument "4"`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
			t.Errorf("malachi %v: exit %d, want %d with %q; output:\n%s%s", tc.args, code, tc.code, tc.want, stdout.String(), stderr.String())
		}
	}
}
