package plugin

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/pace"
	"github.com/malachi-log/malachi/psi"
)

// fakePSI returns p and err.
type fakePSI struct {
	p   psi.Pressure
	err error
}

func (f *fakePSI) Read() (psi.Pressure, error) { return f.p, f.err }

// fakeLatency returns p99 (known when ok) and records the since it was
// asked for.
type fakeLatency struct {
	p99   time.Duration
	ok    bool
	since []time.Time
}

func (f *fakeLatency) P99(since time.Time) (time.Duration, bool) {
	f.since = append(f.since, since)
	return f.p99, f.ok
}

// pacerFixture is a pacer over fakes, on a clock that advances one second
// per step, with a throttle that only records its rates.
type pacerFixture struct {
	p     *pacer
	psi   *fakePSI
	lat   *fakeLatency
	moved int64
	rates []int64
	clock time.Time
	logs  bytes.Buffer
}

func newPacerFixture(t *testing.T, cfg Config) *pacerFixture {
	f := &pacerFixture{psi: &fakePSI{}, lat: &fakeLatency{}, clock: time.Unix(1e9, 0)}
	f.p = &pacer{cfg: paceConfig(cfg), psi: f.psi, lat: f.lat,
		setRate: func(r int64) error { f.rates = append(f.rates, r); return nil },
		moved:   func() int64 { return f.moved },
		now:     func() time.Time { f.clock = f.clock.Add(paceEvery); return f.clock },
		log:     zerolog.New(&f.logs), metrics: newMetrics(prometheus.NewRegistry())}
	if err := f.p.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

// step runs one step during which catch-up moved n bytes.
func (f *pacerFixture) step(n int64) int64 {
	f.moved += n
	f.p.step()
	return f.rates[len(f.rates)-1]
}

func (f *pacerFixture) reason(t *testing.T) string {
	t.Helper()
	var got []string
	for _, r := range paceReasons {
		if testutil.ToFloat64(f.p.metrics.pace.reason.WithLabelValues(r)) == 1 {
			got = append(got, r)
		}
	}
	if len(got) != 1 {
		t.Fatalf("reason gauges at 1: %v, want exactly one", got)
	}
	return got[0]
}

// With no signal at all (no latency source, no PSI), auto starts a heal
// at 32 MiB/s and doubles each second to no cap, so a long catch-up runs
// as it did before auto existed.
func TestPacerNoSignalIsUncapped(t *testing.T) {
	f := newPacerFixture(t, validConfig(t))
	f.p.lat = nil
	for i, want := range []int64{64 << 20, 128 << 20, 256 << 20, 512 << 20, 0, 0} {
		if r := f.step(64 << 20); r != want {
			t.Fatalf("step %d: rate %d with no signal, want %d (0: no cap)", i+1, r, want)
		}
	}
	if f.reason(t) != "none" || testutil.ToFloat64(f.p.metrics.pace.rate) != 0 || f.p.status().BytesPerSecond != 0 {
		t.Fatalf("reason %s, rate gauge %v, status %+v", f.reason(t), testutil.ToFloat64(f.p.metrics.pace.rate), f.p.status())
	}
}

// Client latency above 1.5× its idle baseline while catch-up moves bytes
// halves what moved; held there, the rate falls to the floor, the floor
// gauge counts the seconds, and a quiet client lets it climb back.
func TestPacerLatency(t *testing.T) {
	f := newPacerFixture(t, validConfig(t))
	f.lat.p99, f.lat.ok = 20*time.Millisecond, true
	f.step(0) // idle: the baseline is 20 ms
	f.step(0)
	if st := f.p.status(); st.BaselineP99Seconds != 0.02 {
		t.Fatalf("baseline %v, want 20ms", st.BaselineP99Seconds)
	}
	if got := f.lat.since[1]; !got.Equal(time.Unix(1e9+2, 0).Add(-latencyWindow)) {
		t.Fatalf("second P99 (at %v) asked since %v, want latencyWindow before it", time.Unix(1e9+2, 0), got)
	}
	f.lat.p99 = 50 * time.Millisecond
	if r := f.step(100 << 20); r != 32<<20 || f.reason(t) != "latency" {
		t.Fatalf("rate %d (%s) after one slow second, want it held at the 32 MiB/s start (latency)", r, f.reason(t))
	}
	if r := f.step(100 << 20); r != 16<<20 || f.reason(t) != "latency" {
		t.Fatalf("rate %d (%s) after a second slow second with p99 2.5x the baseline, want %d (latency)", r, f.reason(t), 16<<20)
	}
	if n := testutil.ToFloat64(f.p.metrics.pace.cuts.WithLabelValues("latency")); n != 1 {
		t.Fatalf("%v latency cuts counted, want 1", n)
	}
	cutAt := f.clock
	f.step(1 << 20)
	if got := f.lat.since[len(f.lat.since)-1]; !got.Equal(cutAt) {
		t.Fatalf("the P99 after a latency cut at %v asked since %v, want the cut: its own seconds are not judged again", cutAt, got)
	}
	for range 40 {
		f.step(1 << 20)
	}
	floor := DefaultConfig().BackfillFloorBytesPerSecond
	if r := f.rates[len(f.rates)-1]; r != floor {
		t.Fatalf("rate %d after 40 slow steps, want the floor %d", r, floor)
	}
	held := testutil.ToFloat64(f.p.metrics.pace.floorSeconds)
	if held < 10 || held != f.p.status().FloorSeconds || testutil.ToFloat64(f.p.metrics.pace.rate) != float64(floor) {
		t.Fatalf("floor seconds %v (status %v), rate gauge %v", held, f.p.status().FloorSeconds, testutil.ToFloat64(f.p.metrics.pace.rate))
	}
	f.lat.p99 = 20 * time.Millisecond
	// Below the rate the last cut was made at (here the start rate, the
	// least a cut remembers), an active step closes half the gap.
	want := floor + (pace.DefaultConfig().Start-floor)/2
	if r := f.step(1 << 20); r != want || f.reason(t) != "none" || testutil.ToFloat64(f.p.metrics.pace.floorSeconds) != 0 {
		t.Fatalf("rate %d (%s) once clients are quiet, want %d (none) and floor seconds 0", r, f.reason(t), want)
	}
}

// io or cpu pressure halves an active catch-up; PSI that cannot be read
// is ignored and logged once, not every second.
func TestPacerPressure(t *testing.T) {
	f := newPacerFixture(t, validConfig(t))
	f.p.lat = nil
	f.step(0) // the first step has no interval to measure what moved
	f.psi.p = psi.Pressure{IO: psi.Resource{Known: true, Some: psi.Line{Avg10: 75}}}
	if r := f.step(20 << 20); r != 10<<20 || f.reason(t) != "pressure" {
		t.Fatalf("rate %d (%s) under io pressure after 20 MiB in a second, want half of what moved, %d (pressure)", r, f.reason(t), 10<<20)
	}
	f.psi.p, f.psi.err = psi.Pressure{}, errors.New("psi: /proc/pressure/io: line 1 (some): avg10 = \"x\": want a percentage")
	for range 3 {
		f.step(40 << 20)
	}
	if f.reason(t) != "none" || strings.Count(f.logs.String(), "pressure (PSI) unreadable") != 1 {
		t.Fatalf("reason %s; logs %q: want the PSI error once", f.reason(t), f.logs.String())
	}
}

// A number pins the rate: no pacer, reason fixed, in the metrics and
// /status.
func TestPaceFixedAndAutoStatus(t *testing.T) {
	cp := newMemCP()
	cp.makePKI(t)
	fixed := startInstance(t, cp, 1, func(c *Config) { c.BackfillBytesPerSecond = "65536" })
	st := fixed.p.Status().BackfillRate
	if fixed.p.pacer != nil || st == nil || *st != (PaceStatus{Mode: "fixed", BytesPerSecond: 65536, Reason: "fixed"}) {
		t.Fatalf("fixed: pacer %v, status %+v", fixed.p.pacer, st)
	}
	if got := fixed.p.engines.throttle.Rate(); got != 65536 || testutil.ToFloat64(fixed.p.metrics.pace.rate) != 65536 ||
		testutil.ToFloat64(fixed.p.metrics.pace.reason.WithLabelValues("fixed")) != 1 {
		t.Fatalf("fixed: throttle at %d, gauges %v", got, testutil.ToFloat64(fixed.p.metrics.pace.rate))
	}
	auto := startInstance(t, cp, 2, nil)
	st = auto.p.Status().BackfillRate
	if auto.p.pacer == nil || st == nil || st.Mode != "auto" || st.Reason == "" {
		t.Fatalf("auto: pacer %v, status %+v", auto.p.pacer, st)
	}
	if r := (pace.Reason(0)).String(); r == "none" {
		t.Fatal("the zero reason must not read as none")
	}
}

// The client latency auto holds catch-up against is in the metrics and
// /status: the last step's p99 and the idle baseline; an active step that
// saw no client request (a broker no client talks to) counts as blind.
func TestPacerSignalReported(t *testing.T) {
	f := newPacerFixture(t, validConfig(t))
	f.lat.p99, f.lat.ok = 4*time.Millisecond, true
	f.step(0)
	f.lat.p99 = 5 * time.Millisecond
	f.step(1 << 20)
	st := f.p.status()
	if st.P99Seconds != 0.005 || st.BaselineP99Seconds != 0.004 || st.BlindSteps != 0 ||
		testutil.ToFloat64(f.p.metrics.pace.p99) != 0.005 || testutil.ToFloat64(f.p.metrics.pace.baseline) != 0.004 {
		t.Fatalf("status %+v, p99 gauge %v, baseline gauge %v: want 5 ms, 4 ms, no blind step", st,
			testutil.ToFloat64(f.p.metrics.pace.p99), testutil.ToFloat64(f.p.metrics.pace.baseline))
	}
	f.lat.ok = false
	f.step(0) // idle without requests: not blind
	f.step(1 << 20)
	f.step(1 << 20)
	st = f.p.status()
	if st.P99Seconds != 0 || st.BlindSteps != 2 || testutil.ToFloat64(f.p.metrics.pace.blind) != 2 || testutil.ToFloat64(f.p.metrics.pace.p99) != 0 {
		t.Fatalf("status %+v, blind counter %v, p99 gauge %v: want no p99 and 2 blind steps", st,
			testutil.ToFloat64(f.p.metrics.pace.blind), testutil.ToFloat64(f.p.metrics.pace.p99))
	}
	if !strings.Contains(f.logs.String(), `"message":"backfill pace"`) {
		t.Fatalf("no pace step logged: %s", f.logs.String())
	}
}

// heal.backfill_background reaches the catch-up throttle: on by default,
// off when the config says false.
func TestBackfillBackgroundConfig(t *testing.T) {
	cp := newMemCP()
	cp.makePKI(t)
	on := startInstance(t, cp, 1, nil)
	off := startInstance(t, cp, 2, func(c *Config) { c.BackfillBackground = false })
	if !on.p.engines.throttle.Limits().Background || off.p.engines.throttle.Limits().Background {
		t.Fatalf("throttle Background: default %v, with backfill_background = false %v: want true, false",
			on.p.engines.throttle.Limits().Background, off.p.engines.throttle.Limits().Background)
	}
	var c Config
	if _, err := toml.Decode("backfill_background = false\n", &c); err != nil || c.BackfillBackground {
		t.Fatalf("decoding backfill_background = false: %v, %v", c.BackfillBackground, err)
	}
}

// Under "auto" with the target scope a broker's rate paces the copies it
// receives, and what it sends goes through a throttle of its own without a
// byte cap (each copy is paced by its target): a pacer cut never holds
// back the copies a busy broker sends. The target scope is the default;
// the broker scope and a pinned rate keep one throttle for both
// directions.
func TestBackfillAutoScope(t *testing.T) {
	cp := newMemCP()
	cp.makePKI(t)
	target := startInstance(t, cp, 1, nil)
	broker := startInstance(t, cp, 2, func(c *Config) { c.BackfillAutoScope = AutoScopeBroker })
	pinned := startInstance(t, cp, 3, func(c *Config) { c.BackfillBytesPerSecond = "65536" })
	e := &target.p.engines
	if e.send == nil || e.sendThrottle() == e.throttle || e.send.Rate() != 0 || e.send.Limits().MaxTransfers != e.throttle.Limits().MaxTransfers {
		t.Fatalf("target scope: send throttle %v (rate %d): want one of its own, uncapped, with the receive throttle's slots", e.send, e.send.Rate())
	}
	if target.p.pacer.beside == nil {
		t.Fatal("target scope: the pacer does not count what the broker sends")
	}
	for name, in := range map[string]*instance{"broker scope": broker, "pinned": pinned} {
		if e := &in.p.engines; e.send != nil || e.sendThrottle() != e.throttle {
			t.Fatalf("%s: a send throttle of its own", name)
		}
	}
	if broker.p.pacer.beside != nil {
		t.Fatal("broker scope: bytes beside the rate counted")
	}
}

// The pacer passes what catch-up sent beside its rate to the controller:
// a second of sending only, with the clients' p99 high, neither grows the
// rate nor teaches the baseline.
func TestPacerBeside(t *testing.T) {
	f := newPacerFixture(t, validConfig(t))
	var sent int64
	f.p.beside = func() int64 { return sent }
	f.lat.p99, f.lat.ok = 10*time.Millisecond, true
	f.step(0)
	f.step(0) // idle: the baseline is 10 ms
	f.lat.p99 = 40 * time.Millisecond
	sent += 200 << 20
	if r := f.step(0); r != 32<<20 || f.p.status().BaselineP99Seconds != 0.01 {
		t.Fatalf("after a second of sending only at 4x the idle p99: rate %d, baseline %v; want the start rate held and the baseline 10 ms",
			r, f.p.status().BaselineP99Seconds)
	}
	if !strings.Contains(f.logs.String(), `"beside":209715200`) {
		t.Fatalf("the step that only sent was not logged with what it sent: %s", f.logs.String())
	}
}
