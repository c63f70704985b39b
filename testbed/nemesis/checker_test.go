package nemesis

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
)

// cleanObs is a run in which nothing went wrong: broker 4 was killed for
// ten seconds, segment a moved from {1,2,4} to {1,2,3}, the passes listed
// 4 dead, and the quiescent check found a at RF with every copy verified.
func cleanObs() Observations {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	seg := meta.Segment{ID: "a", Sealed: true, Replicas: []meta.BrokerID{1, 2, 3}, Version: 5}
	return Observations{
		RF: 3, Brokers: 5, Grace: time.Second, Tick: 200 * time.Millisecond,
		Acked:  []meta.SegmentID{"a"},
		Faults: []Injected{{Kind: harness.KindKill, Brokers: []meta.BrokerID{4}, Start: at(1), End: at(11)}},
		Passes: []PassObs{
			{Leader: 1, Number: 10, Started: at(5), Ended: at(5.2), Report: heal.Report{Dead: []meta.BrokerID{4}}},
			{Leader: 1, Number: 11, Started: at(6), Ended: at(6.2), Report: heal.Report{Dead: []meta.BrokerID{4},
				Deleted: []heal.CopyRef{{Segment: "a", Broker: 4}}}},
		},
		Sets: map[meta.SegmentID][]SetObs{"a": {
			{At: at(0), Version: 3, Replicas: []meta.BrokerID{1, 2, 4}},
			{At: at(5.5), Version: 4, Replicas: []meta.BrokerID{1, 2, 4, 3}},
			{At: at(6.5), Version: 5, Replicas: []meta.BrokerID{1, 2, 3}},
		}},
		Checks: []QuiescentObs{{Label: "epoch 1", At: at(20), Healed: true, Acked: []meta.SegmentID{"a"},
			Segments: map[meta.SegmentID]meta.Segment{"a": seg},
			Verified: map[meta.SegmentID]map[meta.BrokerID]string{"a": {1: "", 2: "", 3: ""}},
			Running:  map[meta.BrokerID]bool{1: true, 2: true, 3: true, 4: true, 5: true}}},
	}
}

func TestCheckerClean(t *testing.T) {
	if v := Check(cleanObs()); len(v) != 0 {
		t.Fatalf("a clean run: %v", v)
	}
	// Seed 777 (2026-12-07): brokers 1 and 2 were swapped, a pass
	// resumed their copies of a, and the next pass, which still reported
	// a lost (no copy known intact at its plan), recorded a's new set and
	// deleted 4's latched copy. Nothing was at risk: not a violation.
	o := cleanObs()
	at := func(s float64) time.Time { return o.Sets["a"][0].At.Add(time.Duration(s * float64(time.Second))) }
	o.Faults = append(o.Faults, Injected{Kind: harness.KindSwap, Brokers: []meta.BrokerID{1, 2}, Start: at(2), End: at(3)})
	o.Passes = append(o.Passes[:1], PassObs{Leader: 1, Number: 11, Started: at(4), Ended: at(5.8),
		Report: heal.Report{Dead: []meta.BrokerID{4}, Resumed: []heal.CopyRef{{Segment: "a", Broker: 1}, {Segment: "a", Broker: 2}}}}, o.Passes[1])
	o.Passes[2].Number = 12
	o.Passes[2].Report.Lost = []heal.LostSegment{{Segment: "a"}}
	o.Passes[2].Report.Ready = []meta.SetSegmentReplicas{{ID: "a", Expected: []meta.BrokerID{1, 2, 4}, Replicas: []meta.BrokerID{1, 2, 3}}}
	o.Sets["a"] = o.Sets["a"][:1]
	if v := Check(o); len(v) != 0 {
		t.Fatalf("a lost segment's latched copy deleted by the pass that recorded its new set, the others resumed: %v", v)
	}
	// A segment sealed on one replica (the others were down as it was
	// written) may gain two without a fault the nemesis saw.
	o = cleanObs()
	t1 := o.Sets["a"][0].At
	o.Sets["b"] = []SetObs{{At: t1, Version: 2, Replicas: []meta.BrokerID{2}}, {At: t1.Add(time.Second), Version: 3, Replicas: []meta.BrokerID{2, 4, 1}}}
	if v := Check(o); len(v) != 0 {
		t.Fatalf("a segment born short: %v", v)
	}
	// A hold that lifted on its own restarted broker 4's grace: the
	// leader's next pass still counts it suspect (seed 777, 2026-12-07:
	// the checker judged from the kill and reported 14 violations).
	o = cleanObs()
	restarted := o.Passes[0].Started.Add(-time.Second)
	o.Passes = append([]PassObs{{Leader: 1, Number: 9, Started: restarted, Ended: restarted.Add(100 * time.Millisecond),
		Report: heal.Report{Suspect: []meta.BrokerID{4}, GraceRestarted: []meta.BrokerID{4}}}}, o.Passes...)
	o.Passes[1].Report.Dead, o.Passes[1].Report.Suspect = nil, []meta.BrokerID{4}
	if v := Check(o); len(v) != 0 {
		t.Fatalf("a pass within the restarted grace: %v", v)
	}
	// The leader isolated: its last pass published within the step-down
	// bound, the majority's new leader publishing after it.
	o = cleanObs()
	isolateLeader(&o)
	if v := Check(o); len(v) != 0 {
		t.Fatalf("an isolated leader that stepped down: %v", v)
	}
	// A failure reported on every pass, and one that stops being reported
	// on the pass that heals it (then comes back).
	o = cleanObs()
	flicker(&o, "no_spare_broker")
	o.Passes[3].Report.Failed = o.Passes[2].Report.Failed
	if v := Check(o); len(v) != 0 {
		t.Fatalf("a failure on every pass: %v", v)
	}
	o.Passes[3].Report.Failed = nil
	o.Passes[3].Report.Healed = []meta.SegmentID{"a"}
	if v := Check(o); len(v) != 0 {
		t.Fatalf("a failure healed and back: %v", v)
	}
	// A pass omitting it while a fault began is not judged.
	o.Passes[3].Report.Healed = nil
	o.Faults = append(o.Faults, Injected{Kind: harness.KindPause, Brokers: []meta.BrokerID{5}, Start: o.Passes[3].Ended, End: o.Passes[4].Ended.Add(time.Second)})
	if v := Check(o); len(v) != 0 {
		t.Fatalf("a failure omitted while a fault began: %v", v)
	}
}

// isolateLeader isolates leader 1 from 12 s to 18 s: its last pass ends
// within the step-down bound (1 s, Settle's default), and broker 2, the
// majority's new leader, publishes its first pass at 14 s.
func isolateLeader(o *Observations) {
	at := func(s float64) time.Time { return o.Sets["a"][0].At.Add(time.Duration(s * float64(time.Second))) }
	o.Faults = append(o.Faults, Injected{Kind: harness.KindIsolate, Brokers: []meta.BrokerID{1}, Start: at(12), End: at(18)})
	o.Passes = append(o.Passes,
		PassObs{Leader: 1, Number: 12, Started: at(11.8), Ended: at(12.5), Report: heal.Report{Aborted: true}},
		PassObs{Leader: 2, Number: 1, Ended: at(14)})
}

// flicker adds passes 12, 13 and 14 of leader 1 at 12, 13 and 14 s: 12
// and 14 report segment a failed for reason (or lost, reason "lost"), 13
// does not.
func flicker(o *Observations, reason string) {
	at := func(s float64) time.Time { return o.Sets["a"][0].At.Add(time.Duration(s * float64(time.Second))) }
	var r heal.Report
	if reason == "lost" {
		r.Lost = []heal.LostSegment{{Segment: "a", Replicas: []meta.BrokerID{1, 2, 3}}}
	} else {
		var why heal.Reason
		if err := why.UnmarshalText([]byte(reason)); err != nil || why == heal.ReasonUnknown {
			panic("flicker: reason " + reason)
		}
		r.Failed = []heal.Failure{{Segment: "a", Reason: why}}
	}
	o.Passes = append(o.Passes,
		PassObs{Leader: 1, Number: 12, Started: at(11.8), Ended: at(12), Report: r},
		PassObs{Leader: 1, Number: 13, Started: at(12), Ended: at(13)},
		PassObs{Leader: 1, Number: 14, Started: at(13), Ended: at(14), Report: r})
}

// Each property fires on a crafted violation, and only that property.
func TestCheckerFires(t *testing.T) {
	at := func(o Observations, s float64) time.Time {
		return o.Sets["a"][0].At.Add(time.Duration(s * float64(time.Second)))
	}
	o0 := cleanObs()
	// A pass that began before the fault could be seen, or was published
	// after it was undone, is not judged.
	o0.Passes[0].Report.Dead = nil
	o0.Passes[0].Started = time.Time{}
	o0.Passes[1].Ended = at(o0, 12)
	o0.Passes[1].Report.Dead = nil
	if v := Check(o0); len(v) != 0 {
		t.Fatalf("passes not judged by time were: %v", v)
	}
	cases := []struct {
		name, property, want string
		mutate               func(o *Observations)
	}{
		{"bound expired", "healed", "not healthy within the bound", func(o *Observations) {
			o.Checks[0].Healed, o.Checks[0].Why = false, "1 segment unhealthy"
		}},
		{"acked missing", "durable", "not in the metadata", func(o *Observations) {
			o.Checks[0].Acked = append(o.Checks[0].Acked, "b")
		}},
		{"under-replicated", "durable", "has 2 replicas", func(o *Observations) {
			s := o.Checks[0].Segments["a"]
			s.Replicas = []meta.BrokerID{1, 2}
			o.Checks[0].Segments["a"] = s
		}},
		{"copy bad", "durable", "frame 3: CRC mismatch", func(o *Observations) {
			o.Checks[0].Verified["a"][2] = "frame 3: CRC mismatch"
		}},
		{"copy unread", "durable", "was not read", func(o *Observations) {
			delete(o.Checks[0].Verified["a"], 3)
		}},
		{"last copy deleted", "last-copy", "no other intact copy", func(o *Observations) {
			// 1 and 2 were damaged by the nemesis just before the pass
			// deleted 4's copy, and never replaced.
			o.Faults = append(o.Faults, Injected{Kind: harness.KindDelete, Brokers: []meta.BrokerID{1, 2},
				Copies: []heal.CopyRef{{Segment: "a", Broker: 1}, {Segment: "a", Broker: 2}}, Start: at(*o, 5.8), End: at(*o, 5.8)})
			o.Sets["a"] = o.Sets["a"][:1]
		}},
		{"deleted while lost", "last-copy", "while reporting it lost", func(o *Observations) {
			o.Passes[1].Report.Lost = []heal.LostSegment{{Segment: "a"}}
		}},
		{"deleted while lost, a resume before another fault", "last-copy", "no other intact copy", func(o *Observations) {
			// The copies on 1 and 2 were resumed before they were damaged
			// again: the resume does not count.
			o.Passes = append([]PassObs{{Leader: 1, Number: 9, Started: at(*o, 0.5), Ended: at(*o, 0.9),
				Report: heal.Report{Resumed: []heal.CopyRef{{Segment: "a", Broker: 1}, {Segment: "a", Broker: 2}}}}}, o.Passes...)
			o.Faults = append(o.Faults, Injected{Kind: harness.KindSwap, Brokers: []meta.BrokerID{1, 2}, Start: at(*o, 1), End: at(*o, 2)})
			o.Sets["a"] = o.Sets["a"][:1]
		}},
		{"dead not reported", "reported", "does not list broker 4 dead", func(o *Observations) {
			o.Passes[0].Report.Dead = nil
		}},
		{"set churn", "set-changes", "changed 4 times for 1 losses", func(o *Observations) {
			s := o.Sets["a"]
			o.Sets["a"] = append(s, SetObs{At: at(*o, 8), Version: 6, Replicas: []meta.BrokerID{1, 5, 3}},
				SetObs{At: at(*o, 9), Version: 7, Replicas: []meta.BrokerID{1, 2, 3}})
		}},
		{"isolated leader coordinates", "minority", "broker 1, cut off by isolate [1]", func(o *Observations) {
			isolateLeader(o)
			o.Passes[2].Ended = o.Faults[1].Start.Add(3 * time.Second)
		}},
		{"majority silent", "majority", "no broker outside [1] published a heal pass", func(o *Observations) {
			isolateLeader(o)
			o.Passes = o.Passes[:3]
		}},
		{"failure omitted", "failure-reported", "a no_spare_broker on passes 12 and 14 but not on pass 13", func(o *Observations) {
			flicker(o, "no_spare_broker")
		}},
		{"loss omitted", "failure-reported", "a lost on passes 12 and 14 but not on pass 13", func(o *Observations) {
			flicker(o, "lost")
		}},
		{"no hold", "hold", "2 of 5 brokers down together", func(o *Observations) {
			o.Faults[0].Brokers = []meta.BrokerID{4, 5}
			o.Passes[0].Report.Dead = []meta.BrokerID{4, 5}
			o.Passes[1].Report.Dead = []meta.BrokerID{4, 5}
			o.Passes[1].Report.HoldReason = "brokers_missing: 2 of 5 within 1s"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := cleanObs()
			c.mutate(&o)
			vs := Check(o)
			if len(vs) == 0 {
				t.Fatalf("no violation found")
			}
			for _, v := range vs {
				if v.Property != c.property {
					t.Errorf("unexpected %s", v)
				}
			}
			if !strings.Contains(vs[0].What, c.want) {
				t.Errorf("violation %q does not say %q", vs[0], c.want)
			}
		})
	}
}

// notePasses records each pass of a history once, counts the ones its
// bound dropped before they were read, and reads a history that began
// anew (a replaced data directory) from its start.
func TestNotePasses(t *testing.T) {
	n := &runner{cursors: map[meta.BrokerID]passCursor{}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	hist := func(began time.Time, dropped uint64, seqs ...uint64) plugin.PassHistory {
		h := plugin.PassHistory{Broker: 1, Began: began, Dropped: dropped}
		for _, s := range seqs {
			h.Passes = append(h.Passes, plugin.PassRecord{Seq: s, Broker: 1, Ended: began.Add(time.Duration(s) * time.Second)})
		}
		return h
	}
	n.notePasses(1, hist(t0, 0, 1, 2))
	n.notePasses(1, hist(t0, 0, 2, 3)) // 2 again: recorded once
	n.notePasses(1, hist(t0, 2, 6))    // 4 and 5 dropped by the bound
	n.notePasses(1, hist(t1, 0, 1))    // a new data directory
	var got []string
	for _, p := range n.obs.Passes {
		got = append(got, fmt.Sprintf("%d+%d", p.Number, p.Unseen))
	}
	if want := []string{"1+0", "2+0", "3+0", "6+2", "1+0"}; !slices.Equal(got, want) {
		t.Fatalf("passes recorded %v, want %v", got, want)
	}
}

// Seed 424's shape: broker 4 swapped (killed, restarted on an empty data
// directory at 11 s), answering no probe until its metadata caught up at
// 15 s; segment c, placed on it at 14.2 s (past the undo and the grace
// delay), loses that replica at 15 s. The loss is the swap's: heal counted
// broker 4 dead until 15 s. Had a pass seen broker 4 back at 13 s, the
// change would be unexplained.
func TestSetChangesCountTheFaultUntilHealSeesTheBrokerBack(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	o := cleanObs()
	o.Faults[0].Kind = harness.KindSwap
	o.Sets["c"] = []SetObs{{At: at(14.2), Version: 2, Replicas: []meta.BrokerID{2, 3, 4}}, {At: at(15.1), Version: 3, Replicas: []meta.BrokerID{2, 3, 5}}}
	o.Passes = append(o.Passes,
		PassObs{Leader: 1, Number: 12, Started: at(11.1), Ended: at(13), Report: heal.Report{Dead: []meta.BrokerID{4}}},
		PassObs{Leader: 1, Number: 13, Started: at(13), Ended: at(15), Report: heal.Report{Dead: []meta.BrokerID{4}, Healed: []meta.SegmentID{"c"}}},
		PassObs{Leader: 1, Number: 14, Started: at(15), Ended: at(15.2)})
	if v := Check(o); len(v) != 0 {
		t.Fatalf("a replica placed on a broker heal still counted dead: %v", v)
	}
	o.Passes[2].Report.Dead = nil // heal saw broker 4 back by 13 s
	v := Check(o)
	if len(v) != 1 || v[0].Property != "set-changes" || !strings.Contains(v[0].What, "segment c's") {
		t.Fatalf("a replica of a broker heal saw back was replaced: %v, want one set-changes violation for c", v)
	}
}
