package healrun

import (
	"io"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/catchup"
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
		{Mode: "auto", HealOverLimit: 0.2, RecordsLost: 1}, {Mode: "auto", HealOverLimit: 0.9}, {Mode: "auto", HealOverLimit: 0.5},
		{Mode: "low", HealOverLimit: 0.1},
	}
	ms := Medians(rs)
	if len(ms) != 2 || ms[0].Mode != "auto" || ms[1].Mode != "low" {
		t.Fatalf("medians %+v: want auto then low (the order they first appear)", ms)
	}
	if a := ms[0]; a.HealOverLimit != 0.5 || a.Rounds != 3 || a.RecordsLost != 1 {
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

func TestMeasureLimit(t *testing.T) {
	l, err := MeasureLimit(t.TempDir(), Pattern{Bytes: 3 << 20, Targets: 3, CopyBytes: 512 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if l.Disk <= 0 || l.Loopback <= 0 || l.Rate() != min(l.Disk, l.Loopback) {
		t.Fatalf("limit %+v", l)
	}
	for _, p := range []Pattern{{Bytes: 2, Targets: 3, CopyBytes: 1}, {Bytes: 10, Targets: 0, CopyBytes: 1}, {Bytes: 10, Targets: 1}} {
		if _, err := MeasureLimit(t.TempDir(), p); err == nil || !strings.Contains(err.Error(), "want at least a byte per target") {
			t.Errorf("limit of %+v: %v", p, err)
		}
	}
}

// A heal above its limit is an error naming both figures, never a ratio
// above 1.
func TestLimitCheck(t *testing.T) {
	l := Limit{Disk: 900e6, Loopback: 2000e6}
	if err := l.Check(900e6); err != nil {
		t.Fatalf("a heal at its limit: %v", err)
	}
	err := l.Check(1000e6)
	if err == nil || !strings.Contains(err.Error(), "1000 MB/s") || !strings.Contains(err.Error(), "limit of 900 MB/s") {
		t.Fatalf("a heal above its limit: %v", err)
	}
}

// countFS is an in-memory limitFS that records, per file, the bytes
// written and the fdatasyncs, and the order of what happened to it.
type countFS struct {
	mu    sync.Mutex
	files map[string]*countFile
}

type countFile struct {
	fs     *countFS
	size   int64
	events []string // "write", "datasync", "close"
}

func (fs *countFS) Create(path string) (limitFile, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := &countFile{fs: fs}
	fs.files[path] = f
	return f, nil
}

func (fs *countFS) Remove(string) error { return nil }

func (f *countFile) note(e string) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if n := len(f.events); e != "write" || n == 0 || f.events[n-1] != "write" {
		f.events = append(f.events, e)
	}
}

func (f *countFile) WriteAt(b []byte, off int64) (int, error) {
	f.note("write")
	f.fs.mu.Lock()
	f.size = max(f.size, off+int64(len(b)))
	f.fs.mu.Unlock()
	return len(b), nil
}
func (f *countFile) ReadAt([]byte, int64) (int, error) { return 0, io.EOF }
func (f *countFile) Fd() uintptr                       { return ^uintptr(0) } // fallocate fails: best effort
func (f *countFile) Datasync() error                   { f.note("datasync"); return nil }
func (f *countFile) Close() error                      { f.note("close"); return nil }

// The disk half of the limit writes each target's share as copies of the
// pattern's size and ends each with exactly one fdatasync, after its last
// write and before its close, with the write-behind's windows started as
// catch-up starts them.
func TestLimitWritesLikeCatchup(t *testing.T) {
	fs := &countFS{files: map[string]*countFile{}}
	var wb atomic.Int64
	w := diskPattern(fs, func(_ catchup.File, off, n int64, wait bool) error { wb.Add(1); return nil })
	p := Pattern{Bytes: 2*(20<<20) + 1, Targets: 2, CopyBytes: 9 << 20}
	if _, err := w.rate(t.TempDir(), p); err != nil {
		t.Fatal(err)
	}
	// Writer 0: 20 MiB + 1 in copies of 9, 9 and 2 MiB + 1; writer 1: 9, 9, 2 MiB.
	sizes := map[string]int64{}
	var total int64
	for path, f := range fs.files {
		sizes[filepath.Base(path)] = f.size
		total += f.size
		if got := strings.Join(f.events, " "); got != "write datasync close" {
			t.Errorf("%s: %s, want its writes, one fdatasync, then close", path, got)
		}
	}
	want := map[string]int64{"limit-disk-0-0": 9 << 20, "limit-disk-0-1": 9 << 20, "limit-disk-0-2": 2<<20 + 1,
		"limit-disk-1-0": 9 << 20, "limit-disk-1-1": 9 << 20, "limit-disk-1-2": 2 << 20}
	if !maps.Equal(sizes, want) || total != p.Bytes {
		t.Fatalf("copies %v, want %v", sizes, want)
	}
	// A 9 MiB copy starts one 8 MiB window and its tail, a 2 MiB one its
	// tail only: 4 copies x 2 + 2 x 1.
	if wb.Load() != 10 {
		t.Fatalf("%d writeback calls, want 10", wb.Load())
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
