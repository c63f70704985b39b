package heal

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// footerSize stands for the store's footer: heal only needs "above
// ByteSize".
const footerSize = 48

// leftover lists, in b's report, a leftover copy of s.
func (w *world) leftover(b meta.BrokerID, s string, size int64, footer bool, delErr string) *world {
	r := w.report(b)
	r.Leftovers = append(r.Leftovers, Leftover{Segment: meta.SegmentID(s), Size: size, Footer: footer, DeleteErr: delErr})
	return w
}

// step runs one Step of w at now from st (whose Seen it seeds from w's on
// the first pass), with the outcomes of the previous pass.
func (w *world) step(t *testing.T, p *Planner, st State, now time.Time, executed *Outcomes) (Plan, State) {
	t.Helper()
	if st.Pass == 0 {
		for _, s := range w.in.Seen {
			st.Seen = seenAt(st.Seen, s.Broker, s.At, true)
		}
	}
	for i := range w.in.Reports {
		w.in.Reports[i].Index = w.snap.Index
		if err := w.in.Reports[i].Validate(); err != nil {
			t.Fatal(err)
		}
	}
	pol := w.in.Policy
	pol.LeftoverDelay = time.Minute
	plan, next, err := p.Step(st, Observation{View: meta.NewView(w.snap), Reports: w.in.Reports, Start: now, Now: now, Policy: pol, Executed: executed})
	if err != nil {
		t.Fatal(err)
	}
	return plan, next
}

func leftoverDeletes(p Plan) []string {
	var out []string
	for _, a := range p.Actions {
		if a.Op == DeleteLeftoverCopy {
			out = append(out, CopyRef{a.Segment.ID, a.Target}.String())
		}
	}
	return out
}

func TestClassifyLeftover(t *testing.T) {
	active := seg("a", 1, 2)
	active.Sealed = false
	view := meta.NewView(meta.Snapshot{Index: 3, ReplicationFactor: 2, Brokers: brokers(4), Segments: []meta.Segment{seg("s", 1, 2), active}})
	for _, c := range []struct {
		name   string
		broker meta.BrokerID
		l      Leftover
		want   Cause
	}{
		{"in the set after all", 1, Leftover{Segment: "s", Size: 1000 + footerSize, Footer: true}, CauseNone},
		{"intact-looking copy of a sealed segment", 3, Leftover{Segment: "s", Size: 1000 + footerSize, Footer: true}, ReturnedBroker},
		{"short", 3, Leftover{Segment: "s", Size: 400}, PartialBackfill},
		{"frames complete, no footer", 3, Leftover{Segment: "s", Size: 1000}, PartialBackfill},
		{"long but no footer", 3, Leftover{Segment: "s", Size: 1000 + footerSize}, PartialBackfill},
		{"failed delete wins", 3, Leftover{Segment: "s", Size: 1000 + footerSize, Footer: true, DeleteErr: "operation not permitted"}, FailedDelete},
		{"unknown segment", 3, Leftover{Segment: "u", Size: 10}, FailedLoad},
		{"active segment, not in its set", 3, Leftover{Segment: "a", Size: 10}, FailedLoad},
		{"active segment in its set", 2, Leftover{Segment: "a", Size: 10}, CauseNone},
	} {
		if got := ClassifyLeftover(view, c.broker, &c.l); got != c.want {
			t.Errorf("%s: cause %s, want %s", c.name, got, c.want)
		}
	}
}

// A returned broker's copy is reported, never counted as a replica, and
// deleted only once the safety delay has passed since it was first seen.
func TestLeftoverCollectedAfterDelay(t *testing.T) {
	w := newWorld(4, 3, seg("s", 1, 2, 3))
	w.leftover(4, "s", 1000+footerSize, true, "")
	var p Planner
	plan, st := w.step(t, &p, State{}, t0, nil)
	if d := leftoverDeletes(plan); len(d) != 0 {
		t.Fatalf("deleted %v at once, before the delay", d)
	}
	want := []LeftoverGroup{{Broker: 4, Cause: ReturnedBroker, Copies: 1, Bytes: 1048, Segments: []meta.SegmentID{"s"}}}
	if !slices.EqualFunc(plan.Report.Leftovers, want, func(a, b LeftoverGroup) bool {
		return a.Broker == b.Broker && a.Cause == b.Cause && a.Copies == b.Copies && a.Bytes == b.Bytes && slices.Equal(a.Segments, b.Segments)
	}) {
		t.Fatalf("leftovers %+v, want %+v", plan.Report.Leftovers, want)
	}
	if plan.Report.UnderReplicated != 0 || plan.Report.LeftoverCopies != 1 {
		t.Fatalf("under_replicated %d leftover_copies %d", plan.Report.UnderReplicated, plan.Report.LeftoverCopies)
	}
	plan, st = w.step(t, &p, st, t0.Add(30*time.Second), nil)
	if d := leftoverDeletes(plan); len(d) != 0 {
		t.Fatalf("deleted %v within the delay", d)
	}
	plan, _ = w.step(t, &p, st, t0.Add(time.Minute), nil)
	if d := leftoverDeletes(plan); !slices.Equal(d, []string{"s@4"}) {
		t.Fatalf("deletes %v after the delay, want [s@4]", d)
	}
}

// Never while the segment is under-replicated, not confirmed everywhere,
// in a hold, or active; an unknown segment's copy after the delay.
func TestLeftoverNotCollectedWhileUnsafe(t *testing.T) {
	active := seg("a", 1, 2, 3)
	active.Sealed = false
	for _, c := range []struct {
		name string
		w    func() *world
		want []string
	}{
		{"healthy", func() *world { return newWorld(5, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "") }, []string{"s@4"}},
		{"replica dead", func() *world { return newWorld(5, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "").dead(3) }, nil},
		{"replica suspect", func() *world {
			return newWorld(5, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "").down(3, time.Second)
		}, nil},
		{"short set", func() *world { return newWorld(5, 3, seg("s", 1, 2)).leftover(4, "s", 1048, true, "") }, nil},
		{"overrun not confirmed", func() *world {
			return newWorld(5, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "").anomaly(2, "s", Overrun, 1048, false)
		}, nil},
		{"short replica", func() *world {
			return newWorld(5, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "").anomaly(2, "s", Short, 10, false)
		}, nil},
		{"latched replica", func() *world {
			return newWorld(5, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "").anomaly(2, "s", Latched, 0, false)
		}, nil},
		{"timed out replica", func() *world {
			return newWorld(5, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "").anomaly(2, "s", TimedOut, 0, false)
		}, nil},
		{"active segment", func() *world { return newWorld(5, 3, active).leftover(4, "a", 10, false, "") }, nil},
		{"unknown segment", func() *world { return newWorld(5, 3, seg("s", 1, 2, 3)).leftover(4, "u", 10, false, "") }, []string{"u@4"}},
		{"hold", func() *world {
			return newWorld(8, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "").dead(6).dead(7).dead(8)
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := c.w()
			var p Planner
			_, st := w.step(t, &p, State{}, t0, nil)
			plan, _ := w.step(t, &p, st, t0.Add(time.Hour), nil)
			if d := leftoverDeletes(plan); !slices.Equal(d, c.want) {
				t.Fatalf("deletes %v, want %v\n%s", d, c.want, ops(plan))
			}
		})
	}
}

// A failed delete is retried with a backoff doubling in passes, and its
// error text is reported with the copy's cause until it succeeds.
func TestLeftoverFailedDeleteBackoff(t *testing.T) {
	w := newWorld(4, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "")
	var p Planner
	_, st := w.step(t, &p, State{}, t0, nil)
	now := t0.Add(time.Hour)
	plan, st := w.step(t, &p, st, now, nil)
	if d := leftoverDeletes(plan); len(d) != 1 {
		t.Fatalf("deletes %v", d)
	}
	errText := "store: delete s: remove /d/copies/5c/s.seg: operation not permitted"
	w.report(4).Leftovers[0].DeleteErr = errText
	var planned []int
	for pass := 0; pass < 12; pass++ {
		out := &Outcomes{Plan: plan, Of: make([]Outcome, len(plan.Actions))}
		for i, a := range plan.Actions {
			if a.Op == DeleteLeftoverCopy {
				out.Of[i] = Outcome{Result: Failed, Err: errText}
				if rep := out.Report(); len(rep.LeftoverErrors) != 1 || !strings.Contains(rep.LeftoverErrors[0].Err, "operation not permitted") {
					t.Fatalf("leftover errors %+v", rep.LeftoverErrors)
				}
			}
		}
		plan, st = w.step(t, &p, st, now, out)
		if g := plan.Report.Leftovers; len(g) != 1 || g[0].Cause != FailedDelete || g[0].Err != errText {
			t.Fatalf("pass %d: leftovers %+v", pass, g)
		}
		if len(leftoverDeletes(plan)) > 0 {
			planned = append(planned, st.Pass)
		}
	}
	// The first failure (seen on pass 3) waits 2 passes, the second (seen
	// on pass 6) 4, the third (pass 11) 8.
	if want := []int{5, 10}; !slices.Equal(planned, want) {
		t.Fatalf("retried on passes %v, want %v", planned, want)
	}
	// Once it succeeds the memory is dropped and the report says so.
	plan, st = w.step(t, &p, st, now, nil)
	for len(leftoverDeletes(plan)) == 0 {
		plan, st = w.step(t, &p, st, now, nil)
	}
	out := &Outcomes{Plan: plan, Of: make([]Outcome, len(plan.Actions))}
	for i, a := range plan.Actions {
		if a.Op == DeleteLeftoverCopy {
			out.Of[i] = Outcome{Result: Succeeded}
		}
	}
	if rep := out.Report(); !slices.Equal(rep.LeftoversDeleted, []CopyRef{{"s", 4}}) {
		t.Fatalf("deleted %v", rep.LeftoversDeleted)
	}
	w.report(4).Leftovers = nil
	plan, st = w.step(t, &p, st, now, out)
	if len(st.Leftovers) != 0 || len(plan.Report.Leftovers) != 0 {
		t.Fatalf("memo %+v report %+v after the delete", st.Leftovers, plan.Report.Leftovers)
	}
}

// A lost segment whose live replicas are short is resumed from an intact
// leftover first; the leftover itself is not deleted.
func TestLeftoverRescuesLostSegment(t *testing.T) {
	w := newWorld(4, 3, seg("s", 1, 2, 3)).
		anomaly(1, "s", Short, 10, false).anomaly(2, "s", Missing, 0, false).anomaly(3, "s", Corrupt, 1048, false).
		leftover(4, "s", 1048, true, "")
	var p Planner
	_, st := w.step(t, &p, State{}, t0, nil)
	plan, _ := w.step(t, &p, st, t0.Add(time.Hour), nil)
	got := ops(plan)
	for _, want := range []string{"resume_short_copy s 1<-4 from=10", "resume_short_copy s 2<-4 from=0"} {
		if !strings.Contains(got, want) {
			t.Fatalf("plan lacks %q:\n%s", want, got)
		}
	}
	if len(leftoverDeletes(plan)) != 0 || !plan.Report.IsLost("s") {
		t.Fatalf("plan deletes the leftover or forgets the loss:\n%s", got)
	}
	// A partial leftover is no source.
	w.report(4).Leftovers[0].Footer = false
	plan, _ = w.step(t, &p, st, t0.Add(time.Hour), nil)
	if strings.Contains(ops(plan), "<-4") {
		t.Fatalf("a partial leftover used as source:\n%s", ops(plan))
	}
}

// A broker that stops answering keeps its leftovers' first-seen times.
func TestLeftoverMemoryKeptWhileSilent(t *testing.T) {
	w := newWorld(5, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "")
	var p Planner
	_, st := w.step(t, &p, State{}, t0, nil)
	w.down(4, time.Second)
	_, st = w.step(t, &p, st, t0.Add(time.Second), nil)
	if len(st.Leftovers) != 1 || !st.Leftovers[0].Since.Equal(t0) {
		t.Fatalf("memo %+v", st.Leftovers)
	}
	w.up(4).leftover(4, "s", 1048, true, "")
	plan, _ := w.step(t, &p, st, t0.Add(time.Minute), nil)
	if d := leftoverDeletes(plan); !slices.Equal(d, []string{"s@4"}) {
		t.Fatalf("deletes %v", d)
	}
}

func TestLeftoverValidate(t *testing.T) {
	r := ProbeReport{Broker: 1, Leftovers: []Leftover{{Segment: "s", Size: -1}}}
	if err := r.Validate(); err == nil {
		t.Fatal("negative size accepted")
	}
	r.Leftovers[0] = Leftover{Segment: "s", DeleteErr: strings.Repeat("é", MaxWhy)}
	if err := r.Validate(); err == nil {
		t.Fatal("long delete error accepted")
	}
	r.Leftovers = nil
	r.AddLeftover(Leftover{Segment: "s", DeleteErr: strings.Repeat("é", MaxWhy)})
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
}

// A leftover that refused as a rescue source is not read again while its
// segment is unchanged.
func TestLeftoverRefusedSourceNotRetried(t *testing.T) {
	w := newWorld(4, 3, seg("s", 1, 2, 3)).
		anomaly(1, "s", Short, 10, false).anomaly(2, "s", Corrupt, 1048, false).anomaly(3, "s", Corrupt, 1048, false).
		leftover(4, "s", 1048, true, "")
	var p Planner
	_, st := w.step(t, &p, State{}, t0, nil)
	plan, st := w.step(t, &p, st, t0.Add(time.Second), nil)
	if !strings.Contains(ops(plan), "resume_short_copy s 1<-4") {
		t.Fatalf("no rescue:\n%s", ops(plan))
	}
	out := &Outcomes{Plan: plan, Of: make([]Outcome, len(plan.Actions))}
	for i, a := range plan.Actions {
		if a.Op == ResumeShortCopy {
			out.Of[i] = Outcome{Result: SourceRefused, Err: "checksum mismatch at the source"}
		}
	}
	plan, st = w.step(t, &p, st, t0.Add(2*time.Second), out)
	for k := 0; k < 3; k++ {
		if strings.Contains(ops(plan), "<-4") {
			t.Fatalf("pass %d: the refused leftover is read again:\n%s", st.Pass, ops(plan))
		}
		plan, st = w.step(t, &p, st, t0.Add(time.Duration(3+k)*time.Second), nil)
	}
}

// A lost segment with no replica to resume adopts an intact leftover in the
// place of a dead replica; a live broker's copy, even latched or corrupt, is
// never swapped out; nothing is deleted.
func TestLeftoverAdoptedIntoLostSegment(t *testing.T) {
	for _, c := range []struct {
		name string
		w    func() *world
		want string
	}{
		{"all replicas dead", func() *world {
			return newWorld(4, 3, seg("s", 1, 2, 3)).dead(1).dead(2).dead(3).leftover(4, "s", 1048, true, "")
		}, "set_replicas s [1 2 3]->[4 2 3]"},
		{"dead and corrupt", func() *world {
			return newWorld(4, 3, seg("s", 1, 2, 3)).anomaly(1, "s", Corrupt, 1048, false).anomaly(2, "s", Corrupt, 1048, false).
				dead(3).leftover(4, "s", 1048, true, "")
		}, "set_replicas s [1 2 3]->[1 2 4]"},
		{"all corrupt", func() *world {
			return newWorld(4, 3, seg("s", 1, 2, 3)).anomaly(1, "s", Corrupt, 1048, false).anomaly(2, "s", Latched, 0, false).
				anomaly(3, "s", Corrupt, 1048, false).leftover(4, "s", 1048, true, "")
		}, ""},
		{"partial leftover", func() *world {
			return newWorld(4, 3, seg("s", 1, 2, 3)).dead(1).dead(2).dead(3).leftover(4, "s", 1000, false, "")
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := c.w()
			w.in.Policy.HoldShare = -1
			var p Planner
			_, st := w.step(t, &p, State{}, t0, nil)
			plan, _ := w.step(t, &p, st, t0.Add(time.Second), nil)
			got := ops(plan)
			if c.want == "" && strings.Contains(got, "set_replicas") || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("plan:\n%s\nwant %q", got, c.want)
			}
			if strings.Contains(got, "delete") || !plan.Report.IsLost("s") {
				t.Fatalf("plan deletes or forgets the loss:\n%s", got)
			}
		})
	}
}

// A copy seen once as a failed_load leftover while its load was being
// recorded, whose broker then goes silent, is a returned broker's when it
// comes back: the safety delay starts again at that sighting (found by
// e2e TestNetPartitionLeavesReturnedCopies: copies deleted 1 s after the
// partition healed, with a 5 s delay).
func TestLeftoverDelayRestartsWhenTheCauseChanges(t *testing.T) {
	w := newWorld(4, 3) // the load has written s's copies; the metadata does not know s yet
	w.leftover(3, "s", 500, false, "")
	var p Planner
	plan, st := w.step(t, &p, State{}, t0, nil)
	t.Logf("pass 1 (load in flight): leftovers %+v memo %+v", plan.Report.Leftovers, st.Leftovers)
	// s recorded on {1,2,3}; broker 3 cut off (silent) right after.
	w.snap.Segments = []meta.Segment{seg("s", 1, 2, 3)}
	w.in.Now = t0.Add(time.Second)
	w.down(3, 0)
	plan, st = w.step(t, &p, st, t0.Add(time.Second), nil)
	t.Logf("pass 2 (broker 3 silent, s a replica on it): memo %+v", st.Leftovers)
	// Two minutes later s was healed onto {1,2,4}; broker 3 comes back
	// with its (whole) copy of s: a returned_broker leftover first seen now.
	w.snap.Segments = []meta.Segment{seg("s", 1, 2, 4)}
	w.snap.Segments[0].Version = 2
	w.in.Now = t0.Add(2 * time.Minute)
	w.up(3).leftover(3, "s", 1000+footerSize, true, "")
	plan, _ = w.step(t, &p, st, t0.Add(2*time.Minute), nil)
	t.Logf("pass 3 (broker 3 back): leftovers %+v", plan.Report.Leftovers)
	if d := leftoverDeletes(plan); len(d) != 0 {
		t.Errorf("deleted %v at its first sighting as returned_broker (leftover delay 1 min): the memo of a failed_load sighting 2 minutes ago, kept while broker 3 was silent, stood in for it", d)
	}
}
