package stage

import (
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
)

// The maintenance stage's judgement of one pass: a set changed (command,
// heal, move, floor) or the broker listed dead or suspect goes wrong; a
// pass after the stop that saw it absent counts in the window, and past
// the grace delay when it started that late.
func TestMaintenanceJudge(t *testing.T) {
	stop := time.Unix(1000, 0)
	lf := &Figures{}
	j := &maintenanceJudge{id: 4, stopAt: stop, grace: time.Second, lf: lf}
	absent := heal.Report{Maintenance: []heal.Maintenance{{Broker: 4}}}
	j.judge(&plugin.PassRecord{Seq: 1, Started: stop.Add(-time.Millisecond), Report: absent}) // before the stop
	j.judge(&plugin.PassRecord{Seq: 2, Started: stop.Add(200 * time.Millisecond), Report: absent})
	j.judge(&plugin.PassRecord{Seq: 3, Started: stop.Add(1500 * time.Millisecond), Report: absent})
	seen := heal.Report{Maintenance: []heal.Maintenance{{Broker: 4, Seen: true}}}
	j.judge(&plugin.PassRecord{Seq: 4, Started: stop.Add(2 * time.Second), Report: seen})
	if lf.PassesInWindow != 2 || lf.PassesPastGrace != 1 || lf.SetsChanged != 0 || j.why != "" {
		t.Fatalf("in window %d past grace %d changed %d why %q", lf.PassesInWindow, lf.PassesPastGrace, lf.SetsChanged, j.why)
	}
	for _, r := range []heal.Report{
		{Ready: []meta.SetSegmentReplicas{{ID: "a", Replicas: []meta.BrokerID{1, 2, 3}}}},
		{Healed: []meta.SegmentID{"a"}},
		{Moved: []meta.SegmentID{"a"}},
		{MaintenanceFloor: []heal.MaintenanceFloor{{Segment: "a", Broker: 4}}},
	} {
		j.why = ""
		j.judge(&plugin.PassRecord{Seq: 5, Broker: 1, Started: stop.Add(3 * time.Second), Report: r})
		if !strings.Contains(j.why, "changed the replica set of 1 segments (a)") {
			t.Errorf("%+v: why %q", r, j.why)
		}
	}
	if lf.SetsChanged != 4 {
		t.Errorf("sets changed %d, want 4", lf.SetsChanged)
	}
	j.why = ""
	j.judge(&plugin.PassRecord{Seq: 6, Broker: 1, Report: heal.Report{Suspect: []meta.BrokerID{4}}})
	if !strings.Contains(j.why, "dead or suspect") {
		t.Errorf("suspect not judged: %q", j.why)
	}
}

func TestCommandsBelow(t *testing.T) {
	r := heal.Report{Ready: []meta.SetSegmentReplicas{
		{ID: "a", Replicas: []meta.BrokerID{1, 2, 3}},
		{ID: "b", Replicas: []meta.BrokerID{1, 2}},
	}}
	if got := harness.CommandsBelow(&r, 3); len(got) != 1 || got[0] != "b" {
		t.Errorf("commandsBelow = %v, want [b]", got)
	}
	if got := harness.SetsChangedBy(&heal.Report{Ready: r.Ready, Healed: []meta.SegmentID{"a", "c"}}); len(got) != 3 {
		t.Errorf("setsChangedBy = %v, want a, b, c once each", got)
	}
}
