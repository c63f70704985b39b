package heal

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// P6.8: round-robin over the unsettled copies, the cursor surviving between
// passes, bounded by the settle batch.
func TestSeedSettleRoundRobin(t *testing.T) {
	w := newWorld(3, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3), seg("c", 1, 2, 3))
	for _, s := range []string{"a", "b", "c"} {
		w.anomaly(1, s, Overrun, 1040, false)
	}
	w.anomaly(2, "b", Overrun, 1040, false)
	w.in.Policy.SettleBatch = 3
	var p Planner
	var got []string
	for pass := 0; pass < 4; pass++ {
		pl, err := p.Plan(w.input())
		if err != nil {
			t.Fatal(err)
		}
		var sel []string
		for _, c := range pl.Report.Settling {
			sel = append(sel, c.String())
		}
		got = append(got, strings.Join(sel, " "))
		w.in.SettleCursor = pl.SettleCursor
	}
	want := []string{"a@1 b@1 b@2", "c@1 a@1 b@1", "b@2 c@1 a@1", "b@1 b@2 c@1"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("pass %d selected %q, want %q (all: %q)", i, got[i], want[i], got)
		}
	}
	// A cursor naming a copy that is gone still resumes after it.
	w.in.SettleCursor = CopyRef{"b", 9}
	w.in.Policy.SettleBatch = 1
	pl, _ := p.Plan(w.input())
	if len(pl.Report.Settling) != 1 || pl.Report.Settling[0] != (CopyRef{"c", 1}) {
		t.Errorf("after b@9: %v, want c@1", pl.Report.Settling)
	}
}

// Beyond the seed: the segments with the fewest healthy copies first.
func TestRiskOrder(t *testing.T) {
	w := newWorld(9, 3, seg("a", 1, 4, 5), seg("b", 1, 2, 6), seg("c", 7, 8, 9)).dead(1).dead(2)
	w.anomaly(7, "c", Short, 10, false)
	w.in.Policy.HoldShare = -1
	p := w.plan()
	var order []meta.SegmentID
	for _, a := range p.Actions {
		if len(order) == 0 || order[len(order)-1] != a.Segment.ID {
			order = append(order, a.Segment.ID)
		}
	}
	if got := strings.Join(toStrings(order), ","); got != "b,a,c" {
		t.Errorf("risk order %s, want b (1 healthy), a (2), c (2, later in the snapshot)\n%s", got, ops(p))
	}
}

func toStrings(ids []meta.SegmentID) []string {
	var out []string
	for _, id := range ids {
		out = append(out, string(id))
	}
	return out
}

// Beyond the seed: per-broker and per-pass caps defer work, never
// half-place a segment.
func TestBackfillCaps(t *testing.T) {
	w := newWorld(6, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3), seg("c", 1, 2, 3), seg("d", 1, 2, 3)).dead(1)
	w.in.Policy.MaxBackfillsPerBroker = 1
	p := w.plan()
	// Sources 2 and 3 and targets 4, 5, 6 allow two segments this pass.
	if p.Report.Backfills != 2 || p.Report.Commands != 2 || p.Report.Deferred != 2 || len(p.Report.Failed) != 0 {
		t.Errorf("report %s\n%s", p.Report, ops(p))
	}
	busy := map[meta.BrokerID]int{}
	for _, a := range p.Actions {
		if a.Op.IsBackfill() {
			busy[a.Target]++
			busy[a.Source]++
		}
	}
	for b, n := range busy {
		if n > 1 {
			t.Errorf("broker %d in %d backfills, cap 1", b, n)
		}
	}
	w.in.Policy.MaxBackfillsPerBroker = 0
	w.in.Policy.MaxBackfills = 3
	if p := w.plan(); p.Report.Backfills != 3 || p.Report.Deferred != 1 {
		t.Errorf("max_backfills 3: report %s", p.Report)
	}
}

// Beyond the seed: a target whose backfill failed recently is avoided for
// its segment only (Avoid in any order; broker 5 is avoided for others).
func TestAvoid(t *testing.T) {
	w := newWorld(5, 3, seg("a", 1, 2, 3)).dead(1)
	w.in.Avoid = []CopyRef{{"b", 5}, {"a", 4}, {"0", 5}}
	if got := ops(w.plan()); got != "replace_dead_replica a 5<-2\nset_replicas a [1 2 3]->[2 3 5]\n" {
		t.Errorf("plan:\n%s", got)
	}
}

// Beyond the seed: the mass-failure brake.
func TestHold(t *testing.T) {
	for _, tc := range []struct {
		name    string
		build   func() *world
		hold    string // substring of hold_reason; "" for none
		actions bool
	}{
		{"one of three brokers is never a mass failure", func() *world { return newWorld(4, 3, seg("a", 1, 2, 3)).dead(1) }, "", true},
		{"two of five within one grace window hold placement", func() *world {
			return newWorld(5, 3, seg("a", 1, 2, 3)).down(1, time.Hour).down(2, time.Hour-time.Second)
		}, "brokers_missing: 2 of 5", false},
		{"two of five an hour apart do not", func() *world {
			return newWorld(5, 3, seg("a", 1, 2, 3)).down(1, 2*time.Hour).down(2, time.Hour)
		}, "", true},
		{"two of eight do not (not more than a quarter)", func() *world {
			return newWorld(8, 3, seg("a", 1, 2, 3)).dead(1).dead(2)
		}, "", true},
		{"a whole rack (three of twelve brokers)", func() *world {
			w := newWorld(12, 3, seg("a", 1, 2, 3))
			w.snap.Brokers = brokers(12, "r1", "r2", "r3", "r4")
			return w.dead(1).dead(5).dead(9)
		}, "rack_missing: r1 (3 brokers)", false},
		{"disabled", func() *world {
			w := newWorld(5, 3, seg("a", 1, 2, 3)).dead(1).dead(2)
			w.in.Policy.HoldShare = -1
			return w
		}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.build()
			p := w.plan()
			if tc.hold == "" && p.Report.HoldReason != "" || !strings.Contains(p.Report.HoldReason, tc.hold) {
				t.Errorf("hold_reason %q, want %q", p.Report.HoldReason, tc.hold)
			}
			if got := len(p.Actions) > 0; got != tc.actions {
				t.Errorf("actions %v, want %v:\n%s", got, tc.actions, ops(p))
			}
			if tc.hold != "" {
				w.in.Release = true
				p := w.plan()
				if !p.Report.HoldReleased || p.Report.Backfills == 0 {
					t.Errorf("released: report %s", p.Report)
				}
			}
		})
	}
}

func TestDryRunFormat(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3)).dead(1).anomaly(2, "b", Short, 10, false)
	got := w.plan().String()
	for _, want := range []string{
		"plan at index 7: 5 actions",
		"replace_dead_replica a target=4 source=2 replaces=1",
		"resume_short_copy b target=2 source=3 stored=10 of 1000",
		"set_replicas a [1 2 3] -> [2 3 4]",
		"report: index=7 segments=2 sealed=2",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("dry run lacks %q:\n%s", want, got)
		}
	}
}

func TestPlanInvalidInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*world)
		want string
	}{
		{"negative grace", func(w *world) { w.in.Policy.Grace = -1 }, "policy grace -1ns is negative"},
		{"negative batch", func(w *world) { w.in.Policy.SettleBatch = -2 }, "settle_batch -2"},
		{"hold share", func(w *world) { w.in.Policy.HoldShare = 2 }, "hold_share 2"},
		{"factor", func(w *world) { w.snap.ReplicationFactor = 0 }, "replication_factor 0"},
		// Reports are validated once, where they cross the network
		// (TestCoordinatorLeavesOutInvalidReports): what it refuses.
		{"report broker", func(w *world) { w.in.Reports[0].Broker = 0 }, "broker id 0"},
		{"anomaly kind", func(w *world) { w.in.Reports[0].Facts = []Fact{{Segment: "a", Flags: 99}} }, "kind 99 is unknown"},
		{"anomaly size", func(w *world) { w.in.Reports[0].Facts = []Fact{{Segment: "a", Size: -1}} }, "size -1"},
		{"anomaly segment", func(w *world) { w.in.Reports[0].Facts = []Fact{{Segment: "../x"}} }, "starts with a dot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(3, 3, seg("a", 1, 2, 3))
			tc.mod(w)
			var err error
			if strings.HasPrefix(tc.name, "report") || strings.HasPrefix(tc.name, "anomaly") {
				err = w.in.Reports[0].Validate()
			} else {
				var p Planner
				_, err = p.Plan(w.input())
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
}

// Anomalies for leftover copies (a broker outside the set), unknown
// segments, unknown brokers and duplicates do not confuse the pass.
func TestLeftoverAndUnknownAnomalies(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3))
	w.anomaly(4, "a", Short, 1, false)    // 4 holds no replica of a
	w.anomaly(1, "zz", Missing, 0, false) // no such segment
	w.anomaly(2, "a", Overrun, 1040, false)
	w.anomaly(2, "a", Latched, 0, false) // the more severe wins
	w.in.Reports = append(w.in.Reports, ProbeReport{Broker: 77, Facts: []Fact{{Segment: "a", Flags: FactMissing}}})
	got := ops(w.plan())
	if got != "replace_latched_copy a 4<-1\nset_replicas a [1 2 3]->[1 3 4]\ndelete_dropped_copy a 2\n" {
		t.Errorf("plan:\n%s", got)
	}
}

// A set larger than the factor (the factor was lowered) whose lost replica
// is surplus: it moves behind, and nothing is reported failed.
func TestSurplusLostReplica(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3, 4)).dead(1)
	p := w.plan()
	if got := ops(p); got != "set_replicas a [1 2 3 4]->[2 3 4 1]\n" || len(p.Report.Failed) != 0 {
		t.Errorf("plan:\n%s", got)
	}
}

// The plan and report travel as JSON (the CLI's dry run, /status).
func TestPlanJSONRoundTrip(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3)).anomaly(1, "a", Latched, 0, false).anomaly(2, "b", Overrun, 1040, false)
	p := w.plan()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"op":"replace_latched_copy"`, `"op":"settle_overrun"`, `"unsettled":[{"segment":"b","broker":2}]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	var q Plan
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	if q.String() != p.String() {
		t.Errorf("round trip:\n%s\nwant:\n%s", q, p)
	}
	var r ProbeReport
	a := seg("a", 1, 2, 3)
	if err := json.Unmarshal([]byte(`{"broker":3,"facts":[{"s":"a","n":5}]}`), &r); err != nil || Classify(&a, &r.Facts[0]).Kind != Short {
		t.Errorf("probe report: %+v %v", r, err)
	}
	r = ProbeReport{}
	err = json.Unmarshal([]byte(`{"broker":3,"facts":[{"s":"a","f":128}]}`), &r)
	if err == nil {
		err = r.Validate()
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown kind: %v", err)
	}
}

// A new replica's backfill that failed because its source died meanwhile
// (the source answers no probe of the next pass) does not take the
// target out of placement: when it is the only spare, avoiding it reports
// no_spare_broker for AvoidPasses passes (the demo's backfill-kill stage,
// 3 live brokers of 5 at RF 3, healed 40 of 251 segments in 90 s that
// way). A failure while the source still answers
// avoids the target as before.
func TestFailedBackfillFromADeadSourceAvoidsNoTarget(t *testing.T) {
	for _, sourceAnswers := range []bool{false, true} {
		w := newWorld(5, 3, seg("a", 1, 2, 5)).dead(5)
		if !sourceAnswers {
			w.dead(1)
		}
		w.in.Policy.HoldShare = -1
		var p Planner
		plan, st := w.step(t, &p, State{}, t0, nil)
		var failed Outcomes
		failed.Plan = Plan{Index: plan.Index, Actions: []Action{{Op: ReplaceDeadReplica, Segment: seg("a", 1, 2, 5), Target: 3, Source: 1, Replaces: 5}}}
		failed.Of = []Outcome{{Result: Failed, Err: "catchup: transfer cut short: dial source: connection refused"}}
		plan, st = w.step(t, &p, st, t0.Add(time.Second), &failed)
		avoided := slices.ContainsFunc(st.Avoid, func(a Avoidance) bool { return a.Copy == CopyRef{"a", 3} })
		if avoided != sourceAnswers {
			t.Errorf("source answers %v: target 3 avoided %v, want %v; next plan:\n%s", sourceAnswers, avoided, sourceAnswers, ops(plan))
		}
	}
}
