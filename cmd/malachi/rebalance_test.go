package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// TestWriteRebalance: status prints the rebalancer's line from the heal
// report (moves, brokers outside the bound, spreads), says balanced or why
// it waits, and nothing without one; plan names a rebalance move and what
// it replaces.
func TestWriteRebalance(t *testing.T) {
	for _, tc := range []struct {
		rb   *heal.Rebalance
		want string
	}{
		{&heal.Rebalance{Brokers: 5, Outside: 1, Moves: 8, Count: heal.Spread{Min: 0, Mean: 14.4, Max: 18}, Bytes: heal.Spread{Min: 0, Mean: 14 << 20, Max: 18 << 20}},
			"rebalance: 1 of 5 brokers outside 10% of the mean, 8 moves this pass; replicas min/mean/max 0/14.4/18, bytes 0 B/14.0 MiB/18.0 MiB"},
		{&heal.Rebalance{Brokers: 5, Outside: 1, Skipped: heal.RebalanceHealing}, "waiting (healing)"},
		{&heal.Rebalance{Brokers: 4, Balanced: true}, "rebalance: balanced: all 4 brokers within 10% of the mean"},
		{nil, ""},
	} {
		doc, err := json.Marshal(map[string]any{"enabled": true, "broker": 1, "last_pass": heal.Report{Index: 3, Rebalance: tc.rb}})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		writeRebalance(&out, &clusterStatus{Heal: doc})
		if got := out.String(); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("status printed %q, want %q", got, tc.want)
		}
	}
	a := heal.Action{Op: heal.RebalanceReplica, Segment: meta.Segment{ID: "s7"}, Target: 5, Source: 2, Replaces: 1}
	raw, err := json.Marshal(map[string]any{"index": 4, "actions": []heal.Action{a},
		"report": heal.Report{Rebalance: &heal.Rebalance{Brokers: 5, Outside: 1, Moves: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	var p planDoc
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	writePlan(&out, p)
	for _, want := range []string{"rebalance_replica      s7 target=5 source=2 replaces=1", "would rebalance: 1 of 5 brokers outside 10% of the mean, 1 moves this pass"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, out.String())
		}
	}
}
