package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
)

// TestStatusTellsTheTruth: the health counts are the last pass's (never a
// second tally beside it), a stale pass says so with its age, the totals
// since the leader started are printed, a lost quorum is said as such and
// a latched copy comes with the error that latched it.
func TestStatusTellsTheTruth(t *testing.T) {
	at := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	ps := plugin.Status{Broker: 2, Enabled: true, Passes: 40,
		LastPass: &heal.Report{Index: 90, Sealed: 4, UnderReplicated: 1,
			Failed: []heal.Failure{{Segment: "s-00001", Reason: heal.NoIntactSource}}},
		LastPassAt: at, LastPassAge: 95, LastPassStale: "this broker does not lead: the report is from its last term, 1m35s ago",
		Totals: &plugin.Totals{Since: at.Add(-time.Hour), Passes: 40, SegmentsHealed: 7, BytesHealed: 7 << 20, Backfills: 8,
			Failures: map[string]uint64{"no_intact_source": 12}}}
	raw, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	snap := meta.Snapshot{Index: 95, ReplicationFactor: 3, Segments: []meta.Segment{
		seg("s-00000", 1, 2, 3), seg("s-00001", 1, 2, 3), seg("s-00002", 1, 2, 3), seg("s-00003", 1, 2, 3)}}
	st := &clusterStatus{Admin: "127.0.0.1:7002", Index: 95, ReplicationFactor: 3, Heal: raw,
		NoQuorum: "cluster: no quorum: 2 of 5 voters reachable [1 2] within 1.2s, 3 needed",
		Brokers: []brokerState{{ID: 1, Up: true, Copies: 4, Latched: 1, LatchedCopies: []latchedCopy{{Segment: "s-00001", Error: "store: copy latched: s-00001: write: no space left on device"}}},
			{ID: 2, Up: true, BackfillRate: &plugin.PaceStatus{Mode: "auto", BytesPerSecond: 1 << 20, Reason: "latency", FloorSeconds: 95}},
			{ID: 3}}}
	st.count(snap)
	if st.UnderReplicated != 1 || st.Failed != 1 || st.PassIndex != 90 {
		t.Fatalf("counts %+v: want the last pass's (under-replicated 1, failed 1, index 90)", st)
	}
	var out strings.Builder
	writeStatus(&out, st)
	text := out.String()
	for _, want := range []string{
		"NO QUORUM (broker asked): cluster: no quorum: 2 of 5 voters reachable",
		"broker 1: copy s-00001 latched: store: copy latched: s-00001: write: no space left on device",
		"segments: 4 (4 sealed, 0 active) in the metadata at index 95",
		"health (last heal pass, at index 90): under-replicated 1, failed 1, lost 0",
		"(STALE, 1m35s ago: this broker does not lead",
		"under_replicated=1 failed=1",
		"since this leader started at 2026-12-03T15:00:00Z: 40 passes, 7 segments healed, 7.0 MiB backfilled by 8 backfills",
		"by reason (a segment counts once per pass): no_intact_source 12",
		"auto 1.0 MiB/s (latency), at floor 1m35s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
	// Every under-replicated figure printed is the pass's.
	for _, l := range strings.Split(text, "\n") {
		for _, key := range []string{"under-replicated ", "under_replicated="} {
			if i := strings.Index(l, key); i >= 0 && !strings.HasPrefix(l[i+len(key):], "1") {
				t.Errorf("a second under-replicated figure: %q", l)
			}
		}
	}
}
