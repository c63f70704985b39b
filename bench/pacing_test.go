package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/healrun"
)

// BenchmarkHealPacing draws the frontier of a heal under client load and
// places auto on it: the same kill under the same open-loop client load
// once per mode (healrun.RunPacing), each on a fresh cluster of four
// brokers of rf 3 with a Kafka listener, MALACHI_BENCH_PACING_MB (default
// 512) MiB of sealed copies per broker in 64 MiB segments, two kgo
// producers of 1 KiB records every 2 ms each. A capped fixed mode's heal
// is measured over its first MALACHI_BENCH_PACING_WINDOW seconds (default
// 60; 0: to its end; healrun.PacingConfig.FixedWindow). The modes are
// MALACHI_BENCH_PACING_RATES (healrun.ParseModes; default healrun.Modes:
// fixed per-broker rates of 8, 32, 64, 128 and 256 MiB/s, unthrottled,
// auto); every mode runs once per round, MALACHI_BENCH_PACING_ROUNDS
// (default 3) rounds, each round's order rotated by one. Each round's R*
// is the highest heal rate of a fixed mode whose clients' p99 stayed
// within 1.5x idle; each mode's heal is reported over its limit and over
// its round's R*. Run it with -benchtime 1x; every round, the frontiers
// and the medians go to MALACHI_BENCH_PACING_OUT as JSON
// (healrun.Summary).
func BenchmarkHealPacing(b *testing.B) {
	cfg := healrun.DefaultPacing(kafkaBinary(b), benchRoot(b))
	cfg.Segments = healrun.SegmentsFor(int64(envInt("MALACHI_BENCH_PACING_MB", 512))<<20, cfg.SegmentBytes, cfg.Brokers)
	cfg.Logf = b.Logf
	cfg.KeepLogs = os.Getenv("MALACHI_BENCH_PACING_LOGS")
	if w := os.Getenv("MALACHI_BENCH_PACING_WINDOW"); w != "" {
		var s int
		if _, err := fmt.Sscan(w, &s); err != nil || s < 0 {
			b.Fatalf("MALACHI_BENCH_PACING_WINDOW=%q: want whole seconds, 0 to heal to the end", w)
		}
		cfg.FixedWindow = time.Duration(s) * time.Second
	}
	rounds := envInt("MALACHI_BENCH_PACING_ROUNDS", 3)
	modes, err := healrun.ParseModes(os.Getenv("MALACHI_BENCH_PACING_RATES"))
	if err != nil {
		b.Fatalf("MALACHI_BENCH_PACING_RATES: %v", err)
	}
	var results []healrun.Result
	for round := 1; round <= rounds; round++ {
		for _, m := range healrun.RoundOrder(modes, round) {
			b.Run(fmt.Sprintf("rate=%s", m.Name), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				defer cancel()
				r, err := healrun.RunPacing(ctx, cfg, m)
				if err != nil {
					b.Fatalf("round %d: %v", round, err)
				}
				r.Round = round
				results = append(results, r)
				reportPacing(b, r)
			})
		}
		for _, f := range healrun.SetFrontier(results, healrun.FixedIn(modes)) {
			if f.Round == round {
				b.Log(f)
			}
		}
	}
	writePacing(b, healrun.Summarize(results, modes))
}

func reportPacing(b *testing.B, r healrun.Result) {
	b.ReportMetric(r.Load1, "load1")
	b.ReportMetric(r.HealBytesPerSecond/1e6, "heal-MB/s")
	b.ReportMetric(r.HealLimitBytesPerSecond/1e6, "limit-MB/s")
	b.ReportMetric(r.HealOverLimit, "x-limit")
	b.ReportMetric(r.ClientP99IdleMs, "p99-idle-ms")
	b.ReportMetric(r.ClientP99HealingMs, "p99-healing-ms")
	b.ReportMetric(r.ClientP99HealingOverIdle, "p99-x-idle")
	b.ReportMetric(float64(r.RecordsLost), "lost")
}

// writePacing logs s and writes it as JSON to MALACHI_BENCH_PACING_OUT
// (default: pacing.json in the fixture directory).
func writePacing(b *testing.B, s healrun.Summary) {
	if len(s.Rounds) == 0 {
		return
	}
	var text strings.Builder
	s.Write(&text)
	b.Logf("the frontier:\n%s", text.String())
	out := os.Getenv("MALACHI_BENCH_PACING_OUT")
	if out == "" {
		out = filepath.Join(benchRoot(b), "pacing.json")
	}
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(out, append(raw, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("pacing results in %s", out)
}
