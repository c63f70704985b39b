package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	cfg.KeepLogs = os.Getenv("MALACHI_BENCH_PACING_LOGS")
	rounds := envInt("MALACHI_BENCH_PACING_ROUNDS", 3)
	modes, err := pacingModes(os.Getenv("MALACHI_BENCH_PACING_RATES"))
	if err != nil {
		b.Fatal(err)
	}
	var results []healrun.Result
	for round := 1; round <= rounds; round++ {
		for _, m := range modes {
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

// pacingModes is the modes of a sweep (healrun.Modes when rates is empty).
func pacingModes(rates string) ([]healrun.Mode, error) {
	if rates == "" {
		return healrun.Modes, nil
	}
	var modes []healrun.Mode
	for _, r := range strings.Split(rates, ",") {
		r = strings.TrimSpace(r)
		m := healrun.Mode{Name: r}
		r, keys, _ := strings.Cut(r, "+")
		for kv := range strings.SplitSeq(keys, "+") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m.Extra += k + " = " + v + "\n"
			}
		}
		if rate, fg := strings.CutSuffix(r, "/foreground"); fg {
			r, m.Extra = rate, m.Extra+"backfill_background = false\n"
		}
		if r == "auto" {
			m.Rate = `"auto"`
		} else if n, err := strconv.ParseInt(r, 10, 64); err == nil && n >= 0 {
			m.Rate = r
		} else {
			return nil, fmt.Errorf("MALACHI_BENCH_PACING_RATES: %q is not a rate in bytes per second (0 no cap) or auto, optionally with /foreground and +key=value", r)
		}
		modes = append(modes, m)
	}
	return modes, nil
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
