package healrun

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/benchenv"
	"github.com/malachi-log/malachi/testbed/kafkaload"
)

// Mode is one catch-up rate of a pacing comparison.
type Mode struct {
	Name string
	Rate string // heal.backfill_bytes_per_second, as TOML
	// Extra is more of the [heal] table, as TOML lines (empty: defaults).
	Extra string
}

// PacingConfig is the shape of one pacing run.
type PacingConfig struct {
	Bin, Root string
	Brokers   int // at least 4
	// Segments sealed segments of SegmentBytes each are loaded (rf 3).
	Segments     int
	SegmentBytes int64
	// Producers kgo producers (idempotent, acks=all) each send a record of
	// ValueBytes every Interval, whatever the latency (open loop).
	Producers  int
	ValueBytes int
	Interval   time.Duration
	// Warmup precedes the Idle window, which ends at the kill.
	Warmup, Idle time.Duration
	// HealLimit bounds the wait for the heal.
	HealLimit time.Duration
	// FixedWindow, when above 0, measures the heal of a capped fixed mode
	// (Mode.Capped) over its first FixedWindow rather than to its end:
	// a pinned rate holds steady, and a low one would take many minutes
	// at the sizes that make a heal long enough for auto to matter. Auto
	// and unthrottled always heal to the end.
	FixedWindow time.Duration
	// KeepLogs, when set, keeps each run's broker logs there
	// (ClusterConfig.KeepLogs).
	KeepLogs string
	// Logf says what the run does (nil: nothing).
	Logf func(format string, args ...any)
}

// DefaultPacing is four brokers holding 512 MiB each in 64 MiB segments
// (SegmentsFor), two producers of 1 KiB records every 2 ms, 5 s of
// warm-up and 10 s idle, capped fixed modes measured over 60 s.
func DefaultPacing(bin, root string) PacingConfig {
	return PacingConfig{Bin: bin, Root: root, Brokers: 4, Segments: SegmentsFor(512<<20, 64<<20, 4), SegmentBytes: 64 << 20,
		Producers: 2, ValueBytes: 1024, Interval: 2 * time.Millisecond, Warmup: 5 * time.Second, Idle: 10 * time.Second, HealLimit: 15 * time.Minute,
		FixedWindow: time.Minute}
}

// SegmentsFor is how many segments of segBytes put perBroker bytes of
// copies on each of brokers brokers at rf 3 (rounded up).
func SegmentsFor(perBroker, segBytes int64, brokers int) int {
	return int((perBroker*int64(brokers)/3 + segBytes - 1) / segBytes)
}

// Result is one mode's figures in one round (the JSON keys are those the
// reports and the benchmark's file use).
type Result struct {
	Mode         string  `json:"mode"`
	Round        int     `json:"round"`
	Load1        float64 `json:"load1"`
	KilledBroker uint64  `json:"killed_broker"`
	// HealBytes is what the killed broker held, a broker's worth, and
	// HealSeconds how long its heal took: observed, or that many bytes
	// at the rate of the window when HealWindowSeconds is set (the heal
	// was measured over its first HealWindowSeconds, PacingConfig.
	// FixedWindow, and the run ended there).
	HealBytes               int64   `json:"heal_bytes"`
	HealSeconds             float64 `json:"heal_seconds"`
	HealWindowSeconds       float64 `json:"heal_window_seconds,omitempty"`
	HealBytesPerSecond      float64 `json:"heal_bytes_per_second"`
	HealLimitBytesPerSecond float64 `json:"heal_limit_bytes_per_second"`
	LimitDiskBytesPerSecond float64 `json:"limit_disk_bytes_per_second"`
	LimitLoopBytesPerSecond float64 `json:"limit_loopback_bytes_per_second"`
	ClientP50IdleMs         float64 `json:"client_p50_idle_ms"`
	ClientP99IdleMs         float64 `json:"client_p99_idle_ms"`
	ClientP50HealingMs      float64 `json:"client_p50_healing_ms"`
	ClientP99HealingMs      float64 `json:"client_p99_healing_ms"`
	ClientAcksIdle          int     `json:"client_acks_idle"`
	ClientAcksHealing       int     `json:"client_acks_healing"`
	RecordsAcknowledged     int     `json:"records_acknowledged"`
	RecordsLost             int     `json:"records_lost"`
	ProduceFailures         int     `json:"produce_failures"`
	LatencyCuts             int     `json:"latency_cuts"`
	PressureCuts            int     `json:"pressure_cuts"`
	// RampSeconds is how long the heal took to reach its steady rate
	// (healrun.Ramp) and RampOverHeal that over HealSeconds; RampReached
	// false when it never did (RampOverHeal is then 1).
	RampSeconds              float64 `json:"ramp_seconds"`
	RampOverHeal             float64 `json:"ramp_over_heal"`
	RampReached              bool    `json:"ramp_reached"`
	ClientP99HealingOverIdle float64 `json:"client_p99_healing_over_idle"`
	// HealOverLimit is the heal's rate over its limit: at most 1
	// (RunPacing fails a round whose heal is above its limit).
	HealOverLimit float64 `json:"heal_over_limit"`
	// FrontierRateBytesPerSecond is the round's R* (SetFrontier; 0: no
	// fixed mode kept the clients within FrontierFactor of idle) and
	// HealOverFrontier the heal's rate over it (0 without one).
	FrontierRateBytesPerSecond float64 `json:"frontier_rate_bytes_per_second"`
	HealOverFrontier           float64 `json:"heal_over_frontier"`
	// IdleDisturbed: the idle p99 is above DisturbedFactor times the
	// round's median idle p99 (SetFrontier): the result draws no frontier.
	IdleDisturbed bool `json:"idle_disturbed,omitempty"`
	// ClientSlowSeconds are the seconds of the heal window in which an
	// acknowledgement took more than four times the idle p99: a few such
	// seconds are what lifts a heal's p99 far above the idle one, and
	// their times tie them to the brokers' logs.
	ClientSlowSeconds []SlowSecond `json:"client_slow_seconds,omitempty"`
}

func (c PacingConfig) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// validate names the first field that makes no sense.
func (c PacingConfig) validate() error {
	switch {
	case c.Brokers < 4:
		return fmt.Errorf("healrun: %d brokers: want at least 4 (rf 3 and a broker to kill outside the clients' partition)", c.Brokers)
	case c.Segments < 1 || c.SegmentBytes < 64<<10:
		return fmt.Errorf("healrun: %d segments of %d bytes: want at least one of at least 64 KiB", c.Segments, c.SegmentBytes)
	case c.Producers < 1 || c.ValueBytes < 1 || c.Interval <= 0:
		return fmt.Errorf("healrun: %d producers of %d-byte records every %v: want at least one producer sending something", c.Producers, c.ValueBytes, c.Interval)
	case c.Idle <= 0:
		return fmt.Errorf("healrun: idle window %v: want a positive one", c.Idle)
	}
	return nil
}

// RunPacing is one mode's run on a fresh cluster: load the sealed
// copies, measure the limit, start the clients on a topic of one
// partition that does not roll, kill a broker outside that partition's
// replicas (so the clients feel the heal only through the machine they
// share), time the heal, read every acknowledged record back.
func RunPacing(ctx context.Context, cfg PacingConfig, m Mode) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	hc, err := Start(ctx, ClusterConfig{Bin: cfg.Bin, Root: cfg.Root, Brokers: cfg.Brokers,
		HealExtra: "backfill_bytes_per_second = " + m.Rate + "\n" + m.Extra, Kafka: true, KafkaTable: "segment_bytes = 4294967296\nsegment_ms = 0\n",
		KeepLogs: cfg.KeepLogs})
	if err != nil {
		return Result{}, err
	}
	defer hc.Stop()
	loaded, took, err := hc.Load(ctx, "pace", cfg.Segments, cfg.SegmentBytes)
	if err != nil {
		return Result{}, err
	}
	cfg.logf("%s: loaded %d segments (%d MB) in %.1f s", m.Name, cfg.Segments, loaded/1e6, took)
	kcfg, err := cfg.clients(hc)
	if err != nil {
		return Result{}, err
	}
	// The limit is measured before the clients start and again once they
	// are done (the best of the two is kept: Limit.Best), for about the
	// bytes the victim will hold (brokers hold alike) onto the three others
	// in copies of a segment and its footer; the victim is chosen once the
	// clients' topic exists, outside its replicas.
	_, estimate, err := hc.Victim(ctx, nil)
	if err != nil {
		return Result{}, err
	}
	pattern := Pattern{Bytes: estimate, Targets: 3, CopyBytes: cfg.SegmentBytes + store.FooterSize}
	limit, err := MeasureLimit(hc.Dir, pattern)
	if err != nil {
		return Result{}, err
	}
	l, err := kafkaload.Start(ctx, kcfg)
	if err != nil {
		return Result{}, fmt.Errorf("healrun: clients: %w", err)
	}
	avoid, err := hc.PartitionReplicas(ctx, kcfg.Topic)
	if err != nil {
		l.Finish(ctx)
		return Result{}, err
	}
	victim, held, err := hc.Victim(ctx, avoid)
	if err != nil {
		l.Finish(ctx)
		return Result{}, err
	}
	time.Sleep(cfg.Warmup + cfg.Idle)
	load, _ := benchenv.ReadLoad()
	var window time.Duration
	if m.Capped() {
		window = cfg.FixedWindow
	}
	t, err := hc.KillAndHeal(ctx, victim, held, cfg.HealLimit, window)
	if err != nil {
		l.Finish(ctx)
		return Result{}, err
	}
	// The killed broker's copies count for nothing now: give their disk
	// back before the limit is measured again, so that a heal of several
	// GB per broker fits in five brokers' worth of disk, not six.
	if err := os.RemoveAll(victim.Dir); err != nil {
		l.Finish(ctx)
		return Result{}, fmt.Errorf("healrun: removing the killed broker's data: %w", err)
	}
	idle := l.AckLatenciesBetween(t.Killed.Add(-cfg.Idle), t.Killed)
	healing, healingAt := l.AcksBetween(t.FirstPlan, t.Healed)
	rep := l.Finish(ctx)
	after, err := MeasureLimit(hc.Dir, pattern) // the clients done, the heal over
	if err != nil {
		return Result{}, err
	}
	limit = limit.Best(after)
	switch {
	case rep.Error != "":
		return Result{}, fmt.Errorf("healrun: reading the records back: %s", rep.Error)
	case !rep.OK():
		return Result{}, fmt.Errorf("healrun: %s: clients: %d lost, %d duplicated, %d out of order", m.Name, rep.Lost, rep.Duplicated, rep.OutOfOrder)
	case len(idle) == 0 || len(healing) == 0:
		return Result{}, fmt.Errorf("healrun: %s: %d acknowledgements in the idle window, %d while healing: no latency to compare", m.Name, len(idle), len(healing))
	}
	r := Result{Mode: m.Name, Load1: load.One, KilledBroker: uint64(victim.ID), HealBytes: held, HealSeconds: float64(held) / t.Rate(),
		HealBytesPerSecond: t.Rate(), HealLimitBytesPerSecond: limit.Rate(), LimitDiskBytesPerSecond: limit.Disk, LimitLoopBytesPerSecond: limit.Loopback,
		ClientP50IdleMs: kafkaload.QuantileMs(idle, 0.5), ClientP99IdleMs: kafkaload.QuantileMs(idle, 0.99),
		ClientP50HealingMs: kafkaload.QuantileMs(healing, 0.5), ClientP99HealingMs: kafkaload.QuantileMs(healing, 0.99),
		ClientAcksIdle: len(idle), ClientAcksHealing: len(healing),
		RecordsAcknowledged: rep.Acknowledged, RecordsLost: rep.Lost, ProduceFailures: rep.ProduceFailures,
		LatencyCuts: t.LatencyCuts, PressureCuts: t.PressureCuts}
	r.ClientP99HealingOverIdle = r.ClientP99HealingMs / r.ClientP99IdleMs
	if t.Windowed {
		r.HealWindowSeconds = t.Window().Seconds()
	}
	r.RampReached, r.RampOverHeal = t.RampKnown, 1
	if t.RampKnown {
		r.RampSeconds = t.Ramp.Seconds()
		r.RampOverHeal = r.RampSeconds / r.HealSeconds
	}
	if err := limit.Check(r.HealBytesPerSecond); err != nil {
		return Result{}, fmt.Errorf("healrun: %s, round at load %.2f: %w", m.Name, load.One, err)
	}
	r.HealOverLimit = r.HealBytesPerSecond / r.HealLimitBytesPerSecond
	r.ClientSlowSeconds = slowSeconds(healing, healingAt, t.Killed, 4*time.Duration(r.ClientP99IdleMs*float64(time.Millisecond)))
	cfg.logResult(r, t)
	return r, nil
}

// logResult says what a mode's run measured: the heal, its ramp, its slow
// seconds.
func (cfg PacingConfig) logResult(r Result, t Timing) {
	verb := "healed"
	if t.Windowed {
		verb = "measured over a window: backfills received"
	}
	cfg.logf("%s: killed broker %d; %s %d MB in %.1f s (%.0f MB/s, %.2fx the limit); client p99 %.1f ms idle, %.1f ms healing; the rate was cut %d times for latency, %d for pressure",
		r.Mode, r.KilledBroker, verb, t.Bytes/1e6, t.Window().Seconds(), r.HealBytesPerSecond/1e6, r.HealOverLimit, r.ClientP99IdleMs, r.ClientP99HealingMs, t.LatencyCuts, t.PressureCuts)
	if t.RampKnown {
		cfg.logf("%s: the heal reached %.0f%% of its mean rate over %v at %.1f s, %.0f%% of the way", r.Mode, RampShare*100, RampSpan, r.RampSeconds, r.RampOverHeal*100)
	} else {
		cfg.logf("%s: the heal never reached %.0f%% of its mean rate over %v", r.Mode, RampShare*100, RampSpan)
	}
	cfg.logSlow(r.Mode, r.ClientSlowSeconds)
}

// logSlow logs a mode's slow seconds, one line each.
func (cfg PacingConfig) logSlow(mode string, slow []SlowSecond) {
	for _, s := range slow {
		cfg.logf("%s: %d of %d acknowledgements slower than 4x the idle p99 in second %d after the kill (%s), the slowest %.0f ms",
			mode, s.Slow, s.Acks, s.SinceKill, s.At.Format(time.RFC3339), s.MaxMs)
	}
}

// SlowSecond is one second of a heal window in which an acknowledgement
// was slow.
type SlowSecond struct {
	// At is the second's start (UTC) and SinceKill its offset from the
	// kill, in whole seconds.
	At        time.Time `json:"at"`
	SinceKill int       `json:"since_kill_seconds"`
	// Slow counts the second's acknowledgements above the limit, of Acks;
	// MaxMs is its slowest.
	Slow  int     `json:"slow"`
	Acks  int     `json:"acks"`
	MaxMs float64 `json:"max_ms"`
}

// slowSeconds groups the acknowledgements (latencies lat, acknowledged at
// ats, in order) by second since killed and returns the seconds with one
// slower than limit.
func slowSeconds(lat []time.Duration, ats []time.Time, killed time.Time, limit time.Duration) []SlowSecond {
	var out []SlowSecond
	cur := SlowSecond{SinceKill: -1}
	flush := func() {
		if cur.Slow > 0 {
			out = append(out, cur)
		}
	}
	for i, at := range ats {
		s := int(at.Sub(killed) / time.Second)
		if s != cur.SinceKill {
			flush()
			cur = SlowSecond{At: killed.Add(time.Duration(s) * time.Second).UTC(), SinceKill: s}
		}
		cur.Acks++
		if lat[i] > limit {
			cur.Slow++
			cur.MaxMs = max(cur.MaxMs, float64(lat[i])/float64(time.Millisecond))
		}
	}
	flush()
	return out
}

// clients is the client load's configuration on hc: a topic of one
// partition.
func (cfg PacingConfig) clients(hc *Cluster) (kafkaload.Config, error) {
	tlsCfg, err := hc.C.KafkaTLS()
	if err != nil {
		return kafkaload.Config{}, err
	}
	k := kafkaload.DefaultConfig()
	k.Seeds, k.TLS, k.Topic, k.Partitions = hc.C.KafkaSeeds(), tlsCfg, "pacing", 1
	k.Producers, k.ValueBytes, k.Interval = cfg.Producers, cfg.ValueBytes, cfg.Interval
	return k, nil
}

// Median is one mode's medians over rounds, and the records lost summed.
type Median struct {
	Mode                     string  `json:"mode"`
	Rounds                   int     `json:"rounds"`
	HealBytesPerSecond       float64 `json:"heal_bytes_per_second"`
	HealLimitBytesPerSecond  float64 `json:"heal_limit_bytes_per_second"`
	ClientP99IdleMs          float64 `json:"client_p99_idle_ms"`
	ClientP99HealingMs       float64 `json:"client_p99_healing_ms"`
	ClientP99HealingOverIdle float64 `json:"client_p99_healing_over_idle"`
	HealOverLimit            float64 `json:"heal_over_limit"`
	// HealBytes is the median of what the killed broker held (a broker's
	// worth) and HealSeconds of how long its heal took: the figure users
	// feel, the time to heal a broker at this mode, beside the clients'
	// p99 while it heals.
	HealBytes   float64 `json:"heal_bytes"`
	HealSeconds float64 `json:"heal_seconds"`
	// HealWindowSeconds is the median of the rounds' windows (0: each
	// heal ran to its end; Result.HealWindowSeconds).
	HealWindowSeconds float64 `json:"heal_window_seconds,omitempty"`
	// RampOverHeal is the median of the rounds' time to the steady rate
	// over their heal (Result.RampOverHeal: 1 for a round that never
	// reached it).
	RampOverHeal float64 `json:"ramp_over_heal"`
	// FrontierRateBytesPerSecond is the median of the R* of the rounds the
	// mode ran in, HealOverFrontier the median of its heal over its
	// round's R* (rounds without an R* left out; 0: none had one).
	FrontierRateBytesPerSecond float64 `json:"frontier_rate_bytes_per_second"`
	HealOverFrontier           float64 `json:"heal_over_frontier"`
	RecordsLost                int     `json:"records_lost"`
}

// Medians are the medians per mode of results, the modes in the order
// they first appear.
func Medians(results []Result) []Median {
	var ms []Median
	for _, name := range modeNames(results) {
		var rs []Result
		for _, r := range results {
			if r.Mode == name {
				rs = append(rs, r)
			}
		}
		med := func(f func(Result) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			return median(v)
		}
		lost := 0
		var frontier []float64
		for _, r := range rs {
			lost += r.RecordsLost
			if r.FrontierRateBytesPerSecond > 0 {
				frontier = append(frontier, r.HealOverFrontier)
			}
		}
		ms = append(ms, Median{Mode: name, Rounds: len(rs),
			HealBytesPerSecond:         med(func(r Result) float64 { return r.HealBytesPerSecond }),
			HealLimitBytesPerSecond:    med(func(r Result) float64 { return r.HealLimitBytesPerSecond }),
			ClientP99IdleMs:            med(func(r Result) float64 { return r.ClientP99IdleMs }),
			ClientP99HealingMs:         med(func(r Result) float64 { return r.ClientP99HealingMs }),
			ClientP99HealingOverIdle:   med(func(r Result) float64 { return r.ClientP99HealingOverIdle }),
			HealOverLimit:              med(func(r Result) float64 { return r.HealOverLimit }),
			HealBytes:                  med(func(r Result) float64 { return float64(r.HealBytes) }),
			HealSeconds:                med(func(r Result) float64 { return r.HealSeconds }),
			HealWindowSeconds:          med(func(r Result) float64 { return r.HealWindowSeconds }),
			RampOverHeal:               med(func(r Result) float64 { return r.RampOverHeal }),
			FrontierRateBytesPerSecond: med(func(r Result) float64 { return r.FrontierRateBytesPerSecond }),
			HealOverFrontier:           median(frontier),
			RecordsLost:                lost})
	}
	return ms
}

// modeNames are the modes of results in the order they first appear.
func modeNames(results []Result) []string {
	var names []string
	for _, r := range results {
		if !slices.Contains(names, r.Mode) {
			names = append(names, r.Mode)
		}
	}
	return names
}

// median is the median of v (the upper one of an even count; 0 for none);
// v is sorted in place.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// WriteTable writes results as a text table, a row per mode and round,
// with the load average beside each.
func WriteTable(w io.Writer, results []Result) {
	fmt.Fprintf(w, "%-12s %5s %6s %9s %9s %7s %5s %17s %17s %9s %5s %5s\n",
		"mode", "round", "load1", "heal MB/s", "limit", "x limit", "x R*", "p50 idle/healing", "p99 idle/healing", "p99 x idle", "cuts", "lost")
	for _, r := range results {
		fmt.Fprintf(w, "%-12s %5d %6.2f %9.1f %9.1f %7.2f %5.2f %17s %17s %9.2f %5d %5d\n",
			r.Mode, r.Round, r.Load1, r.HealBytesPerSecond/1e6, r.HealLimitBytesPerSecond/1e6, r.HealOverLimit, r.HealOverFrontier,
			fmt.Sprintf("%.1f/%.1f ms", r.ClientP50IdleMs, r.ClientP50HealingMs), fmt.Sprintf("%.1f/%.1f ms", r.ClientP99IdleMs, r.ClientP99HealingMs),
			r.ClientP99HealingOverIdle, r.LatencyCuts+r.PressureCuts, r.RecordsLost)
	}
}
