package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/healrun"
)

// BenchmarkHealPacing runs the same kill under the same open-loop client
// load three times per round (healrun.RunPacing), with the catch-up rate
// fixed low (8 MiB/s), unthrottled (0) and auto, each on a fresh cluster:
// four brokers of rf 3 with a Kafka listener, MALACHI_BENCH_PACING_MB
// (default 512) MiB of sealed copies per broker in 64 MiB segments, two
// kgo producers of 1 KiB records every 2 ms each. The three modes run in
// turn MALACHI_BENCH_PACING_ROUNDS (default 3) times: run it with
// -benchtime 1x; every round and the medians per mode go to
// MALACHI_BENCH_PACING_OUT as JSON.
func BenchmarkHealPacing(b *testing.B) {
	cfg := healrun.DefaultPacing(kafkaBinary(b), benchRoot(b))
	cfg.Segments = healrun.SegmentsFor(int64(envInt("MALACHI_BENCH_PACING_MB", 512))<<20, cfg.SegmentBytes, cfg.Brokers)
	cfg.Logf = b.Logf
	rounds := envInt("MALACHI_BENCH_PACING_ROUNDS", 3)
	var results []healrun.Result
	for round := 1; round <= rounds; round++ {
		for _, m := range healrun.Modes {
			b.Run(fmt.Sprintf("rate=%s", m.Name), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				defer cancel()
				r, err := healrun.RunPacing(ctx, cfg, m)
				if err != nil {
					b.Fatal(err)
				}
				r.Round = round
				results = append(results, r)
				reportPacing(b, r)
			})
		}
	}
	writePacing(b, results)
}

func reportPacing(b *testing.B, r healrun.Result) {
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
func writePacing(b *testing.B, results []healrun.Result) {
	if len(results) == 0 {
		return
	}
	out := os.Getenv("MALACHI_BENCH_PACING_OUT")
	if out == "" {
		out = filepath.Join(benchRoot(b), "pacing.json")
	}
	raw, err := json.MarshalIndent(map[string]any{"rounds": results, "medians": healrun.Medians(results)}, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(out, append(raw, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("pacing results in %s", out)
}
