package plugin

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/pace"
	"github.com/malachi-log/malachi/psi"
)

// ClientLatency is the broker's client-facing latency, the signal the
// adaptive backfill rate (heal.backfill_bytes_per_second = "auto") holds
// catch-up against. P99 returns the 99th percentile of the handling time
// of what clients wait on here among the requests that ended after since,
// and false when none did: its Kafka listener's Produce and Fetch, and,
// as a follower, each partition leader's frame it appends, counted as the
// longer of its own append and the leader's previous replication round of
// that partition (what the partition's acks=all clients waited on), so
// that a follower no client talks to reads the latency of the clients of
// the partitions it replicates. It is called once a second from one
// goroutine; it must be safe for use beside the broker's own goroutines
// and return at once.
type ClientLatency interface {
	P99(since time.Time) (time.Duration, bool)
}

// paceEvery is the controller's step.
const paceEvery = time.Second

// latencyWindow is how far back each step's client p99 reaches, but never
// to before the last latency cut: one second of a thousand acknowledgements
// rises above 1.5x the idle p99 often at a rate whose whole heal stays
// below it, and two such seconds in a row halved the rate (a heal of 4.4 GB
// was cut 26 times at 0.42x the frontier rate); three seconds see what a
// client sees over the heal, and the cut's own seconds are not judged again.
const latencyWindow = 3 * time.Second

// pressureReader is psi.Reader's method: a seam for tests.
type pressureReader interface {
	Read() (psi.Pressure, error)
}

// PaceStatus is the backfill rate in /status.
type PaceStatus struct {
	// Mode is "auto" or "fixed".
	Mode string `json:"mode"`
	// BytesPerSecond is the rate applied now; 0: no cap.
	BytesPerSecond int64 `json:"bytes_per_second"`
	// Reason is why: latency, pressure, none (auto) or fixed.
	Reason string `json:"reason"`
	// FloorSeconds is how long auto has held the rate at its floor while
	// catch-up moved bytes.
	FloorSeconds float64 `json:"floor_seconds,omitempty"`
	// BaselineP99Seconds is the idle client p99 auto learned (absent
	// while none is known).
	BaselineP99Seconds float64 `json:"baseline_p99_seconds,omitempty"`
	// P99Seconds is the client p99 auto saw over its last step (absent
	// when that step saw no request).
	P99Seconds float64 `json:"p99_seconds,omitempty"`
	// BlindSteps counts the steps in which catch-up moved bytes while this
	// broker saw no client request: its rate then answers to pressure
	// only.
	BlindSteps int64 `json:"blind_steps,omitempty"`
}

// pacer steps the pace controller once a second and applies its decision
// to the catch-up throttle (heal.backfill_bytes_per_second = "auto").
type pacer struct {
	cfg     pace.Config
	setRate func(int64) error // catchup.Throttle.SetRate
	moved   func() int64      // catchup.Throttle.Moved: what the rate paces
	// beside is what catch-up moved that the rate does not pace (the send
	// throttle's Moved under the target scope); nil: nothing.
	beside  func() int64
	psi     pressureReader
	lat     ClientLatency // nil: no latency signal
	now     func() time.Time
	log     zerolog.Logger
	metrics *metrics

	mu         sync.Mutex // guards the fields below; step runs on one goroutine
	st         pace.State
	dec        pace.Decision
	lastAt     time.Time
	lastMoved  int64
	lastBeside int64
	lastErr    string        // the last PSI error logged, so each is logged once
	lastP99    time.Duration // the last step's client p99; 0: none seen
	lastCut    time.Time     // the last latency cut; zero: none
	blind      int64         // active steps without a client p99
}

// paceConfig is the controller's configuration from heal's.
func paceConfig(cfg Config) pace.Config {
	pc := pace.DefaultConfig()
	pc.Floor, pc.Ceiling = cfg.BackfillFloorBytesPerSecond, cfg.BackfillCeilingBytesPerSecond
	pc.Start = max(pc.Start, pc.Floor)
	return pc
}

// step reads the signals of the interval that ends now, steps the
// controller and applies its decision.
func (p *pacer) step() {
	now, moved, beside := p.now(), p.moved(), int64(0)
	if p.beside != nil {
		beside = p.beside()
	}
	pr, err := p.psi.Read()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.logPSI(err)
	in := pace.Input{
		Moved: moved - p.lastMoved, Beside: beside - p.lastBeside, Elapsed: now.Sub(p.lastAt),
		IO:  pace.Signal{Avg10: pr.IO.Some.Avg10, Known: pr.IO.Known},
		CPU: pace.Signal{Avg10: pr.CPU.Some.Avg10, Known: pr.CPU.Known},
	}
	if p.lastAt.IsZero() {
		in.Elapsed = 0
	}
	if p.lat != nil {
		from := now.Add(-latencyWindow)
		if p.lastCut.After(from) {
			from = p.lastCut
		}
		in.P99, in.LatencyKnown = p.lat.P99(from)
	}
	before := p.st.Rate
	p.dec, p.st = pace.Step(p.cfg, p.st, in)
	if (p.dec.Reason == pace.Latency || p.dec.Reason == pace.Pressure) && (before == 0 || p.st.Rate < before) {
		p.metrics.pace.cuts.WithLabelValues(p.dec.Reason.String()).Inc()
		if p.dec.Reason == pace.Latency {
			p.lastCut = now
		}
	}
	p.lastAt, p.lastMoved, p.lastBeside = now, moved, beside
	if in.Moved > 0 || in.Beside > 0 || p.st.Rate != before {
		p.logStep(in)
	}
	p.noteSignal(in)
	if err := p.setRate(p.dec.Rate); err != nil {
		p.log.Error().Err(err).Int64("rate", p.dec.Rate).Msg("backfill rate not applied")
	}
	p.metrics.setPace(p.dec.Rate, p.dec.Reason.String(), p.floorSeconds())
}

// noteSignal records the client latency a step saw, in the status and the
// metrics; p.mu is held.
func (p *pacer) noteSignal(in pace.Input) {
	p.lastP99 = 0
	if in.LatencyKnown {
		p.lastP99 = in.P99
	}
	blind := in.Moved > 0 && !in.LatencyKnown
	if blind {
		p.blind++
	}
	var base time.Duration
	if p.st.BaselineKnown {
		base = p.st.Baseline
	}
	p.metrics.setPaceSignal(p.lastP99, base, blind)
}

// logStep logs what a step saw and decided, for the steps that moved
// bytes or changed the rate; p.mu is held.
func (p *pacer) logStep(in pace.Input) {
	ev := p.log.Info().Int64("moved", in.Moved).Int64("beside", in.Beside).Float64("elapsed_seconds", in.Elapsed.Seconds())
	if in.LatencyKnown {
		ev = ev.Float64("p99_seconds", in.P99.Seconds())
	}
	if p.st.BaselineKnown {
		ev = ev.Float64("baseline_p99_seconds", p.st.Baseline.Seconds())
	}
	if in.IO.Known {
		ev = ev.Float64("io_some_avg10", in.IO.Avg10)
	}
	if in.CPU.Known {
		ev = ev.Float64("cpu_some_avg10", in.CPU.Avg10)
	}
	ev.Int("slow", p.st.Slow).Int64("rate", p.dec.Rate).Str("reason", p.dec.Reason.String()).Msg("backfill pace")
}

// logPSI logs a PSI error once until it changes or clears; p.mu is held.
func (p *pacer) logPSI(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != "" && msg != p.lastErr {
		p.log.Warn().Err(err).Msg("pressure (PSI) unreadable: the backfill rate ignores it")
	}
	p.lastErr = msg
}

// floorSeconds is how long the rate has been held at its floor; p.mu is
// held.
func (p *pacer) floorSeconds() float64 {
	return float64(p.dec.AtFloor) * paceEvery.Seconds()
}

// run steps every paceEvery until ctx ends.
func (p *pacer) run(ctx context.Context) {
	t := time.NewTicker(paceEvery)
	defer t.Stop()
	p.step() // the first step only learns the counters' start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.step()
		}
	}
}

// status is the pacer's part of /status.
func (p *pacer) status() *PaceStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &PaceStatus{Mode: "auto", BytesPerSecond: p.dec.Rate, Reason: pace.None.String(), FloorSeconds: p.floorSeconds()}
	if p.dec.Reason != 0 {
		s.Reason = p.dec.Reason.String()
	}
	if p.st.BaselineKnown {
		s.BaselineP99Seconds = p.st.Baseline.Seconds()
	}
	s.P99Seconds, s.BlindSteps = p.lastP99.Seconds(), p.blind
	return s
}
