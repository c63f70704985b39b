package harness

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
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

func isLost(r *heal.Report, id meta.SegmentID) bool { return r.IsLost(id) }

// The lost stage's accounting: a segment counts from its first report; a
// pass after it that does not report it is a miss; every pass judged
// counts once.
func TestPassTallyCountsEveryPass(t *testing.T) {
	tl := NewPassTally([]meta.SegmentID{"x", "y"}, isLost, nil)
	for _, p := range []*plugin.PassRecord{
		lostPass(),         // neither reported yet: no miss
		lostPass("x"),      // x detected
		lostPass("x", "y"), // y detected
		lostPass("y"),      // x missed
		lostPass("x", "y"),
	} {
		tl.Observe(p)
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
	if !tl.Detected() || tl.MinHits() != 3 || tl.MissCount() != 1 {
		t.Errorf("detected %v minHits %d misses %d", tl.Detected(), tl.MinHits(), tl.MissCount())
	}
	if tl.Held(3) {
		t.Error("held with a miss")
	}
	if got := tl.Shortfall("lost", 4, time.Second); len(got) != 3 || got[0] != "x reported lost on only 3 passes within 1s" || got[1] != "x not reported lost on 1 passes after its first report" {
		t.Errorf("shortfall %q", got)
	}
}

func TestPassTallyUndetected(t *testing.T) {
	tl := NewPassTally([]meta.SegmentID{"x"}, func(r *heal.Report, id meta.SegmentID) bool { return r.FailedReason(id) == heal.NoSpareBroker }, nil)
	tl.Observe(&plugin.PassRecord{Report: heal.Report{Failed: []heal.Failure{{Segment: "x", Reason: heal.BackfillFailed}}}})
	if tl.Detected() || tl.MinHits() != 0 || tl.MissCount() != 0 {
		t.Errorf("a failure for another reason counted: %+v", tl)
	}
	end := time.Unix(100, 0)
	tl.Observe(&plugin.PassRecord{Ended: end, Report: heal.Report{Failed: []heal.Failure{{Segment: "x", Reason: heal.NoSpareBroker}}}})
	if !tl.Detected() || tl.Hits["x"] != 1 || !tl.FirstAt["x"].Equal(end) {
		t.Errorf("no_spare_broker not counted, or not at the end of its pass: %+v", tl)
	}
}

func TestDecodePassStatus(t *testing.T) {
	raw := json.RawMessage(`{"broker":2,"enabled":true,"passes":7,"hold":"brokers_missing: 2 of 5 within 1s",
		"last_pass":{"index":40,"under_replicated":0,"dead":[3],"failed":[{"segment":"x","reason":"no_intact_source"}],
		"lost":[{"segment":"x","byte_size":10,"replicas":[1,3],"reason":"no_intact_source","acknowledged":true}],
		"hold_reason":"brokers_missing: 2 of 5 within 1s","hold_released":true}}`)
	p, ok := DecodePassStatus(raw)
	if !ok {
		t.Fatal("not decoded")
	}
	if p.Leader != 2 || p.Passes != 7 || !p.HoldReleased || p.Hold == "" || len(p.Dead) != 1 {
		t.Errorf("decoded %+v", p)
	}
	if r, _, _, ok := admin.LastPass(raw); !ok || !r.HoldReleased || len(r.Lost) != 1 || !r.Lost[0].Acknowledged || r.Lost[0].Reason != heal.NoIntactSource {
		t.Errorf("admin.LastPass: hold_released or lost not seen: %+v", r)
	}
	if _, ok := DecodePassStatus(json.RawMessage(`{"heal":"disabled"}`)); ok {
		t.Error("a disabled plugin decoded as a pass")
	}
}
