package demo

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
)

func lostPass(lost ...meta.SegmentID) *plugin.PassRecord {
	p := &plugin.PassRecord{}
	for _, id := range lost {
		p.Report.Lost = append(p.Report.Lost, heal.LostSegment{Segment: id, Reason: heal.NoIntactSource})
	}
	return p
}

// The lost stage's accounting: a segment counts from its first report; a
// pass after it that does not report it is a miss; every pass judged
// counts once.
func TestPassTallyCountsEveryPass(t *testing.T) {
	tl := newPassTally([]meta.SegmentID{"x", "y"}, lostReported, nil)
	for _, p := range []*plugin.PassRecord{
		lostPass(),         // neither reported yet: no miss
		lostPass("x"),      // x detected
		lostPass("x", "y"), // y detected
		lostPass("y"),      // x missed
		lostPass("x", "y"),
	} {
		tl.observe(p)
	}
	if tl.Observed != 5 {
		t.Errorf("observed %d, want 5", tl.Observed)
	}
	if tl.Hits["x"] != 3 || tl.Misses["x"] != 1 || tl.FirstPass["x"] != 2 {
		t.Errorf("x: hits %d misses %d first %d, want 3 1 2", tl.Hits["x"], tl.Misses["x"], tl.FirstPass["x"])
	}
	if tl.Hits["y"] != 3 || tl.Misses["y"] != 0 || tl.FirstPass["y"] != 3 {
		t.Errorf("y: hits %d misses %d first %d, want 3 0 3", tl.Hits["y"], tl.Misses["y"], tl.FirstPass["y"])
	}
	if !tl.detected() || tl.minHits() != 3 || tl.misses() != 1 {
		t.Errorf("detected %v minHits %d misses %d", tl.detected(), tl.minHits(), tl.misses())
	}
}

func TestPassTallyUndetected(t *testing.T) {
	tl := newPassTally([]meta.SegmentID{"x"}, func(r *heal.Report, id meta.SegmentID) bool { return r.FailedReason(id) == heal.NoSpareBroker }, nil)
	tl.observe(&plugin.PassRecord{Report: heal.Report{Failed: []heal.Failure{{Segment: "x", Reason: heal.BackfillFailed}}}})
	if tl.detected() || tl.minHits() != 0 || tl.misses() != 0 {
		t.Errorf("a failure for another reason counted: %+v", tl)
	}
	end := time.Unix(100, 0)
	tl.observe(&plugin.PassRecord{Ended: end, Report: heal.Report{Failed: []heal.Failure{{Segment: "x", Reason: heal.NoSpareBroker}}}})
	if !tl.detected() || tl.Hits["x"] != 1 || !tl.FirstAt["x"].Equal(end) {
		t.Errorf("no_spare_broker not counted, or not at the end of its pass: %+v", tl)
	}
}

func TestLostReported(t *testing.T) {
	for _, tc := range []struct {
		r    heal.Report
		want bool
	}{
		{heal.Report{Lost: []heal.LostSegment{{Segment: "x"}}}, true},
		{heal.Report{Failed: []heal.Failure{{Segment: "x", Reason: heal.NoIntactSource}}}, true},
		{heal.Report{Failed: []heal.Failure{{Segment: "x", Reason: heal.AllReplicasDead}}}, true},
		{heal.Report{Failed: []heal.Failure{{Segment: "x", Reason: heal.BackfillFailed}}}, false},
		{heal.Report{Lost: []heal.LostSegment{{Segment: "y"}}}, false},
	} {
		if got := lostReported(&tc.r, "x"); got != tc.want {
			t.Errorf("lostReported(%+v) = %v, want %v", tc.r, got, tc.want)
		}
	}
}

func TestDecodePassStatus(t *testing.T) {
	raw := json.RawMessage(`{"broker":2,"enabled":true,"passes":7,"hold":"brokers_missing: 2 of 5 within 1s",
		"last_pass":{"index":40,"under_replicated":0,"dead":[3],"failed":[{"segment":"x","reason":"no_intact_source"}],
		"lost":[{"segment":"x","byte_size":10,"replicas":[1,3],"reason":"no_intact_source","acknowledged":true}],
		"hold_reason":"brokers_missing: 2 of 5 within 1s","hold_released":true}}`)
	p, ok := decodePassStatus(raw)
	if !ok {
		t.Fatal("not decoded")
	}
	if p.Leader != 2 || p.Passes != 7 || !p.HoldReleased || p.Hold == "" || len(p.Dead) != 1 {
		t.Errorf("decoded %+v", p)
	}
	if r, _, _, ok := admin.LastPass(raw); !ok || !r.HoldReleased || len(r.Lost) != 1 || !r.Lost[0].Acknowledged || r.Lost[0].Reason != heal.NoIntactSource {
		t.Errorf("admin.LastPass: hold_released or lost not seen: %+v", r)
	}
	if _, ok := decodePassStatus(json.RawMessage(`{"heal":"disabled"}`)); ok {
		t.Error("a disabled plugin decoded as a pass")
	}
}

// Segments the lost stage destroyed and reported as required are set
// apart: listed, not failed, not lost, and the run is OK; when the stage
// did not hold they are not set apart.
func TestReportDestroyedSetApart(t *testing.T) {
	lost := healedStage("lost", 1.5, 0)
	lost.Destroyed = []destroyedSegment{
		{Segment: "x", How: "every copy's file deleted", Copies: 3, PassesReported: 12, Acknowledged: true},
		{Segment: "y", How: "every copy damaged in place (bitflip)", Copies: 3, PassesReported: 11, Acknowledged: true, FilesKept: 3},
	}
	r := &Report{Segments: 10, Faults: []FaultReport{healedStage("pause", 2, 100), lost}}
	r.Summary.CopiesVerified, r.Summary.CopiesVerifiedAtEnd = 40, 24
	if got := r.destroyedIDs(); len(got) != 2 || got[0] != "x" || got[1] != "y" {
		t.Fatalf("destroyedIDs = %v", got)
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
	r = &Report{Segments: 10, Faults: []FaultReport{lost}}
	if got := r.destroyedIDs(); len(got) != 0 {
		t.Fatalf("destroyedIDs of a failed lost stage = %v", got)
	}
	r.finish(harness.Evaluation{Sealed: 10, Healthy: 8, Damaged: 2, DataLoss: 2, Unhealthy: map[meta.SegmentID]string{"x": "missing", "y": "audit"}}, 2, nil)
	if r.OK || r.DataLossSegments != 2 || r.Summary.SegmentsLost != 2 || r.Summary.FaultsSurvived != 0 {
		t.Errorf("a lost stage that failed: ok %v loss %d summary %+v", r.OK, r.DataLossSegments, r.Summary)
	}
}
