package healrun

import (
	"strings"
	"testing"
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
