package pace

import (
	"slices"
	"testing"
	"time"
)

const mib = 1 << 20

var (
	lu   = 10 * time.Millisecond                            // a unit of latency, well above LatencyMargin
	idle = Input{P99: 2 * lu, LatencyKnown: true}           // no catch-up, a quiet client p99
	calm = Input{P99: 2 * lu, LatencyKnown: true, Moved: 1} // catch-up, clients unharmed
	slow = Input{P99: 4 * lu, LatencyKnown: true, Moved: 1} // catch-up, p99 twice the baseline
	// severe is catch-up with the p99 at 3.5× the baseline, above
	// SevereFactor.
	severe = Input{P99: 7 * lu, LatencyKnown: true, Moved: 1}
	hot    = Signal{Avg10: 55, Known: true}
	cool   = Signal{Avg10: 3, Known: true}
	known  = State{Baseline: 2 * lu, BaselineKnown: true}
	// primed has seen one slow active step: the next one cuts.
	primed = State{Baseline: 2 * lu, BaselineKnown: true, Slow: 1}
)

func at(rate int64, s State) State { s.Rate = rate; return s }

func with(in Input, f func(*Input)) Input { f(&in); return in }

// Each row is one step from a state with one input.
func TestStep(t *testing.T) {
	capped := DefaultConfig()
	capped.Ceiling = 64 * mib
	for _, c := range []struct {
		name    string
		cfg     Config
		s       State
		in      Input
		rate    int64 // Decision.Rate
		reason  Reason
		atFloor int
	}{
		{"the zero state starts at Start", DefaultConfig(), State{}, Input{}, 32 * mib, None, 0},
		{"the zero state starts at the ceiling when below Start", func() Config { c := capped; c.Ceiling = 16 * mib; return c }(), State{}, Input{}, 16 * mib, None, 0},
		{"no signal: doubles without a ceiling", DefaultConfig(), at(4*mib, known), calm, 8 * mib, None, 0},
		{"no signal: doubling reaches no cap", DefaultConfig(), at(Unbounded/2, known), calm, 0, None, 0},
		{"no signal: adds a step under a ceiling", capped, at(16*mib, known), calm, 24 * mib, None, 0},
		{"idle: held", DefaultConfig(), at(4*mib, known), idle, 4 * mib, None, 0},
		{"idle for IdleReset steps: back to Start", DefaultConfig(), at(4*mib, func() State { s := known; s.Idle, s.Hurt = 9, 2*mib; return s }()), idle, 32 * mib, None, 0},
		{"no signal: stops at the ceiling", capped, at(60*mib, known), calm, 64 * mib, None, 0},
		{"latency spike halves", capped, at(32*mib, primed), slow, 16 * mib, Latency, 0},
		{"latency at exactly the factor is no spike", capped, at(32*mib, known), with(slow, func(in *Input) { in.P99 = 3 * lu }), 40 * mib, None, 0},
		{"latency halves what moved when less than the rate", DefaultConfig(), at(Unbounded, primed),
			with(slow, func(in *Input) { in.Moved, in.Elapsed = 100*mib, time.Second }), 50 * mib, Latency, 0},
		{"latency never below the floor", capped, at(mib+1, primed), slow, mib, Latency, 1},
		{"at the floor, counting", capped, at(mib, func() State { s := primed; s.AtFloor = 7; return s }()), slow, mib, Latency, 8},
		{"one slow step is not a trend: held", capped, at(32*mib, known), slow, 32 * mib, Latency, 0},
		{"one severe step cuts at once", capped, at(32*mib, known), severe, 16 * mib, Latency, 0},
		{"a rise within LatencyMargin of a small baseline is not slow", capped, at(32*mib, State{Baseline: 3 * time.Millisecond, BaselineKnown: true}),
			with(slow, func(in *Input) { in.P99 = 8 * time.Millisecond }), 40 * mib, None, 0},
		{"a severe factor within LatencyMargin is not slow", capped, at(32*mib, State{Baseline: time.Millisecond, BaselineKnown: true}),
			with(slow, func(in *Input) { in.P99 = 6 * time.Millisecond }), 40 * mib, None, 0},
		{"past LatencyMargin a small baseline's rise is slow", capped, at(32*mib, State{Baseline: time.Millisecond, BaselineKnown: true, Slow: 1}),
			with(slow, func(in *Input) { in.P99 = 6*time.Millisecond + 1 }), 16 * mib, Latency, 0},
		{"one step at exactly the severe factor is only slow: held", capped, at(32*mib, known), with(severe, func(in *Input) { in.P99 = 6 * lu }), 32 * mib, Latency, 0},
		{"a severe step in slow start halves what moved", DefaultConfig(), at(128*mib, known),
			with(severe, func(in *Input) { in.Moved, in.Elapsed = 100*mib, time.Second }), 50 * mib, Latency, 0},
		{"a severe step while idle is learned, not obeyed", capped, at(32*mib, known), with(severe, func(in *Input) { in.Moved = 0 }), 32 * mib, None, 0},
		{"a severe step without a baseline is ignored", DefaultConfig(), at(32*mib, State{}), severe, 64 * mib, None, 0},
		{"latency while idle is learned, not obeyed", capped, at(32*mib, known), with(slow, func(in *Input) { in.Moved = 0 }), 32 * mib, None, 0},
		{"latency without a baseline is ignored", capped, at(32*mib, State{}), slow, 40 * mib, None, 0},
		{"unknown latency is ignored", capped, at(32*mib, known), with(slow, func(in *Input) { in.LatencyKnown = false }), 40 * mib, None, 0},
		{"io pressure halves", capped, at(32*mib, known), with(calm, func(in *Input) { in.IO = hot }), 16 * mib, Pressure, 0},
		{"cpu pressure halves", capped, at(32*mib, known), with(calm, func(in *Input) { in.CPU, in.IO = hot, cool }), 16 * mib, Pressure, 0},
		{"pressure while idle holds", capped, at(32*mib, known), with(idle, func(in *Input) { in.IO = hot }), 32 * mib, Pressure, 0},
		{"pressure never below the floor", capped, at(mib, known), with(calm, func(in *Input) { in.CPU = hot }), mib, Pressure, 1},
		{"idle at the floor keeps the count", capped, at(mib, func() State { s := known; s.AtFloor = 3; return s }()),
			with(idle, func(in *Input) { in.CPU = hot }), mib, Pressure, 3},
		{"unavailable PSI is ignored", capped, at(32*mib, known), with(calm, func(in *Input) { in.IO, in.CPU = Signal{Avg10: 99}, Signal{Avg10: 99} }), 40 * mib, None, 0},
		{"pressure below the limit is none", capped, at(32*mib, known), with(calm, func(in *Input) { in.IO, in.CPU = cool, cool }), 40 * mib, None, 0},
		{"pressure that was there while idle does not count", capped, at(32*mib, func() State { s := known; s.IdleCPU = Signal{Avg10: 90, Known: true}; return s }()),
			with(calm, func(in *Input) { in.CPU = Signal{Avg10: 97, Known: true} }), 40 * mib, None, 0},
		{"pressure risen past the idle baseline halves", capped, at(32*mib, func() State { s := known; s.IdleIO = Signal{Avg10: 30, Known: true}; return s }()),
			with(calm, func(in *Input) { in.IO = Signal{Avg10: 51, Known: true} }), 16 * mib, Pressure, 0},
		{"a rise below the limit is none", capped, at(32*mib, func() State { s := known; s.IdleIO = cool; return s }()),
			with(calm, func(in *Input) { in.IO = Signal{Avg10: 39, Known: true} }), 40 * mib, None, 0},
		{"latency before pressure", capped, at(32*mib, primed), with(slow, func(in *Input) { in.IO = hot }), 16 * mib, Latency, 0},
		{"a p99 four times a small baseline but within SevereMargin of it only holds", DefaultConfig(), at(64*mib, State{Baseline: 2 * time.Millisecond, BaselineKnown: true}), with(calm, func(in *Input) { in.P99 = 8 * time.Millisecond }), 64 * mib, Latency, 0},
		{"a p99 more than SevereMargin above a small baseline cuts at once", DefaultConfig(), at(64*mib, State{Baseline: 2 * time.Millisecond, BaselineKnown: true}), with(calm, func(in *Input) { in.P99 = 30 * time.Millisecond }), 32 * mib, Latency, 0},
		{"after a cut, a step closes half the gap to the rate that hurt", DefaultConfig(), at(100*mib, func() State { s := known; s.Hurt = 200 * mib; return s }()), calm, 150 * mib, None, 0},
		{"after a cut, a step closes at least Step of the gap", DefaultConfig(), at(190*mib, func() State { s := known; s.Hurt = 200 * mib; return s }()), calm, 198 * mib, None, 0},
		{"after a cut, a step stops at the rate that hurt", DefaultConfig(), at(196*mib, func() State { s := known; s.Hurt = 200 * mib; return s }()), calm, 200 * mib, None, 0},
		{"after a cut, at the rate that hurt, a step probes a Step above", DefaultConfig(), at(200*mib, func() State { s := known; s.Hurt = 200 * mib; return s }()), calm, 208 * mib, None, 0},
		{"after a cut, above the rate that hurt, the probe doubles its distance", DefaultConfig(), at(216*mib, func() State { s := known; s.Hurt = 200 * mib; return s }()), calm, 232 * mib, None, 0},
		{"after a cut, idle steps hold", DefaultConfig(), at(40*mib, func() State { s := known; s.Hurt = 32 * mib; return s }()), idle, 40 * mib, None, 0},
		{"sending only (paced by the targets): held, not grown", DefaultConfig(), at(4*mib, known), with(calm, func(in *Input) { in.Moved, in.Beside = 0, 64*mib }), 4 * mib, None, 0},
		{"sending only while slow: held, not cut", capped, at(32*mib, primed), with(slow, func(in *Input) { in.Moved, in.Beside = 0, 64*mib }), 32 * mib, None, 0},
		{"sending only for IdleReset steps is no idle: no return to Start", DefaultConfig(), at(4*mib, func() State { s := known; s.Idle, s.Hurt = 9, 2*mib; return s }()),
			with(idle, func(in *Input) { in.Beside = 1 }), 4 * mib, None, 0},
		{"receiving and sending: the receipts' rate grows", DefaultConfig(), at(4*mib, known), with(calm, func(in *Input) { in.Beside = 64 * mib }), 8 * mib, None, 0},
		{"leaving the floor resets the count", capped, at(mib, func() State { s := known; s.AtFloor = 9; return s }()), calm, 9 * mib, None, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			d, s := Step(c.cfg, c.s, c.in)
			if d.Rate != c.rate || d.Reason != c.reason || d.AtFloor != c.atFloor {
				t.Fatalf("Step = {rate %d, %v, at floor %d}, want {rate %d, %v, at floor %d}", d.Rate, d.Reason, d.AtFloor, c.rate, c.reason, c.atFloor)
			}
			if s.Reason != d.Reason || s.AtFloor != d.AtFloor || (d.Rate != 0 && s.Rate != d.Rate) {
				t.Fatalf("state %+v disagrees with decision %+v", s, d)
			}
		})
	}
}

// A cut remembers the rate it was made at (at least the start rate), and
// leaves half of it; a rate the transfers did not reach is cut from what
// they moved.
func TestCutRemembersWhereItHurt(t *testing.T) {
	_, s := Step(DefaultConfig(), at(32*mib, primed), slow)
	if s.Rate != 16*mib || s.Hurt != 32*mib || s.Slow != 0 {
		t.Fatalf("after a latency cut from 32 MiB/s: rate %d, hurt at %d; want 16 MiB/s, 32 MiB/s", s.Rate, s.Hurt)
	}
	_, s = Step(DefaultConfig(), at(32*mib, known), with(calm, func(in *Input) { in.IO = hot }))
	if s.Rate != 16*mib || s.Hurt != 32*mib {
		t.Fatalf("after a pressure cut from 32 MiB/s: rate %d, hurt at %d; want 16 MiB/s, 32 MiB/s", s.Rate, s.Hurt)
	}
	_, s = Step(DefaultConfig(), at(256*mib, primed), with(slow, func(in *Input) { in.Moved, in.Elapsed = 52*mib, time.Second }))
	if s.Rate != 26*mib || s.Hurt != 52*mib {
		t.Fatalf("after a latency cut at 256 MiB/s that moved 52 MiB in a second: rate %d, hurt at %d; want 26 MiB/s, 52 MiB/s", s.Rate, s.Hurt)
	}
	_, s = Step(DefaultConfig(), at(64*mib, primed), with(slow, func(in *Input) { in.Moved, in.Elapsed = 2*mib, time.Second }))
	if s.Rate != 1*mib || s.Hurt != 32*mib {
		t.Fatalf("after a latency cut on a second that moved 2 MiB: rate %d, hurt at %d; want the floor (1 MiB/s), and the start rate (32 MiB/s) remembered", s.Rate, s.Hurt)
	}
}

// After a cut the rate is back at the rate that hurt within a few calm
// steps, and probes above it ever faster, where one Step a second took far
// longer.
func TestClimbsBackAfterACut(t *testing.T) {
	cfg := DefaultConfig()
	s := at(26*mib, known)
	s.Hurt = 256 * mib
	var rates []int64
	for range 6 {
		var d Decision
		d, s = Step(cfg, s, calm)
		rates = append(rates, d.Rate/mib)
	}
	want := []int64{141, 198, 227, 241, 249, 256}
	for i := range want {
		if rates[i] != want[i] {
			t.Fatalf("rates (MiB/s) after a cut from 256 to 26 MiB/s: %v, want %v", rates, want)
		}
	}
	rates = rates[:0]
	for range 6 {
		var d Decision
		d, s = Step(cfg, s, calm)
		rates = append(rates, d.Rate/mib)
	}
	if want := []int64{264, 272, 288, 320, 384, 512}; !slices.Equal(rates, want) {
		t.Fatalf("rates (MiB/s) probing above the 256 MiB/s that hurt: %v, want %v", rates, want)
	}
}

// With catch-up active and no signal against it, a controller cut to its
// floor climbs back to its ceiling and stays there.
func TestClimbsToCeiling(t *testing.T) {
	for _, ceiling := range []int64{0, 64 * mib} {
		cfg := DefaultConfig()
		cfg.Ceiling = ceiling
		s := State{Rate: cfg.Floor}
		var d Decision
		for range 100 {
			d, s = Step(cfg, s, Input{Moved: 1})
		}
		if d.Rate != ceiling || d.Reason != None {
			t.Fatalf("ceiling %d: after 100 quiet steps at %d (%v)", ceiling, d.Rate, d.Reason)
		}
	}
}

// A latency storm that never ends holds the rate at the floor, never
// below, and counts the steps.
func TestNeverBelowFloor(t *testing.T) {
	cfg := DefaultConfig()
	s := at(Unbounded, primed)
	var d Decision
	for i := 1; i <= 50; i++ {
		d, s = Step(cfg, s, slow)
		if d.Rate < cfg.Floor || d.Rate == 0 {
			t.Fatalf("step %d: rate %d below the floor %d", i, d.Rate, cfg.Floor)
		}
	}
	if d.Rate != cfg.Floor || d.AtFloor != 50-18 { // 1 GiB halves on steps 1, 3, ...: 1 MiB on step 19
		t.Fatalf("rate %d, at floor %d steps", d.Rate, d.AtFloor)
	}
}

// The baseline is learned only from idle steps: the first idle p99 sets
// it, each later one moves it 1/BaselineSettle of the way, an active step
// leaves it.
func TestBaselineLearnedOnlyWhileIdle(t *testing.T) {
	cfg := DefaultConfig()
	var s State
	_, s = Step(cfg, s, with(idle, func(in *Input) { in.Moved = 1 }))
	if s.BaselineKnown {
		t.Fatalf("learned %v from an active step", s.Baseline)
	}
	_, s = Step(cfg, s, with(idle, func(in *Input) { in.LatencyKnown = false }))
	if s.BaselineKnown {
		t.Fatalf("learned %v from an unknown p99", s.Baseline)
	}
	s.Gap = false // the pause that follows an active step: TestBaselineHeldInAHealsPause
	for _, c := range []struct {
		in   Input
		want time.Duration
	}{
		{with(idle, func(in *Input) { in.P99 = 10 * lu }), 10 * lu},
		{with(idle, func(in *Input) { in.P99 = 2 * lu }), 9 * lu},
		{with(idle, func(in *Input) { in.P99 = 17 * lu }), 10 * lu},
		{with(slow, func(in *Input) { in.P99 = time.Microsecond }), 10 * lu},
		{with(slow, func(in *Input) { in.P99 = time.Second }), 10 * lu},
	} {
		_, s = Step(cfg, s, c.in)
		if !s.BaselineKnown || s.Baseline != c.want {
			t.Fatalf("after p99 %v (moved %d): baseline %v, want %v", c.in.P99, c.in.Moved, s.Baseline, c.want)
		}
	}
}

// An idle step within IdleReset steps of an active one is a pause inside a
// heal: its p99 may lower the baseline, never raise it; once IdleReset idle
// steps in a row have passed, the baseline follows the idle p99 again.
func TestBaselineHeldInAHealsPause(t *testing.T) {
	cfg := DefaultConfig()
	s := State{Baseline: 10 * lu, BaselineKnown: true}
	_, s = Step(cfg, s, with(calm, func(in *Input) { in.P99 = 10 * lu }))
	after10 := 9*lu + (40*lu-9*lu)/BaselineSettle
	for i, c := range []struct {
		p99  time.Duration
		n    int
		want time.Duration
	}{
		{40 * lu, 8, 10 * lu}, // idle steps 1-8: the heal's load is not learned
		{2 * lu, 1, 9 * lu},   // idle step 9: a lower p99 is
		{40 * lu, 1, after10}, // idle step 10 (IdleReset): the pause is over
		{40 * lu, 1, after10 + (40*lu-after10)/BaselineSettle}, // and later ones follow as before
	} {
		for range c.n {
			_, s = Step(cfg, s, with(idle, func(in *Input) { in.P99 = c.p99 }))
		}
		if s.Baseline != c.want {
			t.Fatalf("row %d: after %d idle steps at %v (idle count %d, gap %v): baseline %v, want %v", i, c.n, c.p99, s.Idle, s.Gap, s.Baseline, c.want)
		}
	}
}

// Slow steps cut only LatencySteps in a row; a step that is not slow
// starts the count again.
func TestLatencyStepsInARow(t *testing.T) {
	cfg := DefaultConfig()
	s := at(32*mib, known)
	var d Decision
	for i, in := range []Input{slow, calm, slow, slow} {
		before := s.Rate
		d, s = Step(cfg, s, in)
		if cut := s.Rate < before; cut != (i == 3) {
			t.Fatalf("step %d: rate %d (%v), slow count %d: want a cut only on the second slow step in a row", i, d.Rate, d.Reason, s.Slow)
		}
	}
}

// A heal of three steps in slow start, the shape of the demo's quiet round
// (a 64 MiB copy's commit stalls the clients for one second, then the heal
// is over): with LatencySteps 2 alone the lone slow second never cut; the
// severe factor cuts it on that second, and the rate then closes half the
// gap to where it hurt instead of doubling.
func TestShortHealSevereSpike(t *testing.T) {
	cfg := DefaultConfig()
	s := known
	var cuts int
	for i, in := range []Input{
		with(calm, func(in *Input) { in.Moved, in.Elapsed = 32*mib, time.Second }),
		with(severe, func(in *Input) { in.P99, in.Moved, in.Elapsed = 8*lu, 64*mib, time.Second }),
		with(calm, func(in *Input) { in.Moved, in.Elapsed = 40*mib, time.Second }),
	} {
		before := s.Rate
		var d Decision
		d, s = Step(cfg, s, in)
		if d.Reason == Latency && s.Rate < before {
			cuts++
			if i != 1 || d.Rate != 32*mib || s.Hurt != 64*mib {
				t.Fatalf("step %d: cut to %d (hurt at %d), want one cut on step 1 to half of 64 MiB/s", i, d.Rate, s.Hurt)
			}
		}
	}
	if cuts != 1 || s.Rate != 48*mib {
		t.Fatalf("%d cuts, rate %d after the heal: want 1 cut, then half the gap back to the 64 MiB/s that hurt (48 MiB/s)", cuts, s.Rate)
	}
}

// The pressure baselines are learned only from idle steps with a known
// figure: the first sets it, later ones move it 1/PressureSettle of the way.
func TestPressureBaselineLearnedOnlyWhileIdle(t *testing.T) {
	cfg := DefaultConfig()
	var s State
	_, s = Step(cfg, s, with(calm, func(in *Input) { in.CPU = hot }))
	if s.IdleCPU.Known {
		t.Fatalf("learned %v from an active step", s.IdleCPU)
	}
	for _, c := range []struct {
		cpu  Signal
		want Signal
	}{
		{Signal{Avg10: 99}, Signal{}},
		{Signal{Avg10: 80, Known: true}, Signal{Avg10: 80, Known: true}},
		{Signal{Avg10: 0, Known: true}, Signal{Avg10: 70, Known: true}},
		{Signal{Known: false}, Signal{Avg10: 70, Known: true}},
	} {
		_, s = Step(cfg, s, with(idle, func(in *Input) { in.CPU = c.cpu }))
		if s.IdleCPU != c.want {
			t.Fatalf("after idle cpu %+v: baseline %+v, want %+v", c.cpu, s.IdleCPU, c.want)
		}
	}
	if s.IdleIO.Known {
		t.Fatalf("io baseline %+v learned from no io figure", s.IdleIO)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.Start = c.Floor - 1 },
		func(c *Config) { c.IdleReset = 0 },
		func(c *Config) { c.LatencySteps = 0 },
		func(c *Config) { c.SevereFactor = c.LatencyFactor - 0.1 },
		func(c *Config) { c.SevereMargin = c.LatencyMargin - time.Millisecond },
		func(c *Config) { c.LatencyMargin = -1 },
	} {
		c := DefaultConfig()
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	for _, c := range []Config{
		{Floor: 100, Step: 1, LatencySteps: 1, LatencyFactor: 1.5, PressureLimit: 40},
		{Floor: mib, Ceiling: mib - 1, Step: 1, LatencySteps: 1, LatencyFactor: 1.5, PressureLimit: 40},
		{Floor: mib, Step: 0, LatencySteps: 1, LatencyFactor: 1.5, PressureLimit: 40},
		{Floor: mib, Step: 1, LatencySteps: 1, LatencyFactor: 1, PressureLimit: 40},
		{Floor: mib, Step: 1, LatencyFactor: 1.5, LatencySteps: 0, PressureLimit: 40},
		{Floor: mib, Step: 1, LatencySteps: 1, LatencyFactor: 1.5, PressureLimit: 0},
		{Floor: mib, Step: 1, LatencySteps: 1, LatencyFactor: 1.5, PressureLimit: 40, PressureRise: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestStepAllocatesNothing(t *testing.T) {
	cfg, s := DefaultConfig(), known
	if n := testing.AllocsPerRun(100, func() { _, s = Step(cfg, s, slow) }); n != 0 {
		t.Fatalf("%v allocations per step", n)
	}
}

// A step that only moved bytes this rate does not pace (Beside: the copies
// a broker sends, paced per target) is not idle: its p99 may carry
// catch-up's load, so neither baseline learns from it, and it breaks a run
// of idle steps.
func TestBesideTeachesNoBaseline(t *testing.T) {
	cfg := DefaultConfig()
	hurt := with(idle, func(in *Input) { in.P99, in.Beside, in.IO = 9*lu, 64*mib, hot })
	_, s := Step(cfg, at(8*mib, known), hurt)
	if s.Baseline != known.Baseline || s.IdleIO.Known || s.Idle != 0 || !s.Gap {
		t.Fatalf("after a step that only sent, with its p99 at 4.5x the baseline: %+v; want the baseline and the pressure baseline unchanged, no idle count, in a heal", s)
	}
	_, s = Step(cfg, at(8*mib, known), with(hurt, func(in *Input) { in.Beside = 0 }))
	if s.Baseline == known.Baseline || !s.IdleIO.Known || s.Idle != 1 {
		t.Fatalf("after the same step truly idle: %+v; want both baselines learned (the test would pass for nothing otherwise)", s)
	}
}
