package pace

import (
	"fmt"
	"time"
)

// Unbounded is the rate that means no cap when Config.Ceiling is 0: the
// doubling stops there and Decision.Rate reports 0.
const Unbounded int64 = 1 << 30

// BaselineSettle is how fast the idle latency baseline follows: each idle
// step with a known p99 moves it 1/BaselineSettle of the way there.
const BaselineSettle = 8

// Reason is why a step set its rate. The zero value is reserved (no step
// has run).
type Reason uint8

// The reasons of a Decision.
const (
	_        Reason = iota
	None            // no signal against more: the rate grew (or stayed at its ceiling)
	Latency         // client p99 above LatencyFactor × the idle baseline
	Pressure        // io or cpu pressure above PressureLimit
)

// String is the reason as the metrics and /status name it.
func (r Reason) String() string {
	switch r {
	case None:
		return "none"
	case Latency:
		return "latency"
	case Pressure:
		return "pressure"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Config are the controller's knobs. DefaultConfig gives the documented
// values.
type Config struct {
	// Floor is the lowest rate in bytes per second (at least 4096).
	Floor int64
	// Ceiling is the highest; 0: none (the rate doubles up to Unbounded,
	// which is no cap). When set, at least Floor.
	Ceiling int64
	// Step is the additive increase per step under a ceiling.
	Step int64
	// Start is the rate a heal starts at (at least Floor; the ceiling
	// when above it): the zero State's, and the rate after IdleReset idle
	// steps in a row. From there active steps double it while the clients
	// are unharmed (slow start), so that a heal too short for the
	// controller to react (seconds) cannot hit the clients at full speed.
	Start int64
	// IdleReset is how many idle steps in a row return the rate to Start
	// (at least 1); shorter gaps between backfills keep the rate.
	IdleReset int
	// LatencyFactor: a p99 above this times the idle baseline is too slow
	// (more than 1).
	LatencyFactor float64
	// LatencySteps is how many active steps in a row must be too slow
	// before the rate is cut (at least 1): one second's p99 of a few
	// hundred requests is noisy, and a lone slow second is not a trend.
	LatencySteps int
	// LatencyMargin: a p99 counts as too slow (LatencyFactor,
	// SevereFactor) only when it is also more than this above the
	// baseline. A follower's append of 3 ms whose p99 doubles adds 3 ms
	// to what a client waits for, noise beside the client's own p99;
	// a relative factor alone cuts on it.
	LatencyMargin time.Duration
	// SevereFactor: a p99 above this times the idle baseline cuts at once,
	// without waiting for LatencySteps slow steps (at least
	// LatencyFactor). A heal of a few seconds is over before two slow
	// seconds in a row can be seen, and a stall this far above the
	// baseline is no noise.
	SevereFactor float64
	// SevereMargin: a p99 cuts at once (SevereFactor) only when it is also
	// more than this above the baseline (at least LatencyMargin). A
	// follower's append of 1.5 ms that takes 6.5 ms for a second is more
	// than three times its baseline, and a slow second, but not a stall
	// to cut for before a second one confirms it.
	SevereMargin time.Duration
	// PressureLimit is the PSI some avg10, in percent, above which the
	// machine is under pressure (in (0, 100]).
	PressureLimit float64
	// PressureRise is how many points above its idle baseline a resource's
	// pressure must also be before it counts (in [0, 100]): pressure that
	// was there while catch-up was idle is not catch-up's to give back.
	PressureRise float64
}

// DefaultConfig is a floor of 1 MiB/s, no ceiling, steps of 8 MiB/s, a
// start at 32 MiB/s after 10 idle steps, a latency factor of 1.5 over 2
// steps or 3 in one, each at least 5 ms above the baseline, a pressure
// limit of 40% and a rise of 20 points.
func DefaultConfig() Config {
	return Config{Floor: 1 << 20, Step: 8 << 20, Start: 32 << 20, IdleReset: 10, LatencyFactor: 1.5, LatencySteps: 2, SevereFactor: 3,
		LatencyMargin: 5 * time.Millisecond, SevereMargin: 20 * time.Millisecond, PressureLimit: 40, PressureRise: 20}
}

// Validate names the first field that makes no sense, with its value.
func (c Config) Validate() error {
	switch {
	case c.Floor < 4096:
		return fmt.Errorf("pace: Floor = %d: want at least 4096", c.Floor)
	case c.Ceiling != 0 && c.Ceiling < c.Floor:
		return fmt.Errorf("pace: Ceiling = %d: want 0 (none) or at least Floor (%d)", c.Ceiling, c.Floor)
	case c.Step < 1:
		return fmt.Errorf("pace: Step = %d: want at least 1", c.Step)
	case c.Start < c.Floor:
		return fmt.Errorf("pace: Start = %d: want at least Floor (%d)", c.Start, c.Floor)
	case c.IdleReset < 1:
		return fmt.Errorf("pace: IdleReset = %d: want at least 1", c.IdleReset)
	case !(c.LatencyFactor > 1):
		return fmt.Errorf("pace: LatencyFactor = %v: want more than 1", c.LatencyFactor)
	case c.LatencySteps < 1:
		return fmt.Errorf("pace: LatencySteps = %d: want at least 1", c.LatencySteps)
	case c.LatencyMargin < 0:
		return fmt.Errorf("pace: LatencyMargin = %v: want at least 0", c.LatencyMargin)
	case !(c.SevereFactor >= c.LatencyFactor):
		return fmt.Errorf("pace: SevereFactor = %v: want at least LatencyFactor (%v)", c.SevereFactor, c.LatencyFactor)
	case c.SevereMargin < c.LatencyMargin:
		return fmt.Errorf("pace: SevereMargin = %v: want at least LatencyMargin (%v)", c.SevereMargin, c.LatencyMargin)
	case !(c.PressureLimit > 0 && c.PressureLimit <= 100):
		return fmt.Errorf("pace: PressureLimit = %v: want a percentage in (0, 100]", c.PressureLimit)
	case !(c.PressureRise >= 0 && c.PressureRise <= 100):
		return fmt.Errorf("pace: PressureRise = %v: want points in [0, 100]", c.PressureRise)
	}
	return nil
}

// start is the rate a heal starts at: Start, at most the top.
func (c Config) start() int64 { return min(c.Start, c.top()) }

// top is the highest rate: the ceiling, or Unbounded.
func (c Config) top() int64 {
	if c.Ceiling > 0 {
		return c.Ceiling
	}
	return Unbounded
}

// Signal is one PSI figure: "some avg10" in percent, Known false where
// the kernel does not report it.
type Signal struct {
	Avg10 float64
	Known bool
}

// Input is what was seen over one interval (one step).
type Input struct {
	// P99 is the client-facing latency p99 over the interval;
	// LatencyKnown false when there is none (no source, no requests).
	P99          time.Duration
	LatencyKnown bool
	// Moved is the bytes catch-up moved over the interval under this
	// rate; 0: none.
	Moved int64
	// Beside is the bytes catch-up moved over the interval that this rate
	// does not pace (under a target scope: the copies this broker sent, each
	// paced by its target). A step with Beside but no Moved is busy, not
	// idle: its p99 may carry catch-up's load, so it teaches no baseline
	// and counts toward no IdleReset; the rate is held.
	Beside int64
	// Elapsed is the interval's length; 0: unknown (Moved then only says
	// active or idle).
	Elapsed time.Duration
	// IO and CPU are the machine's pressure.
	IO, CPU Signal
}

// State is what the controller carries from one step to the next. The
// zero State has seen nothing: its rate is Config.Start and it knows no
// baseline.
type State struct {
	// Rate is the current rate in bytes per second; 0 before the first
	// step (then the top).
	Rate int64
	// Baseline is the idle p99, BaselineKnown whether one was seen.
	Baseline      time.Duration
	BaselineKnown bool
	// Slow counts the active steps in a row whose p99 was too slow.
	Slow int
	// Idle counts the idle steps in a row.
	Idle int
	// Gap is set by an active step and cleared by IdleReset idle steps in
	// a row: an idle step with Gap set is a pause inside a heal (between
	// two copies), whose p99 may still carry the heal's load.
	Gap bool
	// IdleIO and IdleCPU are the pressure baselines: an average of the
	// PSI figures seen on idle steps (Known false until one was seen).
	IdleIO, IdleCPU Signal
	// Hurt is the rate the last cut was made at (the rate, or what moved
	// when that was lower, at least Config.Start; 0: no cut yet). Without
	// a ceiling, active steps after a cut close half the gap to it each
	// step (at least Step), then probe above it, a Step first and twice
	// the distance each step after: the rate returns within a few steps
	// to where the clients were hurt, slows down near it, and finds out
	// whether that still hurts them (BIC's binary search and max
	// probing), instead of oscillating between half and double of it or
	// crawling back a Step at a time.
	Hurt int64
	// AtFloor counts the consecutive active steps at the floor.
	AtFloor int
	// Reason is the last step's.
	Reason Reason
}

// Decision is one step's outcome, to apply.
type Decision struct {
	// Rate is the bytes per second to apply; 0 means no cap.
	Rate   int64
	Reason Reason
	// AtFloor counts the consecutive active steps held at the floor
	// (invariant 5).
	AtFloor int
}

// Step decides the rate for the next interval from s and what in saw over
// the last one. cfg must be valid (Validate).
func Step(cfg Config, s State, in Input) (Decision, State) {
	if s.Rate == 0 {
		s.Rate = cfg.start()
	}
	active := in.Moved > 0
	idle := !active && in.Beside <= 0
	s.Reason = None
	if idle {
		s.Idle++
	} else {
		s.Idle, s.Gap = 0, true
	}
	if active && above(cfg.LatencyFactor, cfg.LatencyMargin, s, in) {
		s.Slow++
	} else {
		s.Slow = 0
	}
	switch {
	case s.Slow >= cfg.LatencySteps || (s.Slow > 0 && above(cfg.SevereFactor, cfg.SevereMargin, s, in)):
		s.Hurt, s.Rate = cut(cfg, s.Rate, in)
		s.Reason, s.Slow = Latency, 0
	case s.Slow > 0:
		s.Reason = Latency // slow, not yet for long enough: held
	case pressed(cfg, s.IdleIO, in.IO) || pressed(cfg, s.IdleCPU, in.CPU):
		s.Reason = Pressure
		if active {
			s.Hurt, s.Rate = cut(cfg, s.Rate, in)
		}
	case active:
		s.Rate = grow(cfg, s)
	case idle && s.Idle >= cfg.IdleReset:
		s.Rate, s.Hurt = cfg.start(), 0
	}
	if idle && s.Idle >= cfg.IdleReset {
		s.Gap = false
	}
	if idle && in.LatencyKnown && !(s.Gap && s.BaselineKnown && in.P99 > s.Baseline) {
		s.Baseline, s.BaselineKnown = learn(s.Baseline, s.BaselineKnown, in.P99)
	}
	if idle {
		s.IdleIO, s.IdleCPU = settle(s.IdleIO, in.IO), settle(s.IdleCPU, in.CPU)
	}
	switch {
	case s.Rate > cfg.Floor:
		s.AtFloor = 0
	case active:
		s.AtFloor++
	}
	d := Decision{Rate: s.Rate, Reason: s.Reason, AtFloor: s.AtFloor}
	if cfg.Ceiling == 0 && s.Rate >= Unbounded {
		d.Rate = 0
	}
	return d, s
}

// above: the p99 is known, above factor × a known baseline and more than
// margin above it.
func above(factor float64, margin time.Duration, s State, in Input) bool {
	return in.LatencyKnown && s.BaselineKnown && float64(in.P99) > factor*float64(s.Baseline) && in.P99-s.Baseline > margin
}

// pressed: a known PSI figure above the limit and, where an idle
// baseline is known, more than PressureRise points above it.
func pressed(cfg Config, idle, sig Signal) bool {
	if !sig.Known || sig.Avg10 <= cfg.PressureLimit {
		return false
	}
	return !idle.Known || sig.Avg10 > idle.Avg10+cfg.PressureRise
}

// PressureSettle is how fast the idle pressure baseline follows: each
// idle step moves it 1/PressureSettle of the way to the figure seen.
const PressureSettle = 8

// settle folds one idle PSI figure into its baseline.
func settle(base, sig Signal) Signal {
	switch {
	case !sig.Known:
		return base
	case !base.Known:
		return sig
	}
	return Signal{Avg10: base.Avg10 + (sig.Avg10-base.Avg10)/PressureSettle, Known: true}
}

// cut is the rate a cut was made at and the rate it leaves. The cut
// halves the lower of rate and what moved over the interval (at least the
// floor). The rate remembered as hurting is that lower figure, but at
// least the start rate: a heal's first seconds move little while the
// clients may still be shaken by what started it (a broker's death, an
// election), and a memory of a few MB/s would hold the whole heal down.
func cut(cfg Config, rate int64, in Input) (hurt, next int64) {
	if in.Elapsed > 0 {
		if seen := float64(in.Moved) / in.Elapsed.Seconds(); seen < float64(rate) {
			rate = int64(seen)
		}
	}
	return max(rate, cfg.start()), max(cfg.Floor, rate/2)
}

// grow is an active step's increase: by Step under a ceiling; without
// one, doubling until the first cut; then half the gap to the rate that
// hurt (at least Step, never past it); above it, by as much as the rate
// is already above it (at least Step), so the probe starts with a Step
// and doubles its distance each step.
func grow(cfg Config, s State) int64 {
	switch {
	case cfg.Ceiling > 0:
		return min(cfg.Ceiling, s.Rate+cfg.Step)
	case s.Hurt == 0:
		return min(Unbounded, s.Rate*2)
	case s.Rate < s.Hurt:
		return min(s.Hurt, s.Rate+max(cfg.Step, (s.Hurt-s.Rate)/2))
	}
	return min(Unbounded, s.Rate+max(cfg.Step, s.Rate-s.Hurt))
}

// learn folds an idle p99 into the baseline: the first sets it, later
// ones move it 1/BaselineSettle of the way, so it is the typical idle p99
// (not its lowest, which every busy second would exceed). Step does not
// let a pause inside a heal (State.Gap) raise it.
func learn(base time.Duration, known bool, p99 time.Duration) (time.Duration, bool) {
	if !known {
		return p99, true
	}
	return base + (p99-base)/BaselineSettle, true
}
