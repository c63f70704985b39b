package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/benchenv"
	"github.com/malachi-log/malachi/testbed/harness"
)

// The heal benchmarks run real malachid processes (testbed/harness,
// loopback, mutual TLS), load sealed segments through POST /v1/load, kill
// one broker and time the heal from the leader's pass history: from the
// start of the first pass that planned a backfill to the end of the first
// pass that found every sealed segment back at its replication factor
// without the killed broker. Each round measures the machine's floor for
// the same work just before its heal (healFloor) and reports the heal's
// rate against it.

// healCluster is a running cluster for a heal benchmark.
type healCluster struct {
	c    *harness.Cluster
	root string
}

// startHealCluster starts n brokers of rf 3 with a 1 s tick, a 2 s grace
// and healExtra in their [heal] tables (and a Kafka listener with
// kafkaTable when kafka is set), under the fixture directory; it stops
// them when b ends.
func startHealCluster(b *testing.B, n int, healExtra string, kafka bool, kafkaTable string) *healCluster {
	bin := kafkaBinary(b)
	if err := os.MkdirAll(benchRoot(b), 0o755); err != nil {
		b.Fatal(err)
	}
	root, err := os.MkdirTemp(benchRoot(b), "heal-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	c, err := harness.New(harness.Config{Bin: bin, Root: root, Brokers: n, RF: 3, Tick: time.Second, Grace: 2 * time.Second,
		HealExtra: healExtra, Kafka: kafka, KafkaTable: kafkaTable, CallTimeout: 20 * time.Minute}) // a load of GiBs is one call
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.WaitReady(ctx, 60*time.Second); err != nil {
		b.Fatal(err)
	}
	if err := c.WaitRegistered(ctx, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	return &healCluster{c: c, root: root}
}

// load writes and seals segments segments of segBytes each (64 KiB
// records) named prefix-NNNNN through the leader, and returns their bytes.
func (hc *healCluster) load(b *testing.B, prefix string, segments int, segBytes int64) int64 {
	const record = 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	leader := hc.c.LeaderBroker(ctx)
	if leader == nil {
		b.Fatal("no leader to load through")
	}
	raw, err := leader.Client.Load(ctx, admin.LoadRequest{Segments: segments, RecordsPerSegment: int(segBytes / record),
		RecordSize: record, Prefix: prefix, Concurrency: 4})
	if err != nil {
		b.Fatalf("loading %d segments of %d bytes: %v", segments, segBytes, err)
	}
	var res struct {
		Bytes   int64   `json:"bytes"`
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d segments, %d bytes, in %.1f s", segments, res.Bytes, res.Seconds)
	return res.Bytes
}

// victim picks the broker to kill: not in avoid, not the control plane's
// leader unless every other broker is avoided, holding the most sealed
// bytes; it returns the broker and the bytes of the copies it holds.
func (hc *healCluster) victim(b *testing.B, avoid map[meta.BrokerID]bool) (*harness.Broker, int64) {
	ctx := context.Background()
	leader := hc.c.LeaderBroker(ctx)
	snap, err := leader.Client.Metadata(ctx)
	if err != nil {
		b.Fatal(err)
	}
	held := map[meta.BrokerID]int64{}
	for _, s := range snap.Segments {
		if s.Sealed {
			for _, r := range s.Replicas {
				held[r] += s.ByteSize
			}
		}
	}
	var best *harness.Broker
	for _, br := range hc.c.Brokers() {
		if br.ID == leader.ID || avoid[br.ID] {
			continue
		}
		if best == nil || held[br.ID] > held[best.ID] {
			best = br
		}
	}
	if best == nil && !avoid[leader.ID] {
		best = leader
	}
	if best == nil {
		b.Fatalf("no broker to kill: every one is avoided (%v)", avoid)
	}
	return best, held[best.ID]
}

// healTiming is one kill's heal, read from the pass history and the
// brokers' metrics.
type healTiming struct {
	Killed    time.Time
	FirstPlan time.Time // the start of the first pass that planned a backfill
	Healed    time.Time // the end of the first pass that found every segment healed
	Bytes     int64     // the bytes the killed broker held (sealed)
	Passes    int
	Wait      time.Duration // summed over the backfills: waiting for a transfer slot
	Transfer  time.Duration // ... receiving the bytes
	Commit    time.Duration // ... verifying and syncing the copy
	Backfills int
	Record    time.Duration // the leader's SetSegmentReplicas commits, summed
	// LatencyCuts and PressureCuts count the times an "auto" rate was
	// lowered, over the running brokers.
	LatencyCuts, PressureCuts int
}

// Window is the heal's time from the first plan to healed.
func (t healTiming) Window() time.Duration { return t.Healed.Sub(t.FirstPlan) }

// Rate is the killed broker's bytes over the window, in bytes per second.
func (t healTiming) Rate() float64 { return float64(t.Bytes) / t.Window().Seconds() }

// killAndHeal SIGKILLs victim and reads the leader's passes until one
// finds every sealed segment healed (no under-replicated segment, the
// victim dead), within limit.
func (hc *healCluster) killAndHeal(b *testing.B, victim *harness.Broker, held int64, limit time.Duration) healTiming {
	ctx := context.Background()
	before := hc.stageSums(b, victim.ID)
	t := healTiming{Bytes: held, Killed: time.Now()}
	if err := hc.c.Kill(victim); err != nil {
		b.Fatal(err)
	}
	feed := harness.NewPassFeed(t.Killed)
	_, err := feed.Until(ctx, hc.c, limit, func(p *plugin.PassRecord) (bool, string) {
		t.Passes++
		r := p.Report
		if r.Backfills > 0 && t.FirstPlan.IsZero() {
			t.FirstPlan = p.Started
		}
		dead := false
		for _, d := range r.Dead {
			dead = dead || d == victim.ID
		}
		if t.FirstPlan.IsZero() || !dead || r.UnderReplicated > 0 || len(r.Failed) > 0 {
			return false, fmt.Sprintf("pass %d: dead %v, %d under-replicated, %d backfills, %d failed", p.Seq, r.Dead, r.UnderReplicated, r.Backfills, len(r.Failed))
		}
		t.Healed = p.Ended
		return true, ""
	})
	if err != nil {
		b.Fatalf("broker %d killed: %v", victim.ID, err)
	}
	after := hc.stageSums(b, victim.ID)
	t.Wait, t.Transfer, t.Commit = after.wait-before.wait, after.transfer-before.transfer, after.commit-before.commit
	t.Backfills, t.Record = after.backfills-before.backfills, after.record-before.record
	t.LatencyCuts, t.PressureCuts = after.latencyCuts-before.latencyCuts, after.pressureCuts-before.pressureCuts
	return t
}

// stageSums are the heal metrics summed over the running brokers.
type stageSums struct {
	wait, transfer, commit, record       time.Duration
	backfills, latencyCuts, pressureCuts int
}

// stageSums reads the /metrics of the running brokers but skip: the backfill
// stages' histogram sums and counts, the command durations, the rate cuts.
func (hc *healCluster) stageSums(b *testing.B, skip meta.BrokerID) stageSums {
	var s stageSums
	for _, br := range hc.c.Running() {
		if br.ID == skip {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		body, err := hc.c.RPC().GetRaw(ctx, br.RPC, "/metrics")
		cancel()
		if err != nil {
			b.Fatalf("broker %d's metrics: %v", br.ID, err)
		}
		m := parseMetrics(body)
		s.wait += seconds(m[`malachi_heal_backfill_stage_seconds_sum{stage="wait"}`])
		s.transfer += seconds(m[`malachi_heal_backfill_stage_seconds_sum{stage="transfer"}`])
		s.commit += seconds(m[`malachi_heal_backfill_stage_seconds_sum{stage="commit"}`])
		s.backfills += int(m[`malachi_heal_backfill_stage_seconds_count{stage="transfer"}`])
		s.record += seconds(m["malachi_heal_command_duration_seconds_sum"])
		s.latencyCuts += int(m[`malachi_heal_backfill_rate_cuts_total{reason="latency"}`])
		s.pressureCuts += int(m[`malachi_heal_backfill_rate_cuts_total{reason="pressure"}`])
	}
	return s
}

// parseMetrics reads the Prometheus text format's samples by their full
// name with labels.
func parseMetrics(body []byte) map[string]float64 {
	m := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// healFloor is what this machine does, just before a heal, for the heal's
// work of moving n bytes onto targets brokers: the disk's sequential
// write rate (targets files of n/targets bytes written at once in 1 MiB
// writes into the brokers' filesystem, each synced, as a committed
// backfill is) and the loopback rate (targets sendfile streams of a
// page-cached file over loopback TCP at once, drained into a buffer). The
// floor is the lower; both are bytes per second.
type healFloor struct{ Disk, Loopback float64 }

func (f healFloor) Floor() float64 { return min(f.Disk, f.Loopback) }

func measureHealFloor(b *testing.B, dir string, n int64, targets int) healFloor {
	per := n / int64(targets)
	var f healFloor
	var err error
	if f.Disk, err = diskWriteRate(dir, per, targets); err != nil {
		b.Fatalf("disk floor: %v", err)
	}
	if f.Loopback, err = loopbackRate(dir, min(per, 1<<30), targets); err != nil {
		b.Fatalf("loopback floor: %v", err)
	}
	return f
}

// diskWriteRate writes streams files of per bytes at once in dir and
// syncs each; it returns the bytes per second of the whole.
func diskWriteRate(dir string, per int64, streams int) (float64, error) {
	buf := bytes.Repeat([]byte{0x5a}, 1<<20)
	var wg sync.WaitGroup
	errs := make([]error, streams)
	start := time.Now()
	for i := range streams {
		wg.Go(func() {
			path := filepath.Join(dir, fmt.Sprintf("floor-disk-%d", i))
			defer os.Remove(path)
			errs[i] = writeSynced(path, buf, per)
		})
	}
	wg.Wait()
	took := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(per*int64(streams)) / took.Seconds(), nil
}

func writeSynced(path string, buf []byte, n int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for off := int64(0); off < n; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), n-off)], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// loopbackRate sends a file of per bytes (written, so in the page cache)
// over streams loopback TCP connections at once with sendfile, each
// drained by a reader into a 1 MiB buffer; bytes per second of the whole.
func loopbackRate(dir string, per int64, streams int) (float64, error) {
	path := filepath.Join(dir, "floor-net")
	defer os.Remove(path)
	if err := writeSynced(path, bytes.Repeat([]byte{0xa5}, 1<<20), per); err != nil {
		return 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	errs := make(chan error, 2*streams)
	var wg sync.WaitGroup
	start := time.Now()
	for range streams {
		wg.Go(func() { errs <- sendFileTo(ln.Addr().String(), path, per) })
		wg.Go(func() {
			conn, err := ln.Accept()
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			got, err := io.CopyBuffer(io.Discard, conn, make([]byte, 1<<20))
			if err == nil && got != per {
				err = fmt.Errorf("loopback floor: %d of %d bytes", got, per)
			}
			errs <- err
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(per*int64(streams)) / took.Seconds(), nil
}

func sendFileTo(addr, path string, n int64) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	var sent int64
	var serr error
	werr := raw.Write(func(fd uintptr) bool {
		for sent < n {
			off := sent
			m, err := unix.Sendfile(int(fd), int(f.Fd()), &off, int(min(n-sent, 1<<30)))
			if err == unix.EAGAIN {
				return false
			}
			if err != nil {
				serr = err
				return true
			}
			sent += int64(m)
		}
		return true
	})
	if werr != nil {
		return werr
	}
	return serr
}

// BenchmarkHealAtScale: four brokers of rf 3, each holding
// MALACHI_BENCH_HEAL_MB (default 2048) MiB of sealed copies in segments of
// MALACHI_BENCH_HEAL_SEGMENT_MB (default 128) MiB; one broker (not the
// leader) is killed, and its copies heal unthrottled
// (heal.backfill_bytes_per_second = 0) onto the three others. Each round
// starts a fresh cluster, loads it, measures the floor (healFloor) for
// the killed broker's bytes onto three targets, then kills and times the
// heal. Reported: heal-MB/s, floor-MB/s, x-floor (the heal over the
// floor), disk-MB/s and loopback-MB/s, the window in seconds, and the
// stages summed over the backfills (wait, transfer, commit) and the
// leader's record of the new sets.
func BenchmarkHealAtScale(b *testing.B) {
	mb, segMB := envInt("MALACHI_BENCH_HEAL_MB", 2048), envInt("MALACHI_BENCH_HEAL_SEGMENT_MB", 128)
	perBroker := int64(mb) << 20
	segBytes := int64(segMB) << 20
	segments := int((perBroker*4/3 + segBytes - 1) / segBytes) // rf 3 over 4 brokers
	b.Run(fmt.Sprintf("brokers=4/per-broker=%dMiB/segment=%dMiB", mb, segMB), func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			hc := startHealCluster(b, 4, "backfill_bytes_per_second = 0\n", false, "")
			hc.load(b, "scale", segments, segBytes)
			victim, held := hc.victim(b, nil)
			floor := measureHealFloor(b, hc.root, held, 3)
			benchenv.ReportLoad(b)
			b.StartTimer()
			t := hc.killAndHeal(b, victim, held, 30*time.Minute)
			b.StopTimer()
			reportHeal(b, t, floor)
			hc.c.Stop()
		}
	})
}

// reportHeal reports one heal's figures against its floor.
func reportHeal(b *testing.B, t healTiming, floor healFloor) {
	mb := func(bps float64) float64 { return bps / 1e6 }
	b.ReportMetric(mb(t.Rate()), "heal-MB/s")
	b.ReportMetric(mb(floor.Floor()), "floor-MB/s")
	b.ReportMetric(t.Rate()/floor.Floor(), "x-floor")
	b.ReportMetric(mb(floor.Disk), "disk-MB/s")
	b.ReportMetric(mb(floor.Loopback), "loopback-MB/s")
	b.ReportMetric(t.Window().Seconds(), "window-s")
	b.ReportMetric(t.Transfer.Seconds(), "transfer-s")
	b.ReportMetric(t.Commit.Seconds(), "commit-s")
	b.ReportMetric(t.Wait.Seconds(), "wait-s")
	b.ReportMetric(t.Record.Seconds(), "record-s")
	b.Logf("killed a broker holding %d MB: first plan %.1f s after the kill, healed %.1f s later (%d passes, %d backfills; "+
		"summed over the backfills: wait %.1f s, transfer %.1f s, commit %.1f s; record %.2f s); floor: disk %.0f MB/s, loopback %.0f MB/s",
		t.Bytes/1e6, t.FirstPlan.Sub(t.Killed).Seconds(), t.Window().Seconds(), t.Passes, t.Backfills,
		t.Wait.Seconds(), t.Transfer.Seconds(), t.Commit.Seconds(), t.Record.Seconds(), mb(floor.Disk), mb(floor.Loopback))
}

// envInt is the positive integer in the environment variable name, or def.
func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err == nil && n > 0 {
		return n
	}
	return def
}
