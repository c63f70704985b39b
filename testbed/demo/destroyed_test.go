package demo

import (
	"bytes"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/testbed/stage"

	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/meta"
)

// Segments the lost stage destroyed and reported as required are set
// apart: listed, not failed, not lost, and the run is OK; when the stage
// did not hold they are not set apart.
func TestReportDestroyedSetApart(t *testing.T) {
	lost := healedStage("lost", 1.5, 0)
	lost.Destroyed = []stage.Destroyed{
		{Segment: "x", How: "every copy's file deleted", Copies: 3, PassesReported: 12, Acknowledged: true},
		{Segment: "y", How: "every copy damaged in place (bitflip)", Copies: 3, PassesReported: 11, Acknowledged: true, FilesKept: 3},
	}
	r := &Report{Segments: 10, Faults: []stage.Report{healedStage("pause", 2, 100), lost}}
	r.Summary.CopiesVerified, r.Summary.CopiesVerifiedAtEnd = 40, 24
	if got := r.heldDestroyed(); len(got) != 2 || got[0].Segment != "x" || got[1].Segment != "y" {
		t.Fatalf("heldDestroyed = %v", got)
	}
	// The caller evaluated the 8 others.
	r.finish(harness.Evaluation{Sealed: 8, Healthy: 8, Unhealthy: map[meta.SegmentID]string{}}, 0, nil)
	if !r.OK || r.DataLossSegments != 0 || r.Failed != 0 || len(r.Destroyed) != 2 {
		t.Fatalf("ok %v loss %d failed %d destroyed %v", r.OK, r.DataLossSegments, r.Failed, r.Destroyed)
	}
	s := r.Summary
	if s.FaultsInjected != 2 || s.FaultsSurvived != 2 || s.SegmentsChecked != 10 || s.SegmentsHealthy != 8 ||
		s.SegmentsDestroyed != 2 || s.SegmentsLost != 0 || s.CopiesVerified != 40 || s.CopiesVerifiedAtEnd != 24 || s.BytesRereplicated != 100 {
		t.Errorf("summary %+v", s)
	}
	if len(s.SecondsToHeal) != 2 || s.SecondsToHeal[0].Stage != "pause" || *s.SecondsToHeal[0].Seconds != 2 {
		t.Errorf("seconds_to_heal %+v", s.SecondsToHeal)
	}
	doc, js := reportJSON(t, r)
	sm, _ := doc["summary"].(map[string]any)
	for _, k := range []string{"faults_injected", "faults_survived", "segments_checked", "copies_verified", "bytes_rereplicated", "seconds_to_heal", "segments_lost"} {
		if _, ok := sm[k]; !ok {
			t.Errorf("summary lacks %q: %s", k, js)
		}
	}
	var text bytes.Buffer
	r.writeText(&text)
	for _, want := range []string{"summary            faults injected 2, survived 2", "destroyed          x on purpose", "seconds to heal: pause 2.000s, lost 1.500s"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}

	// The stage did not hold (a miss): nothing is set apart, the loss counts.
	lost.Healed = false
	r = &Report{Segments: 10, Faults: []stage.Report{lost}}
	if got := r.heldDestroyed(); len(got) != 0 {
		t.Fatalf("heldDestroyed of a failed lost stage = %v", got)
	}
	r.finish(harness.Evaluation{Sealed: 10, Healthy: 8, Damaged: 2, DataLoss: 2, Unhealthy: map[meta.SegmentID]string{"x": "missing", "y": "audit"}}, 2, nil)
	if r.OK || r.DataLossSegments != 2 || r.Summary.SegmentsLost != 2 || r.Summary.FaultsSurvived != 0 {
		t.Errorf("a lost stage that failed: ok %v loss %d summary %+v", r.OK, r.DataLossSegments, r.Summary)
	}
}
