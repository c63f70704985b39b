package plugin

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// TestTotalsAddUp: the cumulative figures are the sums of the passes'
// reports, failures counted by reason once per pass.
func TestTotalsAddUp(t *testing.T) {
	since := time.Unix(1000, 0)
	tot := newTotals(since)
	tot.add(&heal.Report{Healed: []meta.SegmentID{"a", "b"}, BytesCopied: 100, Backfills: 2,
		Failed: []heal.Failure{{Segment: "c", Reason: heal.NoSpareBroker}}})
	tot.add(&heal.Report{Healed: []meta.SegmentID{"c"}, BytesCopied: 50, Backfills: 1, Settled: []heal.CopyRef{{Segment: "d", Broker: 1}},
		Failed: []heal.Failure{{Segment: "c", Reason: heal.NoSpareBroker}, {Segment: "e", Reason: heal.NoIntactSource}}})
	want := Totals{Since: since, Passes: 2, SegmentsHealed: 3, BytesHealed: 150, Backfills: 3, Settled: 1,
		Failures: map[string]uint64{heal.NoSpareBroker.String(): 2, heal.NoIntactSource.String(): 1}}
	got, _ := json.Marshal(tot)
	w, _ := json.Marshal(want)
	if string(got) != string(w) {
		t.Fatalf("totals %s, want %s", got, w)
	}
	c := tot.clone()
	c.Failures["x"] = 1
	if _, ok := tot.Failures["x"]; ok {
		t.Fatal("clone shares its failures map")
	}
}

// TestStatusTotalsAndStaleness: the leader's status carries the totals
// since its coordinator started and a current last pass; once it no
// longer leads, the last pass is marked stale with why.
func TestStatusTotalsAndStaleness(t *testing.T) {
	cp := newMemCP()
	in := startInstance(t, cp, 1, nil)
	cp.setLeader(true)
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for st := in.p.Status(); !(st.Leader && st.Passes > 1); st = in.p.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("no pass as leader: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := in.p.Status()
	if st.Totals == nil || st.Totals.Passes == 0 || st.Totals.Since.IsZero() || st.Totals.Since.After(time.Now()) {
		t.Fatalf("leader's totals %+v", st.Totals)
	}
	if st.LastPassStale != "" {
		t.Fatalf("the leader's fresh pass is marked stale: %q", st.LastPassStale)
	}
	cp.setLeader(false)
	for st = in.p.Status(); st.Leader; st = in.p.Status() {
		if time.Now().After(deadline) {
			t.Fatal("leadership not lost")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(st.LastPassStale, "does not lead") {
		t.Fatalf("a former leader's last pass: stale %q", st.LastPassStale)
	}
	if got := (Config{Tick: time.Second, ProbeDeadline: 5 * time.Second}).StaleAfter(); got != 30*time.Second {
		t.Fatalf("StaleAfter %v, want the 30s floor", got)
	}
}

// TestPassLogNamesEachKeyOnce: a pass's event lines, under a host logger
// that names the broker (malachid's does), name the broker concerned under
// another key ("broker":1,"broker":2 before).
func TestPassLogNamesEachKeyOnce(t *testing.T) {
	var buf bytes.Buffer
	reg := prometheus.NewRegistry()
	p := &Plugin{log: zerolog.New(&buf).With().Uint32("broker", 1).Logger(), metrics: newMetrics(reg), now: time.Now}
	p.metrics.watchCerts(reg, nil, true)
	p.recordPass(&heal.Report{Events: []heal.Event{{Kind: heal.EventHoldStarted, Segment: "s", Broker: 2}},
		Failed: []heal.Failure{{Segment: "s", Reason: heal.NoSpareBroker}}}, time.Millisecond, 0)
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.Count(line, `"broker":`) != 1 {
			t.Errorf("line names the broker key %d times: %s", strings.Count(line, `"broker":`), line)
		}
	}
	if !strings.Contains(buf.String(), `"peer":2`) {
		t.Errorf("the event's broker is not named: %s", buf.String())
	}
}
