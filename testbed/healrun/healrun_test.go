package healrun

import (
	"strings"
	"testing"
	"time"
)

func TestParseMetrics(t *testing.T) {
	m := ParseMetrics([]byte("# HELP x\nmalachi_heal_backfill_stage_seconds_sum{stage=\"wait\"} 1.5\nplain 3\nbad line\n"))
	if m[`malachi_heal_backfill_stage_seconds_sum{stage="wait"}`] != 1.5 || m["plain"] != 3 || len(m) != 2 {
		t.Fatalf("parsed %v", m)
	}
}

func TestSegmentsFor(t *testing.T) {
	// 512 MiB per broker over 4 brokers at rf 3 in 64 MiB segments:
	// 10.67, rounded up.
	if n := SegmentsFor(512<<20, 64<<20, 4); n != 11 {
		t.Fatalf("SegmentsFor = %d, want 11", n)
	}
}

func TestMediansPerMode(t *testing.T) {
	rs := []Result{
		{Mode: "auto", HealOverFloor: 0.2, RecordsLost: 1}, {Mode: "auto", HealOverFloor: 0.9}, {Mode: "auto", HealOverFloor: 0.5},
		{Mode: "low", HealOverFloor: 0.1},
	}
	ms := Medians(rs)
	if len(ms) != 2 || ms[0].Mode != "low" || ms[1].Mode != "auto" {
		t.Fatalf("medians %+v: want low then auto (the order of Modes)", ms)
	}
	if a := ms[1]; a.HealOverFloor != 0.5 || a.Rounds != 3 || a.RecordsLost != 1 {
		t.Fatalf("auto's medians %+v: want 0.5x over 3 rounds, 1 lost (summed)", a)
	}
	var b strings.Builder
	WriteTable(&b, rs)
	if strings.Count(b.String(), "\n") != 5 {
		t.Fatalf("table:\n%s", b.String())
	}
}

func TestPacingConfigRefusesNothingToMeasure(t *testing.T) {
	cfg := DefaultPacing("malachid", t.TempDir())
	cfg.Brokers = 3
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "3 brokers") {
		t.Fatalf("3 brokers: %v", err)
	}
	cfg = DefaultPacing("malachid", t.TempDir())
	cfg.Producers = 0
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "0 producers") {
		t.Fatalf("0 producers: %v", err)
	}
}

func TestMeasureFloor(t *testing.T) {
	f, err := MeasureFloor(t.TempDir(), 3<<20, 3)
	if err != nil {
		t.Fatal(err)
	}
	if f.Disk <= 0 || f.Loopback <= 0 || f.Rate() != min(f.Disk, f.Loopback) {
		t.Fatalf("floor %+v", f)
	}
	if _, err := MeasureFloor(t.TempDir(), 2, 3); err == nil {
		t.Fatal("a floor of 2 bytes onto 3 targets was measured")
	}
}

func TestSlowSeconds(t *testing.T) {
	killed := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	// Second 2: one of three slow; second 3: none; second 5: two slow.
	lat := []time.Duration{10 * ms, 300 * ms, 12 * ms, 11 * ms, 90 * ms, 60 * ms}
	ats := []time.Time{killed.Add(2100 * ms), killed.Add(2200 * ms), killed.Add(2900 * ms), killed.Add(3500 * ms), killed.Add(5100 * ms), killed.Add(5200 * ms)}
	got := slowSeconds(lat, ats, killed, 50*ms)
	if len(got) != 2 {
		t.Fatalf("slow seconds %+v: want seconds 2 and 5", got)
	}
	if g := got[0]; g.SinceKill != 2 || g.Slow != 1 || g.Acks != 3 || g.MaxMs != 300 || !g.At.Equal(killed.Add(2*time.Second)) {
		t.Errorf("first %+v: want second 2, 1 slow of 3, max 300 ms", g)
	}
	if g := got[1]; g.SinceKill != 5 || g.Slow != 2 || g.Acks != 2 || g.MaxMs != 90 {
		t.Errorf("second %+v: want second 5, 2 slow of 2, max 90 ms", g)
	}
}
