package heal

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// Corrupt is a new wire value after TimedOut; the old ones keep
// their numbers.
func TestCorruptKindWire(t *testing.T) {
	if Missing != 1 || Short != 2 || Overrun != 3 || Latched != 4 || TimedOut != 5 || Corrupt != 6 {
		t.Fatalf("kind numbers moved: missing=%d short=%d overrun=%d latched=%d timed_out=%d corrupt=%d", Missing, Short, Overrun, Latched, TimedOut, Corrupt)
	}
	if Corrupt.String() != "corrupt" {
		t.Errorf("String %q", Corrupt.String())
	}
	var k Kind
	if err := k.UnmarshalText([]byte("corrupt")); err != nil || k != Corrupt {
		t.Errorf("UnmarshalText = %v, %v", k, err)
	}
	if err := k.UnmarshalText([]byte("rotten")); err != nil || k != 0 || k.String() != "unknown" {
		t.Errorf("UnmarshalText(rotten) = %v, %v: want the zero kind, unknown", k, err)
	}
	ok := ProbeReport{Broker: 1, Facts: []Fact{{Segment: "a", Flags: FactCorrupt}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate corrupt: %v", err)
	}
	bad := ProbeReport{Broker: 1, Facts: []Fact{{Segment: "a", Flags: factKnown + 1}}}
	if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Validate kind 7: %v", err)
	}
	if ReplaceCorruptCopy.String() != "replace_corrupt_copy" || !ReplaceCorruptCopy.IsBackfill() || ReportFailed != 9 {
		t.Errorf("op %s backfill=%v, report_failed=%d", ReplaceCorruptCopy, ReplaceCorruptCopy.IsBackfill(), ReportFailed)
	}
}

// a corrupt copy is treated as lost.
func TestCorruptCopy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func() *world
		want  string
		check func(t *testing.T, p Plan)
	}{
		{"replaced from an intact replica, deleted after the new set",
			func() *world { return newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Corrupt, 0, false) },
			"replace_corrupt_copy a 4<-2\nset_replicas a [1 2 3]->[2 3 4]\ndelete_dropped_copy a 1\n", nil},
		{"never a backfill source, not even for a short copy",
			func() *world {
				return newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Corrupt, 0, false).anomaly(2, "a", Short, 5, false)
			}, "resume_short_copy a 2<-3 from=5\nreplace_corrupt_copy a 4<-3\nset_replicas a [1 2 3]->[2 3 4]\ndelete_dropped_copy a 1\n", nil},
		{"every copy corrupt: failed and lost, nothing deleted",
			func() *world {
				return newWorld(5, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Corrupt, 0, false).anomaly(2, "a", Corrupt, 0, false).anomaly(3, "a", Corrupt, 0, false)
			}, "report_failed a no_intact_source [1 2 3]\n", func(t *testing.T, p Plan) {
				if !p.Report.IsLost("a") || p.Report.LostBytes != 1000 {
					t.Errorf("report %+v", p.Report)
				}
			}},
		{"no spare broker: stays in the set behind the healthy replicas",
			func() *world { return newWorld(3, 3, seg("a", 2, 1, 3)).anomaly(1, "a", Corrupt, 0, false) },
			"set_replicas a [2 1 3]->[2 3 1]\nreport_failed a no_spare_broker [1]\n", func(t *testing.T, p Plan) {
				if p.Report.IsLost("a") {
					t.Errorf("a segment with intact copies is not lost: %+v", p.Report.Lost)
				}
			}},
		{"corrupt outranks a timed-out or short report of the same copy",
			func() *world {
				return newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(1, "a", TimedOut, 0, false).anomaly(1, "a", Corrupt, 0, false).anomaly(1, "a", Short, 5, false)
			}, "replace_corrupt_copy a 4<-2\nset_replicas a [1 2 3]->[2 3 4]\ndelete_dropped_copy a 1\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.build().plan()
			if got := ops(p); got != tc.want {
				t.Errorf("plan:\n%swant:\n%s", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

// a lost segment is listed with its id, offsets, size and last
// known replicas; the gauges add up; an acknowledgement is kept while the
// segment is unhealthy and dropped once it is healthy.
func TestLostReport(t *testing.T) {
	a, b := seg("a", 1, 2, 3), seg("b", 1, 2, 4)
	a.StartOffset, b.StartOffset, b.ByteSize = 100, 300, 2500
	w := newWorld(5, 3, a, b, seg("c", 3, 4, 5)).dead(1).dead(2).dead(3).anomaly(4, "b", Latched, 0, false)
	w.in.Policy.HoldShare = -1
	w.in.Acknowledged = []meta.SegmentID{"b", "c"}
	p := w.plan()
	want := []LostSegment{
		{Segment: "a", StartOffset: 100, EndOffset: 110, ByteSize: 1000, Replicas: []meta.BrokerID{1, 2, 3}, Reason: AllReplicasDead},
		{Segment: "b", StartOffset: 300, EndOffset: 310, ByteSize: 2500, Replicas: []meta.BrokerID{1, 2, 4}, Reason: NoIntactSource, Acknowledged: true},
	}
	if fmt.Sprint(p.Report.Lost) != fmt.Sprint(want) {
		t.Errorf("lost:\n%+v\nwant:\n%+v", p.Report.Lost, want)
	}
	if p.Report.LostBytes != 3500 || p.Report.LostAcknowledged != 1 || !strings.Contains(p.Report.String(), "lost=2 lost_bytes=3500 lost_acknowledged=1") {
		t.Errorf("report %s", p.Report)
	}
	// c is under-replicated (3 dead) but not lost; its acknowledgement
	// is kept while it is unhealthy, like b's.
	if !slices.Equal(p.Acknowledged, []meta.SegmentID{"b", "c"}) {
		t.Errorf("acknowledged %v", p.Acknowledged)
	}
	// Every broker back: all healthy, every acknowledgement dropped.
	h := newWorld(5, 3, a, b, seg("c", 3, 4, 5))
	h.in.Acknowledged = p.Acknowledged
	if q := h.plan(); len(q.Report.Lost) != 0 || len(q.Acknowledged) != 0 {
		t.Errorf("healthy: lost %v acknowledged %v", q.Report.Lost, q.Acknowledged)
	}
}

// a Refusal in force keeps the planner off that copy; every
// source refused makes the segment lost with no read planned; any change
// to the segment lifts the refusals.
func TestRefusal(t *testing.T) {
	base := func() *world { return newWorld(5, 3, seg("a", 1, 2, 3)).dead(1) }
	first := base().plan()
	if got := ops(first); got != "replace_dead_replica a 4<-2\nset_replicas a [1 2 3]->[2 3 4]\n" {
		t.Fatalf("plan:\n%s", got)
	}
	fp := first.Actions[0].State
	if fp == 0 {
		t.Fatal("backfill without a state fingerprint")
	}
	ref := func(src meta.BrokerID) Refusal { return Refusal{Segment: "a", Source: src, Version: 1, State: fp} }

	w := base()
	w.in.Refused = []Refusal{ref(2)}
	p := w.plan()
	if got := ops(p); got != "replace_dead_replica a 4<-3\nset_replicas a [1 2 3]->[2 3 4]\n" || p.Report.Refused != 1 || !slices.Equal(p.Refused, []Refusal{ref(2)}) {
		t.Errorf("one refused: plan:\n%sreport %s refused %v", got, p.Report, p.Refused)
	}
	if p.Actions[0].State != fp {
		t.Errorf("fingerprint changed with a refusal: %x != %x", p.Actions[0].State, fp)
	}

	w = base()
	w.in.Refused = []Refusal{ref(3), ref(2)}
	p = w.plan()
	if got := ops(p); got != "report_failed a no_intact_source [1]\n" || !p.Report.IsLost("a") || len(p.Refused) != 2 {
		t.Errorf("every source refused: plan:\n%sreport %+v", got, p.Report)
	}

	for _, ch := range []struct {
		name   string
		change func(w *world)
	}{
		{"a replica's report changed", func(w *world) { w.anomaly(2, "a", Overrun, 1040, false) }},
		{"a dead broker returned", func(w *world) { w.up(1) }},
		{"the metadata version changed", func(w *world) { w.snap.Segments[0].Version = 2 }},
	} {
		w := base()
		w.in.Refused = []Refusal{ref(2), ref(3)}
		ch.change(w)
		p := w.plan()
		if p.Report.IsLost("a") || len(p.Refused) != 0 || p.Report.Refused != 0 {
			t.Errorf("%s: refusals still in force: plan:\n%sreport %+v", ch.name, ops(p), p.Report)
		}
	}
}

// a segment lost on the previous pass stays reported lost while
// no copy of it is known intact, even when a copy's state is unknown this
// pass (its probe timed out, its broker is within the grace delay); a
// segment never lost before is merely deferred then.
func TestLostStaysLostWhileUnknown(t *testing.T) {
	build := func() *world {
		w := newWorld(5, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Corrupt, 0, false).anomaly(2, "a", Corrupt, 0, false)
		return w.anomaly(3, "a", TimedOut, 0, false)
	}
	if p := build().plan(); p.Report.IsLost("a") || p.Report.Deferred != 1 || len(p.Lost) != 0 {
		t.Errorf("first seen with an unknown copy: %+v", p.Report)
	}
	w := build()
	w.in.Lost = []meta.SegmentID{"a"}
	if p := w.plan(); !p.Report.IsLost("a") || p.Report.Deferred != 0 || !slices.Equal(p.Lost, []meta.SegmentID{"a"}) || len(p.Actions) != 1 {
		t.Errorf("lost before, a copy timed out now: plan:\n%sreport %+v", ops(p), p.Report)
	}
	w = newWorld(5, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Corrupt, 0, false).anomaly(2, "a", Corrupt, 0, false).down(3, time.Second)
	w.in.Lost = []meta.SegmentID{"a"}
	if p := w.plan(); !p.Report.IsLost("a") {
		t.Errorf("lost before, a broker within its grace now: report %+v", p.Report)
	}
	// A copy known intact again: not lost, whatever the memory says.
	w = newWorld(5, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Corrupt, 0, false)
	w.in.Lost = []meta.SegmentID{"a"}
	if p := w.plan(); p.Report.IsLost("a") || len(p.Lost) != 0 {
		t.Errorf("intact copy back: report %+v", p.Report)
	}
}

// Every known copy's state unknown this pass, none known intact: a segment
// lost before stays lost (the pass would otherwise find nothing to do).
func TestLostStaysLostWhenEveryCopyUnknown(t *testing.T) {
	w := newWorld(5, 3, seg("a", 1, 2, 3)).anomaly(1, "a", TimedOut, 0, false).anomaly(2, "a", TimedOut, 0, false).down(3, time.Second)
	if p := w.plan(); p.Report.IsLost("a") || len(p.Actions) != 0 {
		t.Errorf("never lost: plan:\n%sreport %+v", ops(p), p.Report)
	}
	w.in.Lost = []meta.SegmentID{"a"}
	if p := w.plan(); !p.Report.IsLost("a") || ops(p) != "report_failed a no_intact_source\n" {
		t.Errorf("lost before: plan:\n%sreport %+v", ops(p), p.Report)
	}
}

// A segment lost last pass whose only source is a copy refused before
// (its refusal lifted because another replica's state changed: a
// scrubber flagging the copies one at a time) stays listed lost on this
// pass, while the read from that copy is tried again. Without it the loss
// disappeared from one pass's report (the fault suite's lost stage saw
// "not reported lost on 1 pass").
func TestLostWhileRetryingARefusedSource(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Corrupt, 0, false).anomaly(2, "a", Corrupt, 0, false)
	w.in.Lost = []meta.SegmentID{"a"}
	w.in.Refused = []Refusal{{Segment: "a", Source: 3, Version: 1, State: 12345}} // a state no longer current
	p := w.plan()
	if !p.Report.IsLost("a") {
		t.Errorf("not listed lost: plan:\n%sreport %+v", ops(p), p.Report)
	}
	if !strings.Contains(ops(p), "<-3") {
		t.Errorf("no retry from the copy whose refusal lifted: plan:\n%s", ops(p))
	}
	// The same without the earlier refusal: copy 3 may be intact; not lost.
	w = newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Corrupt, 0, false).anomaly(2, "a", Corrupt, 0, false)
	w.in.Lost = []meta.SegmentID{"a"}
	if p := w.plan(); p.Report.IsLost("a") {
		t.Errorf("listed lost with a copy never refused: %+v", p.Report)
	}
}

// A segment lost last pass whose only healthy copy is overrun (never
// settled and confirmed against the checksum: here a leftover adopted into
// the set, as the fault suite's lost stage saw when every copy, the
// leftover's too, was bit-flipped) stays listed lost while the copy is read;
// a confirmed copy ends the loss.
func TestLostWhileOnlyAnUnconfirmedCopyIsLeft(t *testing.T) {
	w := newWorld(5, 3, seg("a", 4, 2, 3)).dead(2).dead(3).anomaly(4, "a", Overrun, 1040, false)
	w.in.Lost = []meta.SegmentID{"a"}
	w.in.Policy.HoldShare = -1
	p := w.plan()
	if !p.Report.IsLost("a") {
		t.Errorf("not listed lost: plan:\n%sreport %+v", ops(p), p.Report)
	}
	if !strings.Contains(ops(p), "<-4") {
		t.Errorf("no read of the unconfirmed copy: plan:\n%s", ops(p))
	}
	w = newWorld(5, 3, seg("a", 4, 2, 3)).dead(2).dead(3)
	w.in.Lost = []meta.SegmentID{"a"}
	w.in.Policy.HoldShare = -1
	if p := w.plan(); p.Report.IsLost("a") {
		t.Errorf("listed lost with an intact copy: %+v", p.Report)
	}
}
