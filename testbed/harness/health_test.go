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
		return &View{Snap: meta.Snapshot{Index: 10}, Status: raw}
	}
	for _, tc := range []struct {
		r    heal.Report
		want string
	}{
		{heal.Report{Index: 10}, ""},
		{heal.Report{Index: 9}, "metadata at 10"},
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
