package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/benchenv"
	"github.com/malachi-log/malachi/testbed/kafkaload"
)

// pacingMode is one catch-up rate of BenchmarkHealPacing.
type pacingMode struct {
	name string
	rate string // heal.backfill_bytes_per_second
}

// pacingModes: a low fixed rate, no cap, and the adaptive default.
var pacingModes = []pacingMode{{"low", "8388608"}, {"unthrottled", "0"}, {"auto", `"auto"`}}

// pacingResult is one mode's figures in one round: what
// MALACHI_BENCH_PACING_OUT records (JSON).
type pacingResult struct {
	Mode                     string  `json:"mode"`
	Round                    int     `json:"round"`
	Load1                    float64 `json:"load1"`
	HealBytes                int64   `json:"heal_bytes"`
	HealSeconds              float64 `json:"heal_seconds"`
	HealBytesPerSecond       float64 `json:"heal_bytes_per_second"`
	HealFloorBytesPerSecond  float64 `json:"heal_floor_bytes_per_second"`
	ClientP50IdleMs          float64 `json:"client_p50_idle_ms"`
	ClientP99IdleMs          float64 `json:"client_p99_idle_ms"`
	ClientP50HealingMs       float64 `json:"client_p50_healing_ms"`
	ClientP99HealingMs       float64 `json:"client_p99_healing_ms"`
	ClientAcksIdle           int     `json:"client_acks_idle"`
	ClientAcksHealing        int     `json:"client_acks_healing"`
	RecordsAcknowledged      int     `json:"records_acknowledged"`
	RecordsLost              int     `json:"records_lost"`
	ProduceFailures          int     `json:"produce_failures"`
	LatencyCuts              int     `json:"latency_cuts"`
	PressureCuts             int     `json:"pressure_cuts"`
	ClientP99HealingOverIdle float64 `json:"client_p99_healing_over_idle"`
	HealOverFloor            float64 `json:"heal_over_floor"`
}

// BenchmarkHealPacing runs the same kill under the same open-loop client
// load three times per round, with the catch-up rate fixed low (8 MiB/s),
// unthrottled (0) and auto, each on a fresh cluster: four brokers of rf 3
// with a Kafka listener, MALACHI_BENCH_PACING_MB (default 512) MiB of
// sealed copies per broker in 64 MiB segments, and a topic of one
// partition whose segments do not roll during the run (so the killed
// broker, chosen outside the partition's replicas and not the control
// plane's leader, costs the clients nothing but the heal's own work). The
// load is two kgo producers (idempotent, acks=all) of 1 KiB records, one
// every 2 ms each: a fixed rate, whatever the latency. The idle window is
// the 10 s before the kill; the healing window runs from the first pass
// that planned a backfill to the pass that found every segment healed.
// Every acknowledged record is read back at the end (records lost). The
// floor (healFloor) is measured before the load starts. The three modes
// run in turn MALACHI_BENCH_PACING_ROUNDS (default 3) times: run it with
// -benchtime 1x; the medians per mode go to MALACHI_BENCH_PACING_OUT.
func BenchmarkHealPacing(b *testing.B) {
	mb, rounds := envInt("MALACHI_BENCH_PACING_MB", 512), envInt("MALACHI_BENCH_PACING_ROUNDS", 3)
	const segMB = 64
	segments := (mb*4/3 + segMB - 1) / segMB
	var results []pacingResult
	for round := 1; round <= rounds; round++ {
		for _, m := range pacingModes {
			b.Run(fmt.Sprintf("rate=%s", m.name), func(b *testing.B) {
				r := runPacing(b, m, segments, int64(segMB)<<20)
				r.Round = round
				results = append(results, r)
				reportPacing(b, r)
			})
		}
	}
	writePacing(b, results)
}

// runPacing is one mode's run.
func runPacing(b *testing.B, m pacingMode, segments int, segBytes int64) pacingResult {
	hc := startHealCluster(b, 4, "backfill_bytes_per_second = "+m.rate+"\n", true, "segment_bytes = 4294967296\nsegment_ms = 0\n")
	hc.load(b, "pace", segments, segBytes)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tlsCfg, err := hc.c.KafkaTLS()
	if err != nil {
		b.Fatal(err)
	}
	cfg := kafkaload.DefaultConfig()
	cfg.Seeds, cfg.TLS, cfg.Topic, cfg.Partitions = hc.c.KafkaSeeds(), tlsCfg, "pacing", 1
	cfg.Producers, cfg.ValueBytes, cfg.Interval = 2, 1024, 2*time.Millisecond
	_, held := hc.victim(b, nil)
	floor := measureHealFloor(b, hc.root, held, 3)
	l, err := kafkaload.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	victim, held := hc.victim(b, hc.partitionReplicas(b, cfg.Topic))
	time.Sleep(15 * time.Second) // 5 s of warm-up, then the 10 s idle window
	load, _ := benchenv.ReadLoad()
	t := hc.killAndHeal(b, victim, held, 15*time.Minute)
	idle := l.AckLatenciesBetween(t.Killed.Add(-10*time.Second), t.Killed)
	healing := l.AckLatenciesBetween(t.FirstPlan, t.Healed)
	rep := l.Finish(ctx)
	if rep.Error != "" {
		b.Fatalf("reading the records back: %s", rep.Error)
	}
	r := pacingResult{Mode: m.name, Load1: load.One, HealBytes: t.Bytes, HealSeconds: t.Window().Seconds(),
		HealBytesPerSecond: t.Rate(), HealFloorBytesPerSecond: floor.Floor(),
		ClientP50IdleMs: kafkaload.QuantileMs(idle, 0.5), ClientP99IdleMs: kafkaload.QuantileMs(idle, 0.99),
		ClientP50HealingMs: kafkaload.QuantileMs(healing, 0.5), ClientP99HealingMs: kafkaload.QuantileMs(healing, 0.99),
		ClientAcksIdle: len(idle), ClientAcksHealing: len(healing),
		RecordsAcknowledged: rep.Acknowledged, RecordsLost: rep.Lost, ProduceFailures: rep.ProduceFailures,
		LatencyCuts: t.LatencyCuts, PressureCuts: t.PressureCuts}
	r.ClientP99HealingOverIdle = r.ClientP99HealingMs / r.ClientP99IdleMs
	r.HealOverFloor = r.HealBytesPerSecond / r.HealFloorBytesPerSecond
	if len(idle) == 0 || len(healing) == 0 {
		b.Fatalf("%d acknowledgements in the idle window, %d while healing: no latency to compare", len(idle), len(healing))
	}
	if !rep.OK() {
		b.Fatalf("clients: %d lost, %d duplicated, %d out of order", rep.Lost, rep.Duplicated, rep.OutOfOrder)
	}
	b.Logf("%s: killed broker %d; healed %d MB in %.1f s; client p99 %.1f ms idle, %.1f ms healing; auto cut the rate %d times for latency, %d for pressure",
		m.name, victim.ID, t.Bytes/1e6, t.Window().Seconds(), r.ClientP99IdleMs, r.ClientP99HealingMs, t.LatencyCuts, t.PressureCuts)
	hc.c.Stop()
	return r
}

// partitionReplicas are the brokers of every segment of topic's chains.
func (hc *healCluster) partitionReplicas(b *testing.B, topic string) map[meta.BrokerID]bool {
	snap, err := hc.c.LeaderBroker(context.Background()).Client.Metadata(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	out := map[meta.BrokerID]bool{}
	for _, s := range snap.Segments {
		if t, _, _, ok := meta.ParsePartitionSegment(s.ID); ok && t == topic {
			for _, r := range s.Replicas {
				out[r] = true
			}
		}
	}
	if len(out) == 0 {
		b.Fatalf("topic %s has no segment in the metadata", topic)
	}
	return out
}

func reportPacing(b *testing.B, r pacingResult) {
	b.ReportMetric(r.Load1, "load1")
	b.ReportMetric(r.HealBytesPerSecond/1e6, "heal-MB/s")
	b.ReportMetric(r.HealFloorBytesPerSecond/1e6, "floor-MB/s")
	b.ReportMetric(r.HealOverFloor, "x-floor")
	b.ReportMetric(r.ClientP99IdleMs, "p99-idle-ms")
	b.ReportMetric(r.ClientP99HealingMs, "p99-healing-ms")
	b.ReportMetric(r.ClientP99HealingOverIdle, "p99-x-idle")
	b.ReportMetric(float64(r.RecordsLost), "lost")
}

// writePacing writes every round's results as JSON to
// MALACHI_BENCH_PACING_OUT (default: pacing.json in the fixture
// directory), with the medians per mode.
func writePacing(b *testing.B, results []pacingResult) {
	if len(results) == 0 {
		return
	}
	out := os.Getenv("MALACHI_BENCH_PACING_OUT")
	if out == "" {
		out = filepath.Join(benchRoot(b), "pacing.json")
	}
	type medians struct {
		Mode                     string  `json:"mode"`
		HealBytesPerSecond       float64 `json:"heal_bytes_per_second"`
		HealFloorBytesPerSecond  float64 `json:"heal_floor_bytes_per_second"`
		ClientP99IdleMs          float64 `json:"client_p99_idle_ms"`
		ClientP99HealingMs       float64 `json:"client_p99_healing_ms"`
		ClientP99HealingOverIdle float64 `json:"client_p99_healing_over_idle"`
		HealOverFloor            float64 `json:"heal_over_floor"`
		RecordsLost              int     `json:"records_lost"`
	}
	var ms []medians
	for _, m := range pacingModes {
		var rs []pacingResult
		for _, r := range results {
			if r.Mode == m.name {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		med := func(f func(pacingResult) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		lost := 0
		for _, r := range rs {
			lost += r.RecordsLost
		}
		ms = append(ms, medians{Mode: m.name,
			HealBytesPerSecond:       med(func(r pacingResult) float64 { return r.HealBytesPerSecond }),
			HealFloorBytesPerSecond:  med(func(r pacingResult) float64 { return r.HealFloorBytesPerSecond }),
			ClientP99IdleMs:          med(func(r pacingResult) float64 { return r.ClientP99IdleMs }),
			ClientP99HealingMs:       med(func(r pacingResult) float64 { return r.ClientP99HealingMs }),
			ClientP99HealingOverIdle: med(func(r pacingResult) float64 { return r.ClientP99HealingOverIdle }),
			HealOverFloor:            med(func(r pacingResult) float64 { return r.HealOverFloor }),
			RecordsLost:              lost})
	}
	raw, err := json.MarshalIndent(map[string]any{"rounds": results, "medians": ms}, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(out, append(raw, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("pacing results in %s", out)
}
