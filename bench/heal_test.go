package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/benchenv"
	"github.com/malachi-log/malachi/testbed/healrun"
)

// The heal benchmarks run real malachid processes through testbed/healrun:
// load sealed segments, kill one broker, time the heal from the leader's
// pass history, against the heal's limit measured in the same round
// (healrun.Limit).

// BenchmarkHealAtScale: four brokers of rf 3, each holding
// MALACHI_BENCH_HEAL_MB (default 2048) MiB of sealed copies in segments of
// MALACHI_BENCH_HEAL_SEGMENT_MB (default 128) MiB; one broker (not the
// leader) is killed, and its copies heal unthrottled
// (heal.backfill_bytes_per_second = 0) onto the three others. Each round
// starts a fresh cluster, loads it, measures the limit (healrun.Limit) for
// the killed broker's bytes onto three targets in copies of a segment,
// then kills and times the heal. Reported: heal-MB/s, limit-MB/s, x-limit
// (the heal over the limit, at most 1: a heal above its limit fails the
// round, naming both), disk-MB/s and loopback-MB/s (the limit's halves),
// load1, the window in seconds, and the
// stages summed over the backfills (wait, transfer, commit) and the
// leader's record of the new sets. MALACHI_BENCH_HEAL_EXTRA adds TOML
// lines to the brokers' [heal] tables (e.g. max_transfers_per_broker = 1).
func BenchmarkHealAtScale(b *testing.B) {
	mb, segMB := envInt("MALACHI_BENCH_HEAL_MB", 2048), envInt("MALACHI_BENCH_HEAL_SEGMENT_MB", 128)
	perBroker := int64(mb) << 20
	segBytes := int64(segMB) << 20
	segments := healrun.SegmentsFor(perBroker, segBytes, 4)
	b.Run(fmt.Sprintf("brokers=4/per-broker=%dMiB/segment=%dMiB", mb, segMB), func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
			hc, err := healrun.Start(ctx, healrun.ClusterConfig{Bin: kafkaBinary(b), Root: benchRoot(b), Brokers: 4, HealExtra: "backfill_bytes_per_second = 0\n" + os.Getenv("MALACHI_BENCH_HEAL_EXTRA")})
			if err != nil {
				b.Fatal(err)
			}
			t, limit, err := healAtScale(ctx, b, hc, segments, segBytes)
			hc.Stop()
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			reportHeal(b, t, limit)
		}
	})
}

// healAtScale loads hc, measures the limit, kills and heals with the
// timer running, and measures the limit again (the best of the two is
// kept, healrun.Limit.Best).
func healAtScale(ctx context.Context, b *testing.B, hc *healrun.Cluster, segments int, segBytes int64) (healrun.Timing, healrun.Limit, error) {
	loaded, took, err := hc.Load(ctx, "scale", segments, segBytes)
	if err != nil {
		return healrun.Timing{}, healrun.Limit{}, err
	}
	b.Logf("loaded %d segments, %d bytes, in %.1f s", segments, loaded, took)
	victim, held, err := hc.Victim(ctx, nil)
	if err != nil {
		return healrun.Timing{}, healrun.Limit{}, err
	}
	limit, err := healrun.MeasureLimit(hc.Dir, healrun.Pattern{Bytes: held, Targets: 3, CopyBytes: segBytes + store.FooterSize})
	if err != nil {
		return healrun.Timing{}, limit, err
	}
	benchenv.ReportLoad(b)
	b.StartTimer()
	t, err := hc.KillAndHeal(ctx, victim, held, 30*time.Minute, 0)
	b.StopTimer()
	if err != nil {
		return t, limit, err
	}
	after, err := healrun.MeasureLimit(hc.Dir, healrun.Pattern{Bytes: held, Targets: 3, CopyBytes: segBytes + store.FooterSize})
	if err != nil {
		return t, limit, err
	}
	limit = limit.Best(after)
	return t, limit, limit.Check(t.Rate())
}

// reportHeal reports one heal's figures against its limit.
func reportHeal(b *testing.B, t healrun.Timing, limit healrun.Limit) {
	mb := func(bps float64) float64 { return bps / 1e6 }
	b.ReportMetric(mb(t.Rate()), "heal-MB/s")
	b.ReportMetric(mb(limit.Rate()), "limit-MB/s")
	b.ReportMetric(t.Rate()/limit.Rate(), "x-limit")
	b.ReportMetric(mb(limit.Disk), "disk-MB/s")
	b.ReportMetric(mb(limit.Loopback), "loopback-MB/s")
	b.ReportMetric(t.Window().Seconds(), "window-s")
	b.ReportMetric(t.Transfer.Seconds(), "transfer-s")
	b.ReportMetric(t.Commit.Seconds(), "commit-s")
	b.ReportMetric(t.Wait.Seconds(), "wait-s")
	b.ReportMetric(t.Record.Seconds(), "record-s")
	b.Logf("killed a broker holding %d MB: first plan %.1f s after the kill, healed %.1f s later (%d passes, %d backfills; "+
		"summed over the backfills: wait %.1f s, transfer %.1f s, commit %.1f s; record %.2f s); limit: disk %.0f MB/s, loopback %.0f MB/s",
		t.Bytes/1e6, t.FirstPlan.Sub(t.Killed).Seconds(), t.Window().Seconds(), t.Passes, t.Backfills,
		t.Wait.Seconds(), t.Transfer.Seconds(), t.Commit.Seconds(), t.Record.Seconds(), mb(limit.Disk), mb(limit.Loopback))
}

// envInt is the positive integer in the environment variable name, or def.
func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err == nil && n > 0 {
		return n
	}
	return def
}
