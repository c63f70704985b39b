package demo

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/admin"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
)

func seg(id meta.SegmentID, replicas ...meta.BrokerID) meta.Segment {
	return meta.Segment{ID: id, Length: 1, ByteSize: 100, Sealed: true, Checksum: meta.CRC32C(1), Replicas: replicas}
}

func intact(id meta.SegmentID) admin.Copy {
	return admin.Copy{ID: id, Size: 100 + store.FooterSize, Sealed: true}
}

func TestEvaluate(t *testing.T) {
	v := &harness.View{
		Snap: meta.Snapshot{ReplicationFactor: 3, Segments: []meta.Segment{
			seg("healthy", 1, 2, 3),
			seg("dead-replica", 1, 2, 4),
			seg("short-set", 1, 2),
			seg("missing", 1, 2, 3),
			seg("latched", 1, 2, 3),
			seg("short-copy", 1, 2, 3),
			seg("overrun", 1, 2, 3),
			seg("lost", 4, 5, 6),
			seg("lost-but-orphan", 4, 5, 6),
			{ID: "active", Replicas: []meta.BrokerID{1, 2, 3}},
		}},
		Copies: map[meta.BrokerID]map[meta.SegmentID]admin.Copy{},
	}
	for _, b := range []meta.BrokerID{1, 2, 3} {
		m := map[meta.SegmentID]admin.Copy{}
		for _, s := range v.Snap.Segments {
			if s.Sealed && s.HasReplica(b) {
				m[s.ID] = intact(s.ID)
			}
		}
		v.Copies[b] = m
	}
	delete(v.Copies[3], "missing")
	v.Copies[2]["latched"] = admin.Copy{ID: "latched", Size: 140, Sealed: true, Latched: true}
	v.Copies[1]["short-copy"] = admin.Copy{ID: "short-copy", Size: 60}
	v.Copies[3]["overrun"] = admin.Copy{ID: "overrun", Size: 4000, Sealed: true}
	v.Copies[1]["lost-but-orphan"] = intact("lost-but-orphan") // broker 1 is outside the set
	live := map[meta.BrokerID]bool{1: true, 2: true, 3: true}
	e := harness.Evaluate(v, 3, live, func(_ meta.BrokerID, s meta.Segment, lc admin.Copy, listed bool) string {
		return harness.CheckCopy(s, lc, listed)
	})
	if e.Sealed != 9 || e.Healthy != 1 {
		t.Fatalf("sealed %d healthy %d: %+v", e.Sealed, e.Healthy, e)
	}
	if e.UnderReplicated != 4 || e.Damaged != 4 || e.DataLoss != 1 {
		t.Fatalf("under %d damaged %d loss %d: %v", e.UnderReplicated, e.Damaged, e.DataLoss, e.Unhealthy)
	}
	for id, want := range map[meta.SegmentID]string{
		"dead-replica": "replica on dead broker 4",
		"short-set":    "2 replicas, replication factor 3",
		"missing":      "copy on broker 3: missing",
		"latched":      "copy on broker 2: latched",
		"short-copy":   "copy on broker 1: short: 60 of 140 bytes",
		"overrun":      "overrun: 4000 bytes",
		"lost":         "dead broker 4",
	} {
		if !strings.Contains(e.Unhealthy[id], want) {
			t.Errorf("%s: %q, want %q", id, e.Unhealthy[id], want)
		}
	}
	if _, bad := e.Unhealthy["healthy"]; bad || e.OK() {
		t.Errorf("healthy segment flagged or OK with damage: %v", e.Unhealthy)
	}
	// A broker that did not answer cannot vouch for its copies.
	delete(v.Copies, 2)
	e = harness.Evaluate(v, 3, live, func(_ meta.BrokerID, s meta.Segment, lc admin.Copy, listed bool) string {
		return harness.CheckCopy(s, lc, listed)
	})
	if !strings.Contains(e.Unhealthy["healthy"], "broker 2 did not list its copies") {
		t.Errorf("unanswered broker: %q", e.Unhealthy["healthy"])
	}
}

// The CLI's mirror decodes what the plugin really serves.
func TestDecodeStatusOfPlugin(t *testing.T) {
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	st := plugin.Status{Broker: 3, Enabled: true, Leader: true, ProbeEngine: "uring", FsyncEngine: "syscall", Passes: 42,
		LastPass: &heal.Report{Index: 77, Sealed: 10, UnderReplicated: 2, Dead: []meta.BrokerID{4}, BytesCopied: 1234,
			Failed:    []heal.Failure{{Segment: "s-1", Reason: heal.NoSpareBroker, Copies: []meta.BrokerID{2}}},
			Unsettled: []heal.CopyRef{{Segment: "s-2", Broker: 1}}},
		LastPassAt: at, LastPassSeconds: 0.5, Hold: ""}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := admin.DecodeStatus(raw)
	if !ok || got.Broker != 3 || got.Passes != 42 || got.ProbeEngine != "uring" || got.LastPass == nil {
		t.Fatalf("admin.DecodeStatus: %+v, %v\n%s", got, ok, raw)
	}
	r := got.LastPass
	if r.Index != 77 || r.UnderReplicated != 2 || len(r.Dead) != 1 || r.Dead[0] != 4 || r.BytesCopied != 1234 ||
		len(r.Failed) != 1 || r.Failed[0].Reason != heal.NoSpareBroker || len(r.Unsettled) != 1 {
		t.Fatalf("report: %+v", r)
	}
	rep, started, passes, ok := admin.LastPass(raw)
	if !ok || rep.Index != 77 || passes != 42 || !started.Equal(at.Add(-500*time.Millisecond)) {
		t.Fatalf("admin.LastPass: %v %v %d %v", rep.Index, started, passes, ok)
	}
	if _, ok := admin.DecodeStatus(json.RawMessage(`{"heal":"disabled"}`)); ok {
		t.Fatal("a disabled plugin decoded as enabled")
	}
	if _, _, _, ok := admin.LastPass(json.RawMessage(`{"heal":"disabled"}`)); ok {
		t.Fatal("a disabled plugin has a last pass")
	}
}
