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
		{Mode: "auto", HealOverLimit: 0.2, RecordsLost: 1, HealSeconds: 30, HealBytes: 900}, {Mode: "auto", HealOverLimit: 0.9, HealSeconds: 10, HealBytes: 1000},
		{Mode: "auto", HealOverLimit: 0.5, HealSeconds: 20, HealBytes: 1100},
		{Mode: "low", HealOverLimit: 0.1},
	}
	ms := Medians(rs)
	if len(ms) != 2 || ms[0].Mode != "auto" || ms[1].Mode != "low" {
		t.Fatalf("medians %+v: want auto then low (the order they first appear)", ms)
	}
	if a := ms[0]; a.HealOverLimit != 0.5 || a.Rounds != 3 || a.RecordsLost != 1 {
		t.Fatalf("auto's medians %+v: want 0.5x over 3 rounds, 1 lost (summed)", a)
	}
	if a := ms[0]; a.HealSeconds != 20 || a.HealBytes != 1000 {
		t.Fatalf("auto's time to heal a broker: %.0f s for %.0f bytes, want the medians 20 s, 1000 bytes", a.HealSeconds, a.HealBytes)
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
	// Measured again at another moment, the best of each half is kept.
	if b := l.Best(Limit{Disk: 1200e6, Loopback: 1500e6}); b != (Limit{Disk: 1200e6, Loopback: 2000e6}) || b.Check(1000e6) != nil {
		t.Fatalf("best of two: %+v", b)
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

// R* is, per round, the fastest fixed heal whose clients stayed within
// 1.5x idle; auto never sets it; a round where no fixed rate qualifies has
// none, and its ratios are 0, not infinite.
func TestFrontier(t *testing.T) {
	modes := []Mode{{Name: "8MiB/s", Rate: "8388608"}, {Name: "64MiB/s", Rate: "67108864"}, {Name: "unthrottled", Rate: "0"}, {Name: "auto", Rate: autoRate}}
	rs := []Result{
		{Round: 1, Mode: "8MiB/s", HealBytesPerSecond: 12e6, ClientP99HealingOverIdle: 1.05},
		{Round: 1, Mode: "64MiB/s", HealBytesPerSecond: 90e6, ClientP99HealingOverIdle: 1.5},
		{Round: 1, Mode: "unthrottled", HealBytesPerSecond: 400e6, ClientP99HealingOverIdle: 2.4},
		{Round: 1, Mode: "auto", HealBytesPerSecond: 120e6, ClientP99HealingOverIdle: 1.2},
		{Round: 2, Mode: "auto", HealBytesPerSecond: 80e6, ClientP99HealingOverIdle: 1.4},
		{Round: 2, Mode: "8MiB/s", HealBytesPerSecond: 12e6, ClientP99HealingOverIdle: 1.6},
		{Round: 2, Mode: "64MiB/s", HealBytesPerSecond: 90e6, ClientP99HealingOverIdle: 1.7},
	}
	for i := range rs {
		rs[i].ClientP99IdleMs = 13
	}
	// A fixed heal within 1.5x of an idle window that a stall disturbed
	// (40 ms against the round's median 13) draws no frontier.
	rs = append(rs, Result{Round: 1, Mode: "unthrottled", HealBytesPerSecond: 900e6, ClientP99HealingOverIdle: 0.5, ClientP99IdleMs: 40})
	fs := SetFrontier(rs, FixedIn(modes))
	if !rs[len(rs)-1].IdleDisturbed || rs[0].IdleDisturbed {
		t.Fatalf("disturbed: %v, %v; want only the 40 ms idle window", rs[len(rs)-1].IdleDisturbed, rs[0].IdleDisturbed)
	}
	if len(fs) != 2 || fs[0].Mode != "64MiB/s" || fs[0].RateBytesPerSecond != 90e6 || fs[1].Mode != "" || fs[1].RateBytesPerSecond != 0 {
		t.Fatalf("frontiers %+v: want 64MiB/s's 90 MB/s in round 1 (auto and unthrottled out), none in round 2", fs)
	}
	if r := rs[3]; r.FrontierRateBytesPerSecond != 90e6 || r.HealOverFrontier != 120e6/90e6 {
		t.Fatalf("auto in round 1: %+v", r)
	}
	if r := rs[4]; r.FrontierRateBytesPerSecond != 0 || r.HealOverFrontier != 0 {
		t.Fatalf("auto in a round without R*: %+v", r)
	}
	s := Summarize(rs, modes)
	if s.AutoGoalMet || !strings.Contains(s.AutoGoal, "not judged (2 rounds") {
		t.Fatalf("two rounds judged: %s", s.AutoGoal)
	}
	var b strings.Builder
	s.Write(&b)
	if !strings.Contains(b.String(), "round 2: no fixed rate") || !strings.Contains(b.String(), "unthrottled's idle p99 (40.0 ms)") || !strings.Contains(b.String(), "round 1: R* 90.0 MB/s (64MiB/s") {
		t.Fatalf("summary:\n%s", b.String())
	}
}

// Over three rounds auto meets the goal only with both halves: p99 within
// 1.5x idle and at least 0.8x R* (medians), nothing lost.
func TestAutoGoal(t *testing.T) {
	modes := []Mode{{Name: "64MiB/s", Rate: "67108864"}, {Name: "auto", Rate: autoRate}}
	round := func(n int, autoRate, autoP99 float64) []Result {
		return []Result{{Round: n, Mode: "64MiB/s", HealBytesPerSecond: 100e6, ClientP99HealingOverIdle: 1.4},
			{Round: n, Mode: "auto", HealBytesPerSecond: autoRate, ClientP99HealingOverIdle: autoP99}}
	}
	for _, c := range []struct {
		rate, p99 float64
		met       bool
	}{{85e6, 1.45, true}, {70e6, 1.45, false}, {90e6, 1.6, false}} {
		var rs []Result
		for n := 1; n <= 3; n++ {
			rs = append(rs, round(n, c.rate, c.p99)...)
		}
		if s := Summarize(rs, modes); s.AutoGoalMet != c.met || s.FrontierRateBytesPerSecond != 100e6 {
			t.Errorf("auto at %.0f MB/s, %.2fx idle: %s (R* %.0f)", c.rate/1e6, c.p99, s.AutoGoal, s.FrontierRateBytesPerSecond)
		}
	}
}

func TestParseModes(t *testing.T) {
	ms, err := ParseModes("0, 170000000/foreground+max_transfers_per_broker=2,auto")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0].Rate != "0" || !ms[0].Fixed() || ms[2].Fixed() || ms[0].Capped() || !ms[1].Capped() || ms[2].Capped() ||
		ms[1].Extra != "max_transfers_per_broker = 2\nbackfill_background = false\n" || ms[1].Name != "170000000/foreground+max_transfers_per_broker=2" {
		t.Fatalf("modes %+v", ms)
	}
	if ms, _ := ParseModes(""); len(ms) < 7 {
		t.Fatalf("the default frontier has %d modes: want five fixed rates or more, unthrottled and auto", len(ms))
	}
	if _, err := ParseModes("fast"); err == nil || !strings.Contains(err.Error(), `"fast"`) {
		t.Fatalf("fast: %v", err)
	}
	if o := RoundOrder(Modes, 2); o[0].Name != Modes[1].Name || o[len(o)-1].Name != Modes[0].Name || len(o) != len(Modes) {
		t.Fatalf("round 2's order %v", o)
	}
}

// Ramp finds the first moment the rate over the last RampSpan reached
// RampShare of the mean, from the heal's start; never, when it did not.
func TestRamp(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int, mb int64) ArrivedSample {
		return ArrivedSample{At: t0.Add(time.Duration(s) * time.Second), Bytes: mb << 20}
	}
	// 10, 20, 40, 80, 80, 80 MiB/s from second 1: 0.8 of a mean of 80
	// MiB/s over two seconds is first reached at second 6 ((40+80)/2 is
	// short at 5), 5 s after a start at second 1.
	samples := []ArrivedSample{at(0, 0), at(1, 0), at(2, 10), at(3, 30), at(4, 70), at(5, 150), at(6, 230), at(7, 310)}
	d, ok := Ramp(samples, t0.Add(time.Second), 80<<20)
	if !ok || d != 5*time.Second {
		t.Fatalf("ramp %v, %v: want 5s", d, ok)
	}
	if _, ok := Ramp(samples, t0.Add(time.Second), 200<<20); ok {
		t.Fatal("a mean never reached was reached")
	}
	if _, ok := Ramp(samples[:2], t0, 1); ok {
		t.Fatal("reached with no span of RampSpan")
	}
}

// A window starts at the last reading before bytes began to arrive (above
// the base read before the kill) and is over once the readings span it.
func TestArrivalsWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := &arrivals{}
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for i, s := range []ArrivedSample{{ms(0), 100}, {ms(500), 100}, {ms(1000), 150}} {
		if over := a.add(s, time.Second, 100); over {
			t.Fatalf("over at reading %d (%v)", i, s.At.Sub(t0))
		}
	}
	if !a.add(ArrivedSample{ms(1500), 200}, time.Second, 100) || !a.start.Equal(ms(500)) {
		t.Fatalf("at 1.5 s: over %v, start %v: want over, the start at 500ms", a.over, a.start.Sub(t0))
	}
	if a.add(ArrivedSample{ms(2000), 300}, 0, 100) {
		t.Fatal("over without a window")
	}
}
