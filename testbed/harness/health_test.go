package harness

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
)

func TestPassClean(t *testing.T) {
	mk := func(r heal.Report) *View {
		raw, _ := json.Marshal(plugin.Status{Enabled: true, Passes: 1, LastPass: &r})
		return &View{Snap: meta.Snapshot{Index: 10}, StateSince: 10, Status: raw}
	}
	for _, tc := range []struct {
		r    heal.Report
		want string
	}{
		{heal.Report{Index: 10}, ""},
		{heal.Report{Index: 9}, "state as of 10"},
		{heal.Report{Index: 12, UnderReplicated: 1}, "1 under-replicated"},
		{heal.Report{Index: 12, Failed: []heal.Failure{{Segment: "s", Reason: heal.AllReplicasDead}}}, "all_replicas_dead"},
		{heal.Report{Index: 12, Unsettled: []heal.CopyRef{{Segment: "s", Broker: 1}}}, "not yet confirmed"},
		{heal.Report{Index: 12, HoldReason: "3 brokers lost in 10s"}, "on hold"},
		{heal.Report{Index: 12, Backfills: 1}, "planned 1 backfills"},
		{heal.Report{Index: 12, Commands: 2}, "and 2 commands"},
		{heal.Report{Index: 12, Deferred: 3}, "(3 deferred)"},
	} {
		ok, why := mk(tc.r).PassClean()
		if ok != (tc.want == "") || !strings.Contains(why, tc.want) {
			t.Errorf("%+v: %v %q, want %q", tc.r, ok, why, tc.want)
		}
	}
	if ok, why := (&View{Status: json.RawMessage(`{"heal":"disabled"}`)}).PassClean(); ok || !strings.Contains(why, "no heal report") {
		t.Errorf("no plugin: %v %q", ok, why)
	}
}

// TestStateSince: offset commits (Snapshot.Groups) advance the metadata
// index without changing what heal judges, so a heal pass after the state
// was first seen is current; a segment's change starts the state anew.
func TestStateSince(t *testing.T) {
	var m stateMark
	snap := meta.Snapshot{Index: 10, ReplicationFactor: 3, Segments: []meta.Segment{{ID: "a", Replicas: []meta.BrokerID{1, 2, 3}, Sealed: true}}}
	if got := m.since(snap); got != 10 {
		t.Fatalf("first state at 10: since %d", got)
	}
	committed := snap
	committed.Index, committed.Groups = 14, []meta.GroupOffsets{{Group: "g"}}
	if got := m.since(committed); got != 10 {
		t.Fatalf("an offset commit at 14: since %d, want 10", got)
	}
	raw, _ := json.Marshal(plugin.Status{Enabled: true, Passes: 1, LastPass: &heal.Report{Index: 11}})
	if ok, why := (&View{Snap: committed, StateSince: 10, Status: raw}).PassClean(); !ok {
		t.Fatalf("a pass at 11 of the state as of 10 (metadata at 14 by commits): %s", why)
	}
	moved := committed
	moved.Index = 16
	moved.Segments = []meta.Segment{{ID: "a", Replicas: []meta.BrokerID{1, 2, 4}, Sealed: true}}
	if got := m.since(moved); got != 16 {
		t.Fatalf("a replica set changed at 16: since %d, want 16", got)
	}
	if got := (*stateMark)(nil).since(moved); got != 16 {
		t.Fatalf("no mark: since %d, want the snapshot's index", got)
	}
}
