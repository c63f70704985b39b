package meta

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func modeTable(t *testing.T) *Table {
	t.Helper()
	tb := NewTable(3)
	for id := BrokerID(1); id <= 4; id++ {
		if err := tb.Apply(uint64(id), RegisterBroker{Broker{ID: id, Rack: "r"}}); err != nil {
			t.Fatal(err)
		}
	}
	return tb
}

func TestSetBrokerModeRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	for _, c := range []SetBrokerMode{
		{Broker: 2, Mode: ModeDecommissioning},
		{Broker: 2, Mode: ModeMaintenance, Until: t0.Add(30 * time.Minute), IssuedAt: t0, MaxMaintenance: 1},
		{Broker: 2, Mode: ModeActive},
	} {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if g := got.(SetBrokerMode); g.Broker != c.Broker || g.Mode != c.Mode || !g.Until.Equal(c.Until) || !g.IssuedAt.Equal(c.IssuedAt) || g.MaxMaintenance != c.MaxMaintenance {
			t.Fatalf("round trip %s: got %+v, want %+v", b, g, c)
		}
	}
}

func TestSetBrokerModeValidate(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	for _, bad := range []struct {
		c    SetBrokerMode
		want string
	}{
		{SetBrokerMode{Broker: 0, Mode: ModeActive}, "broker id 0"},
		{SetBrokerMode{Broker: 1}, "no mode"},
		{SetBrokerMode{Broker: 1, Mode: "sleeping"}, `broker mode "sleeping"`},
		{SetBrokerMode{Broker: 1, Mode: ModeMaintenance}, "needs an end time"},
		{SetBrokerMode{Broker: 1, Mode: ModeMaintenance, Until: t0, IssuedAt: t0}, "is not after issued_at"},
		{SetBrokerMode{Broker: 1, Mode: ModeDecommissioning, Until: t0}, "only for maintenance"},
		{SetBrokerMode{Broker: 1, Mode: ModeActive, MaxMaintenance: -1}, "max_maintenance -1"},
	} {
		err := bad.c.Validate()
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: Validate = %v, want ErrInvalid containing %q", bad.c, err, bad.want)
		}
	}
}

// TestSetBrokerModeApply: the mode lands on the broker record and in the
// View; RegisterBroker keeps it; active clears it; an unknown broker and a
// full maintenance quota are refused naming what was wrong, changing nothing.
func TestSetBrokerModeApply(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	tb := modeTable(t)
	if err := tb.Apply(10, SetBrokerMode{Broker: 2, Mode: ModeDecommissioning}); err != nil {
		t.Fatal(err)
	}
	if b, _ := tb.View().Broker(2); !b.Is(ModeDecommissioning) {
		t.Fatalf("broker 2 = %+v, want decommissioning", b)
	}
	// A re-registration (a broker restart) keeps the mode.
	if err := tb.Apply(11, RegisterBroker{Broker{ID: 2, Rack: "r2", RPCAddr: "x:1"}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := tb.View().Broker(2); !b.Is(ModeDecommissioning) || b.Rack != "r2" {
		t.Fatalf("after re-register broker 2 = %+v, want decommissioning in r2", b)
	}
	err := tb.Apply(12, SetBrokerMode{Broker: 9, Mode: ModeDecommissioning})
	if !errors.Is(err, ErrUnknownBroker) || !strings.Contains(err.Error(), "broker 9") {
		t.Fatalf("unknown broker: %v", err)
	}
	m := func(b BrokerID, issued time.Time, d time.Duration) SetBrokerMode {
		return SetBrokerMode{Broker: b, Mode: ModeMaintenance, IssuedAt: issued, Until: issued.Add(d), MaxMaintenance: 1}
	}
	if err := tb.Apply(13, m(3, t0, 30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	before := tb.Snapshot()
	err = tb.Apply(14, m(4, t0.Add(time.Minute), time.Hour))
	if !errors.Is(err, ErrMaintenanceFull) || !strings.Contains(err.Error(), "[3]") || !strings.Contains(err.Error(), "max_maintenance is 1") {
		t.Fatalf("second maintenance: %v", err)
	}
	after := tb.Snapshot()
	after.Index = before.Index
	if a, b := mustJSON(t, before), mustJSON(t, after); a != b {
		t.Fatalf("a refused command changed the table:\n%s\n%s", a, b)
	}
	// Once 3's window has ended (by the issuing clock), 4 may enter.
	if err := tb.Apply(15, m(4, t0.Add(31*time.Minute), time.Hour)); err != nil {
		t.Fatal(err)
	}
	// 3's own window is not counted against itself, but 4's is.
	if err := tb.Apply(16, m(3, t0.Add(32*time.Minute), time.Hour)); !errors.Is(err, ErrMaintenanceFull) {
		t.Fatalf("3 again while 4 is in: %v", err)
	}
	if err := tb.Apply(17, SetBrokerMode{Broker: 4, Mode: ModeActive}); err != nil {
		t.Fatal(err)
	}
	if b, _ := tb.View().Broker(4); b.Mode != "" || !b.Until.IsZero() || !b.Is(ModeActive) {
		t.Fatalf("after cancel broker 4 = %+v, want active with no until", b)
	}
	if err := tb.Apply(18, m(3, t0.Add(33*time.Minute), time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Ended early with an issue time: active, Until records when.
	if err := tb.Apply(19, SetBrokerMode{Broker: 3, Mode: ModeActive, IssuedAt: t0.Add(40 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if b, _ := tb.View().Broker(3); !b.Is(ModeActive) || !b.Until.Equal(t0.Add(40*time.Minute)) || b.InMaintenance(t0.Add(35*time.Minute)) {
		t.Fatalf("broker 3 ended early = %+v, want active with until %v", b, t0.Add(40*time.Minute))
	}
	if err := tb.Apply(20, m(3, t0.Add(41*time.Minute), time.Hour)); err != nil {
		t.Fatal(err)
	}
	if b, _ := tb.View().Broker(3); !b.InMaintenance(t0.Add(time.Hour)) || b.InMaintenance(t0.Add(2*time.Hour)) {
		t.Fatalf("broker 3 = %+v: want in maintenance until %v", b, t0.Add(93*time.Minute))
	}
}

// TestBrokerModeInSnapshot: the mode survives a Snapshot/TableFromSnapshot
// round trip, and a broker record without the fields reads as active.
func TestBrokerModeInSnapshot(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	tb := modeTable(t)
	if err := tb.Apply(9, SetBrokerMode{Broker: 1, Mode: ModeMaintenance, IssuedAt: t0, Until: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(mustJSON(t, tb.Snapshot())), &s); err != nil {
		t.Fatal(err)
	}
	b, _ := TableFromSnapshot(s).View().Broker(1)
	if !b.InMaintenance(t0) || !b.Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("restored broker 1 = %+v", b)
	}
	var old Broker
	if err := json.Unmarshal([]byte(`{"id":5,"rack":"a"}`), &old); err != nil || !old.Is(ModeActive) || old.InMaintenance(t0) {
		t.Fatalf("old record: %+v %v", old, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
