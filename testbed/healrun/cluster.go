package healrun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
)

// ClusterConfig is a heal cluster's shape.
type ClusterConfig struct {
	Bin     string // the malachid binary
	Root    string // a directory of its own is made under it
	Brokers int    // rf 3 over this many brokers (at least 4)
	// HealExtra is added to every broker's [heal] table (the catch-up
	// rate), KafkaTable to its [kafka] table when Kafka is set.
	HealExtra  string
	Kafka      bool
	KafkaTable string
	// KeepLogs, when set, is a directory Stop moves the brokers' logs into
	// (KeepLogs/<cluster>-bN.log) before it removes the cluster.
	KeepLogs string
}

// Cluster is a running heal cluster.
type Cluster struct {
	C        *harness.Cluster
	Dir      string // its directory (the limit is measured there too)
	keepLogs string
}

// Start starts the brokers (a 1 s tick, a 2 s grace) and waits until they
// have a leader and are registered. Stop stops them and removes the
// directory.
func Start(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.Root, "heal-")
	if err != nil {
		return nil, err
	}
	c, err := harness.New(harness.Config{Bin: cfg.Bin, Root: dir, Brokers: cfg.Brokers, RF: 3, Tick: time.Second, Grace: 2 * time.Second,
		HealExtra: cfg.HealExtra, Kafka: cfg.Kafka, KafkaTable: cfg.KafkaTable, CallTimeout: 20 * time.Minute}) // a load of GiBs is one call
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	hc := &Cluster{C: c, Dir: dir, keepLogs: cfg.KeepLogs}
	if err := c.Start(); err != nil {
		hc.Stop()
		return nil, err
	}
	if _, err := c.WaitReady(ctx, 60*time.Second); err != nil {
		hc.Stop()
		return nil, err
	}
	if err := c.WaitRegistered(ctx, 30*time.Second); err != nil {
		hc.Stop()
		return nil, err
	}
	return hc, nil
}

// Stop stops the brokers and removes the cluster's directory.
func (hc *Cluster) Stop() {
	hc.C.Stop()
	if hc.keepLogs != "" && os.MkdirAll(hc.keepLogs, 0o755) == nil {
		for _, b := range hc.C.Brokers() {
			os.Rename(b.LogPath, filepath.Join(hc.keepLogs, fmt.Sprintf("%s-b%d.log", filepath.Base(hc.Dir), b.ID)))
		}
	}
	os.RemoveAll(hc.Dir)
}

// Load writes and seals segments segments of segBytes each (64 KiB
// records) named prefix-NNNNN through the leader; it returns their bytes
// and the seconds the load took.
func (hc *Cluster) Load(ctx context.Context, prefix string, segments int, segBytes int64) (int64, float64, error) {
	const record = 64 << 10
	leader := hc.C.Leader(ctx)
	if leader == nil {
		return 0, 0, fmt.Errorf("healrun: no leader to load %d segments through", segments)
	}
	raw, err := leader.Client.Load(ctx, admin.LoadRequest{Segments: segments, RecordsPerSegment: int(max(1, segBytes/record)),
		RecordSize: record, Prefix: prefix, Concurrency: 4})
	if err != nil {
		return 0, 0, fmt.Errorf("healrun: loading %d segments of %d bytes: %w", segments, segBytes, err)
	}
	var res struct {
		Bytes   int64   `json:"bytes"`
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return 0, 0, fmt.Errorf("healrun: the load's answer: %w", err)
	}
	return res.Bytes, res.Seconds, nil
}

// Victim picks the broker to kill: not in avoid, not the control plane's
// leader unless every other broker is avoided, holding the most sealed
// bytes; it returns the broker and the bytes of the copies it holds.
func (hc *Cluster) Victim(ctx context.Context, avoid map[meta.BrokerID]bool) (*harness.Broker, int64, error) {
	leader := hc.C.Leader(ctx)
	if leader == nil {
		return nil, 0, fmt.Errorf("healrun: no leader to read the metadata from")
	}
	snap, err := leader.Client.Metadata(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("healrun: metadata: %w", err)
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
	for _, br := range hc.C.Brokers() {
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
		return nil, 0, fmt.Errorf("healrun: no broker to kill: every one is avoided (%v)", avoid)
	}
	return best, held[best.ID], nil
}

// PartitionReplicas are the brokers of every segment of topic's chains.
func (hc *Cluster) PartitionReplicas(ctx context.Context, topic string) (map[meta.BrokerID]bool, error) {
	leader := hc.C.Leader(ctx)
	if leader == nil {
		return nil, fmt.Errorf("healrun: no leader to read the metadata from")
	}
	snap, err := leader.Client.Metadata(ctx)
	if err != nil {
		return nil, fmt.Errorf("healrun: metadata: %w", err)
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
		return nil, fmt.Errorf("healrun: topic %s has no segment in the metadata", topic)
	}
	return out, nil
}

// Timing is one kill's heal, read from the pass history and the brokers'
// metrics.
type Timing struct {
	Killed    time.Time
	FirstPlan time.Time // the start of the first pass that planned a backfill
	// Healed is the end of the first pass that found every segment
	// healed; under a window, when the window's bytes were read.
	Healed time.Time
	// Bytes is what the killed broker held (sealed); under a window, the
	// bytes of the backfills that arrived in it (Windowed).
	Bytes  int64
	Passes int
	// Windowed: the heal was measured over a window of it (KillAndHeal's
	// window), from FirstPlan (here the last reading before bytes began to
	// arrive) to Healed, and not waited for to its end.
	Windowed  bool
	Wait      time.Duration // summed over the backfills: waiting for a transfer slot
	Transfer  time.Duration // ... receiving the bytes
	Commit    time.Duration // ... verifying and syncing the copy
	Backfills int
	Record    time.Duration // the leader's SetSegmentReplicas commits, summed
	// LatencyCuts and PressureCuts count the times an "auto" rate was
	// lowered, over the running brokers.
	LatencyCuts, PressureCuts int
	// Ramp is how long after FirstPlan the heal reached its steady rate
	// (Ramp: RampShare of its mean rate over RampSpan); RampKnown false
	// when it never did by the bytes read every arrivalsEvery.
	Ramp      time.Duration
	RampKnown bool
}

// Window is the heal's time from the first plan to healed.
func (t Timing) Window() time.Duration { return t.Healed.Sub(t.FirstPlan) }

// Rate is the killed broker's bytes over the window, in bytes per second.
func (t Timing) Rate() float64 { return float64(t.Bytes) / t.Window().Seconds() }

// KillAndHeal SIGKILLs victim and reads the leader's passes until one
// finds every sealed segment healed (no under-replicated segment, the
// victim dead), within limit. With a window above 0 it stops earlier, once
// window has passed since backfill bytes began to arrive (a pass plans
// many backfills and ends when the last is done, so a pass cannot time
// it): the heal is then measured over that window from the bytes that
// arrived in it, read every half second (Timing.Windowed).
func (hc *Cluster) KillAndHeal(ctx context.Context, victim *harness.Broker, held int64, limit, window time.Duration) (Timing, error) {
	before, err := hc.stageSums(ctx, victim.ID)
	if err != nil {
		return Timing{}, err
	}
	t := Timing{Bytes: held, Killed: time.Now()}
	if err := hc.C.Kill(victim); err != nil {
		return t, fmt.Errorf("healrun: killing broker %d: %w", victim.ID, err)
	}
	arr := hc.sampleArrivals(ctx, victim.ID, arrivalsEvery, window, before.arrived)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-arr.ended:
			cancel()
		case <-fctx.Done():
		}
	}()
	feed := harness.NewPassFeed(t.Killed)
	_, err = feed.Until(fctx, hc.C, limit, func(p *plugin.PassRecord) (bool, string) {
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
	samples, start, over := arr.stop()
	// Only the window's own cancellation ends a windowed heal: any other
	// failure of the feed (a pass history that dropped a pass) stays one.
	if over && errors.Is(err, context.Canceled) && ctx.Err() == nil {
		last := samples[len(samples)-1]
		t.Windowed, t.FirstPlan, t.Healed, t.Bytes, err = true, start, last.At, last.Bytes-before.arrived, nil
	}
	if err != nil {
		return t, fmt.Errorf("healrun: broker %d killed: %w", victim.ID, err)
	}
	after, err := hc.stageSums(ctx, victim.ID)
	if err != nil {
		return t, err
	}
	t.Ramp, t.RampKnown = Ramp(samples, t.FirstPlan, t.Rate())
	t.Wait, t.Transfer, t.Commit = after.wait-before.wait, after.transfer-before.transfer, after.commit-before.commit
	t.Backfills, t.Record = after.backfills-before.backfills, after.record-before.record
	t.LatencyCuts, t.PressureCuts = after.latencyCuts-before.latencyCuts, after.pressureCuts-before.pressureCuts
	return t, nil
}

// arrivalsEvery is how often KillAndHeal reads the bytes arrived.
const arrivalsEvery = 500 * time.Millisecond

// stageSums are the heal metrics summed over the running brokers.
type stageSums struct {
	wait, transfer, commit, record       time.Duration
	backfills, latencyCuts, pressureCuts int
	arrived                              int64     // backfill bytes as they arrive
	at                                   time.Time // when the first broker's metrics were read
}

// stageSums reads the /metrics of the running brokers but skip: the backfill
// stages' histogram sums and counts, the command durations, the rate cuts,
// the bytes arrived.
func (hc *Cluster) stageSums(ctx context.Context, skip meta.BrokerID) (stageSums, error) {
	s := stageSums{at: time.Now()}
	for _, br := range hc.C.Running() {
		if br.ID == skip {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		body, err := hc.C.RPC().GetRaw(cctx, br.RPC, "/metrics")
		cancel()
		if err != nil {
			return s, fmt.Errorf("healrun: broker %d's metrics: %w", br.ID, err)
		}
		m := ParseMetrics(body)
		s.wait += seconds(m[`malachi_heal_backfill_stage_seconds_sum{stage="wait"}`])
		s.transfer += seconds(m[`malachi_heal_backfill_stage_seconds_sum{stage="transfer"}`])
		s.commit += seconds(m[`malachi_heal_backfill_stage_seconds_sum{stage="commit"}`])
		s.backfills += int(m[`malachi_heal_backfill_stage_seconds_count{stage="transfer"}`])
		s.record += seconds(m["malachi_heal_command_duration_seconds_sum"])
		s.latencyCuts += int(m[`malachi_heal_backfill_rate_cuts_total{reason="latency"}`])
		s.pressureCuts += int(m[`malachi_heal_backfill_rate_cuts_total{reason="pressure"}`])
		s.arrived += int64(m["malachi_heal_backfill_arrived_bytes_total"])
	}
	return s, nil
}

// ParseMetrics reads the Prometheus text format's samples by their full
// name with labels (`name{label="v"}`; a sample without labels by its
// bare name).
func ParseMetrics(body []byte) map[string]float64 {
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
