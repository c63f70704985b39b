package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// BenchmarkApply measures one Apply (commit on a quorum, fsync on each,
// applied on the leader) on loopback: 1 node is the baseline (one fsync,
// no network), 3 nodes the product; transport=tls is raft over mutual
// TLS with the gate, transport=plain raft's plain TCP transport, in the
// same run so that their ratio can be read from one run.
func BenchmarkApply(b *testing.B) {
	for _, transport := range []string{"tls", "plain"} {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("transport=%s/nodes=%d", transport, n), func(b *testing.B) {
				benchApply(b, n, transport == "plain")
			})
		}
	}
}

// benchApply is BenchmarkApply on n nodes, over raft's plain TCP
// transport when plain.
func benchApply(b *testing.B, n int, plain bool) {
	c := newTestCluster(b, n, func(cfg *Config) {
		if os.Getenv("CLUSTER_TEST_LOG") == "" {
			cfg.Logger = zerolog.Nop()
		}
		if d, err := time.ParseDuration(os.Getenv("CLUSTER_BENCH_LEASE")); err == nil {
			cfg.LeaderLeaseTimeout = d
		}
		if plain {
			cfg.TLS, cfg.Insecure = nil, true
		}
	})
	l := c.nodes[c.leader()]
	createSealed(b, l, "s", 1, 2, 3)
	cur := []meta.BrokerID{1, 2, 3}
	ctx := context.Background()
	flaps := 0
	b.ReportAllocs()
	for b.Loop() {
		next := []meta.BrokerID{cur[1], cur[2], cur[0]}
		_, err := l.Apply(ctx, meta.SetSegmentReplicas{ID: "s", Expected: cur, Replicas: next})
		if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeadershipLost) {
			// A starved process (all nodes share it) lets the
			// lease lapse: count it, follow the new leader and
			// re-read the set, which the CAS keeps consistent.
			flaps++
			l = c.nodes[c.leader()]
			if err := l.Barrier(ctx); err != nil {
				b.Fatal(err)
			}
			s, _ := l.Segment("s")
			cur = s.Replicas
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		cur = next
	}
	b.ReportMetric(float64(flaps), "flaps")
}

// BenchmarkSnapshot compares, on 10^5 sealed segments, Node.Snapshot's
// cached copy ("cached"), the same right after a compare-and-set patched
// the cache ("after-cas"), and meta.Table.Snapshot, the baseline the
// cache avoids (map walk, clone, sort).
func BenchmarkSnapshot(b *testing.B) {
	const n = 100_000
	f := newFSM(zerolog.Nop())
	idx := fillFSM(b, f, n)
	f.snapshot()            // build the cache once
	var casLogs []*raft.Log // set by after-cas, a cycle back to the start
	b.Run("baseline=table", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f.mu.RLock()
			s := f.table.Snapshot()
			f.mu.RUnlock()
			if len(s.Segments) != n {
				b.Fatal(len(s.Segments))
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s := f.snapshot(); len(s.Segments) != n {
				b.Fatal(len(s.Segments))
			}
		}
	})
	b.Run("view", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s := f.view(); len(s.Segments) != n {
				b.Fatal(len(s.Segments))
			}
		}
	})
	b.Run("after-cas", func(b *testing.B) {
		cur := []meta.BrokerID{1, 2, 3}
		id := meta.SegmentID(fmt.Sprintf("seg-%08d", n/2))
		var logs []*raft.Log
		for range 3 { // a fixed cycle of pre-encoded commands
			next := []meta.BrokerID{cur[1], cur[2], cur[0]}
			logs = append(logs, logOf(b, 0, meta.SetSegmentReplicas{ID: id, Expected: cur, Replicas: next}))
			cur = next
		}
		casLogs = logs
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			idx++
			l := *logs[i%3]
			l.Index = idx
			f.ApplyBatch([]*raft.Log{&l})
			i++
			if s := f.snapshot(); len(s.Segments) != n {
				b.Fatal(len(s.Segments))
			}
		}
	})
	b.Run("view-after-cas", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			idx++
			l := *casLogs[i%3]
			l.Index = idx
			f.ApplyBatch([]*raft.Log{&l})
			i++
			if s := f.view(); len(s.Segments) != n {
				b.Fatal(len(s.Segments))
			}
		}
	})
}
