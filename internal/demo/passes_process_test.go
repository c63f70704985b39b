package demo

import (
	"bytes"
	"encoding/json"
	"github.com/malachi-log/malachi/internal/admin"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/meta"
)

func lostPass(leader meta.BrokerID, n uint64, lost ...meta.SegmentID) passStatus {
	p := passStatus{Leader: leader, Passes: n}
	for _, id := range lost {
		p.Lost = append(p.Lost, admin.LostEntry{Segment: id, Reason: "no_intact_source"})
	}
	return p
}

// The lost stage's accounting: a segment counts from its first report;
// a poll of a pass already seen counts nothing; a jump of the pass counter
// is unseen passes, never hits; a pass after the first report that does not
// report it is a miss; a new leader's counter starts over.
func TestPassTallyCountsEveryPass(t *testing.T) {
	tl := newPassTally([]meta.SegmentID{"x", "y"}, lostReported)
	steps := []struct {
		p   passStatus
		new bool
	}{
		{lostPass(1, 10), true},           // neither reported yet: no miss
		{lostPass(1, 11, "x"), true},      // x detected
		{lostPass(1, 11, "x"), false},     // same pass polled again
		{lostPass(1, 10), false},          // an older answer
		{lostPass(1, 14, "x", "y"), true}, // passes 12, 13 unseen; y detected
		{lostPass(1, 15, "y"), true},      // x missed
		{lostPass(2, 1, "x", "y"), true},  // new leader: a new pass
	}
	for i, s := range steps {
		if got := tl.observe(s.p); got != s.new {
			t.Fatalf("step %d: observe = %v, want %v", i, got, s.new)
		}
	}
	if tl.Observed != 5 || tl.Unseen != 2 {
		t.Errorf("observed %d unseen %d, want 5 and 2", tl.Observed, tl.Unseen)
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
	tl := newPassTally([]meta.SegmentID{"x"}, func(p passStatus, id meta.SegmentID) bool { return p.failedReason(id) == nospareReason })
	tl.observe(passStatus{Leader: 1, Passes: 1, Failed: []admin.HealFailure{{Segment: "x", Reason: "backfill_failed"}}})
	if tl.detected() || tl.minHits() != 0 || tl.misses() != 0 {
		t.Errorf("a failure for another reason counted: %+v", tl)
	}
	tl.observe(passStatus{Leader: 1, Passes: 2, Failed: []admin.HealFailure{{Segment: "x", Reason: nospareReason}}})
	if !tl.detected() || tl.Hits["x"] != 1 {
		t.Errorf("no_spare_broker not counted: %+v", tl)
	}
}

func TestLostReported(t *testing.T) {
	for _, tc := range []struct {
		p    passStatus
		want bool
	}{
		{passStatus{Lost: []admin.LostEntry{{Segment: "x"}}}, true},
		{passStatus{Failed: []admin.HealFailure{{Segment: "x", Reason: "no_intact_source"}}}, true},
		{passStatus{Failed: []admin.HealFailure{{Segment: "x", Reason: "all_replicas_dead"}}}, true},
		{passStatus{Failed: []admin.HealFailure{{Segment: "x", Reason: "backfill_failed"}}}, false},
		{passStatus{Lost: []admin.LostEntry{{Segment: "y"}}}, false},
	} {
		if got := lostReported(tc.p, "x"); got != tc.want {
			t.Errorf("lostReported(%+v) = %v, want %v", tc.p, got, tc.want)
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
	l, lost := p.lost("x")
	if p.Leader != 2 || p.Passes != 7 || p.Index != 40 || !lost || !l.Acknowledged || p.failedReason("x") != "no_intact_source" || !p.HoldReleased || p.Hold == "" || len(p.Dead) != 1 {
		t.Errorf("decoded %+v", p)
	}
	if r, ok := admin.FindReport(raw); !ok || !r.HoldReleased || len(r.Lost) != 1 {
		t.Errorf("admin.FindReport: hold_released or lost not seen: %+v", r)
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
	r.finish(evaluation{Sealed: 8, Healthy: 8, Unhealthy: map[meta.SegmentID]string{}}, 0, nil)
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
	r.finish(evaluation{Sealed: 10, Healthy: 8, Damaged: 2, DataLoss: 2, Unhealthy: map[meta.SegmentID]string{"x": "missing", "y": "audit"}}, 2, nil)
	if r.OK || r.DataLossSegments != 2 || r.Summary.SegmentsLost != 2 || r.Summary.FaultsSurvived != 0 {
		t.Errorf("a lost stage that failed: ok %v loss %d summary %+v", r.OK, r.DataLossSegments, r.Summary)
	}
}
