package demo

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/stage"

	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/kafkaload"
	"github.com/malachi-log/malachi/testbed/nemesis"

	"github.com/malachi-log/malachi/meta"
)

func healedStage(name string, secs float64, bytes int64) stage.Report {
	return stage.Report{Stage: name, Injected: true, Detected: true, Healed: true, SecondsToHeal: &secs, BytesRereplicated: bytes, BytesEstimated: bytes}
}

// reportJSON is r as written by writeJSON, decoded, and its text for
// failure messages.
func reportJSON(t *testing.T, r *Report) (map[string]any, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := r.writeJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	return doc, buf.String()
}

func TestReportJSONShape(t *testing.T) {
	r := &Report{Brokers: 5, ReplicationFactor: 3, Segments: 2}
	kill := healedStage("kill", 1.25, 3<<20)
	kill.GraceWaitSeconds = stage.Seconds(time.Second)
	kill.Passes = 7
	del := healedStage("delete", 0.2, 1<<20)
	del.Passes, del.PassesUnread = 3, 2
	r.Faults = []stage.Report{kill, del, {Stage: "bitflip", Skipped: "no scrubber"}}
	r.finish(harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}}, 0, nil)
	if !r.OK {
		t.Fatalf("all healed, not OK: %+v", r)
	}
	doc, js := reportJSON(t, r)
	for _, k := range []string{"segments", "under_replicated", "failed", "data_loss_segments", "seconds_to_heal", "grace_wait_seconds", "bytes_rereplicated", "faults", "ok"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("JSON report lacks %q: %s", k, js)
		}
	}
	if doc["seconds_to_heal"] != 1.25 || doc["grace_wait_seconds"] != 1.0 {
		t.Errorf("seconds_to_heal %v grace %v, want the kill stage's 1.25 and 1", doc["seconds_to_heal"], doc["grace_wait_seconds"])
	}
	if doc["bytes_rereplicated"] != float64(4<<20) {
		t.Errorf("bytes_rereplicated %v, want the stages' sum %d", doc["bytes_rereplicated"], 4<<20)
	}
	faults := doc["faults"].([]any)
	if len(faults) != 3 || faults[2].(map[string]any)["skipped"] != "no scrubber" {
		t.Errorf("faults: %v", faults)
	}
	var text bytes.Buffer
	r.writeText(&text)
	for _, want := range []string{"HEALED", "seconds_to_heal    1.250s", "bitflip       skipped: no scrubber", "heal passes observed: 10 of 12"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
}

func TestReportNotHealed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		faults  []stage.Report
		ev      harness.Evaluation
		failed  int
		err     error
		nemesis *nemesis.Report
		check   func(t *testing.T, r *Report)
	}{
		{
			name:   "stage never healed",
			faults: []stage.Report{{Stage: "kill", Injected: true}},
			ev:     harness.Evaluation{Sealed: 2, Healthy: 1, UnderReplicated: 1, Unhealthy: map[meta.SegmentID]string{"s-1": "2 replicas"}},
			check: func(t *testing.T, r *Report) {
				if r.SecondsToHeal != nil || r.UnderReplicated != 1 || r.Unhealthy["s-1"] != "2 replicas" {
					t.Errorf("%+v", r)
				}
				b, _ := json.Marshal(r)
				if !strings.Contains(string(b), `"seconds_to_heal":null`) {
					t.Errorf("an unhealed stage must give seconds_to_heal null: %s", b)
				}
			},
		},
		{
			name:   "data loss",
			faults: []stage.Report{healedStage("kill", 1, 0)},
			ev:     harness.Evaluation{Sealed: 2, Healthy: 1, Damaged: 1, DataLoss: 1, Unhealthy: map[meta.SegmentID]string{"s-2": "missing"}},
			check: func(t *testing.T, r *Report) {
				if r.DataLossSegments != 1 || r.Failed != 1 {
					t.Errorf("%+v", r)
				}
			},
		},
		{
			name:   "failed by the heal pass",
			faults: []stage.Report{healedStage("kill", 1, 0)},
			ev:     harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}},
			failed: 3,
			check: func(t *testing.T, r *Report) {
				if r.Failed != 3 {
					t.Errorf("failed %d, want the pass's 3", r.Failed)
				}
			},
		},
		{
			// backfill-kill's strikeTarget: the in-flight window missed,
			// the cluster otherwise healthy. The fault did not happen: the
			// run fails, the stage is neither injected nor survived, and
			// the text says NOT INJECTED.
			name: "in-flight window missed",
			faults: []stage.Report{healedStage("kill", 1, 0),
				{Stage: "backfill-kill", Error: "not injected: MISSED the in-flight window: every set of broker 3's segments was recorded before a scan saw bytes moving"}},
			ev: harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}},
			check: func(t *testing.T, r *Report) {
				if r.Summary.FaultsInjected != 1 || r.Summary.FaultsSurvived != 1 {
					t.Errorf("injected %d survived %d, want 1 and 1 (the missed window neither injected nor survived)", r.Summary.FaultsInjected, r.Summary.FaultsSurvived)
				}
				var text strings.Builder
				r.writeText(&text)
				if !strings.Contains(text.String(), "backfill-kill NOT INJECTED: not injected: MISSED the in-flight window") {
					t.Errorf("the text does not say the stage was not injected:\n%s", text.String())
				}
			},
		},
		{
			// A stage the cluster's state kept from injecting its fault
			// (not the operator's choice, not a missing facility): the run
			// fails, and the stage is neither injected nor survived.
			name: "fault not injected",
			faults: []stage.Report{healedStage("kill", 1, 0),
				{Stage: "pause", Error: "not injected: no running follower holds sealed replicas"}},
			ev: harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}},
			check: func(t *testing.T, r *Report) {
				if r.Summary.FaultsInjected != 1 || r.Summary.FaultsSurvived != 1 {
					t.Errorf("injected %d survived %d, want 1 and 1 (the fault that did not happen in neither)", r.Summary.FaultsInjected, r.Summary.FaultsSurvived)
				}
				var text bytes.Buffer
				r.writeText(&text)
				if !strings.Contains(text.String(), "NOT INJECTED: not injected: no running follower") {
					t.Errorf("text report does not name the fault not injected:\n%s", text.String())
				}
			},
		},
		{
			// A stage that ended neither injected nor skipped, with no
			// reason recorded, still fails the run: a fault that did not
			// happen is never passed over.
			name:   "fault not injected, no reason recorded",
			faults: []stage.Report{healedStage("kill", 1, 0), {Stage: "lost"}},
			ev:     harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}},
			check: func(t *testing.T, r *Report) {
				var text bytes.Buffer
				r.writeText(&text)
				if !strings.Contains(text.String(), "lost          NOT INJECTED: the stage recorded no reason") {
					t.Errorf("text report does not name the fault not injected:\n%s", text.String())
				}
			},
		},
		{
			// A nemesis fault that could not be injected fails the run.
			name:   "nemesis fault not injected",
			faults: []stage.Report{healedStage("kill", 1, 0)},
			ev:     harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}},
			nemesis: &nemesis.Report{ChecksRun: 2, ChecksPassed: 2, FaultsInjected: map[harness.Kind]int{harness.KindPause: 1},
				NotInjected: []string{"+36.413s swap on [4] for 6.038s: swap: reading broker 4's pass history: no such file"}},
		},
		{
			name:   "segments missing from the metadata",
			faults: nil,
			ev:     harness.Evaluation{Sealed: 1, Healthy: 1, Unhealthy: map[meta.SegmentID]string{}},
		},
		{
			name:   "interrupted",
			faults: []stage.Report{healedStage("kill", 1, 0)},
			ev:     harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}},
			err:    ErrUsage,
			check: func(t *testing.T, r *Report) {
				if r.Error == "" {
					t.Error("error not reported")
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{Segments: 2, Faults: tc.faults, Nemesis: tc.nemesis}
			r.finish(tc.ev, tc.failed, tc.err)
			if r.OK {
				t.Fatalf("OK, want not healed: %+v", r)
			}
			var text bytes.Buffer
			r.writeText(&text)
			if !strings.Contains(text.String(), "NOT HEALED") {
				t.Errorf("text report does not say NOT HEALED:\n%s", text.String())
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func TestReportUnhealthyCapped(t *testing.T) {
	ev := harness.Evaluation{Sealed: 50, Damaged: 50, Unhealthy: map[meta.SegmentID]string{}}
	for i := 0; i < 50; i++ {
		ev.Unhealthy[meta.SegmentID("s-"+string(rune('A'+i)))] = "missing"
	}
	r := &Report{Segments: 50}
	r.finish(ev, 0, nil)
	if len(r.Unhealthy) != 20 || r.Failed != 50 {
		t.Fatalf("unhealthy %d (want 20 listed), failed %d", len(r.Unhealthy), r.Failed)
	}
}

// A nemesis run's summary counts the nemesis's faults and the bytes its
// heals re-replicated, not only the staged suite's (none ran).
func TestReportNemesisSummary(t *testing.T) {
	r := &Report{Brokers: 5, ReplicationFactor: 3, Segments: 2}
	r.Nemesis = &nemesis.Report{FaultsInjected: map[harness.Kind]int{harness.KindKill: 2, harness.KindPause: 1}, ChecksRun: 1, ChecksPassed: 1, BytesRereplicated: 3 << 20}
	r.finish(harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}}, 0, nil)
	if s := r.Summary; s.FaultsInjected != 3 || s.FaultsSurvived != 3 || s.BytesRereplicated != 3<<20 {
		t.Fatalf("summary %+v: want 3 injected, 3 survived, 3 MiB re-replicated", s)
	}
	r.Nemesis.Violations = []string{"set-changes: ..."}
	r.finish(harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}}, 0, nil)
	if s := r.Summary; s.FaultsInjected != 3 || s.FaultsSurvived != 0 || r.OK {
		t.Fatalf("with a violation: summary %+v OK %v: want 3 injected, none survived, not OK", s, r.OK)
	}
}

// TestReportClientStallsByStage: each client stall is put in the stage
// it began in, one stage at a time, and a stall between stages is "none".
func TestReportClientStallsByStage(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 15, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	r := &Report{Faults: []stage.Report{
		{Stage: "kill", Injected: true, Began: at(0), Ended: at(60)},
		{Stage: "pause", Injected: true, Began: at(60), Ended: at(120)},
		{Stage: "diskfull", Injected: false, Began: at(120), Ended: at(180)},
	}}
	var h kafkaload.History
	stalls := [][2]int{{5, 9}, {20, 21}, {70, 73}, {130, 135}, {200, 202}}
	for _, w := range stalls {
		h.AckTimes = append(h.AckTimes, at(w[1]))
		h.AckLatencies = append(h.AckLatencies, at(w[1]).Sub(at(w[0])))
	}
	// The rest acknowledged every half second, outside the stalls.
	for x := 0; x < 420; x++ {
		ms := time.Duration(x) * 500 * time.Millisecond
		inside := slices.ContainsFunc(stalls, func(w [2]int) bool {
			return ms > time.Duration(w[0])*time.Second && ms < time.Duration(w[1])*time.Second
		})
		if !inside {
			h.AckTimes = append(h.AckTimes, t0.Add(ms))
			h.AckLatencies = append(h.AckLatencies, 10*time.Millisecond)
		}
	}
	r.attributeStalls(h)
	want := map[string]float64{"kill": 4, "pause": 3, "none": 5}
	if !maps.Equal(r.LongestClientStallByStage, want) {
		t.Fatalf("by stage %v, want %v (a stage that injected nothing is no window)", r.LongestClientStallByStage, want)
	}
}
