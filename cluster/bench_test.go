package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

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
