package broker

import (
	"context"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
)

// The keeper of the Kafka partitions: a missing next segment created on
// the control plane's leader, a dead partition leader's segment sealed by
// a live follower.

// keepInterval is how often the keeper looks at the partitions.
const keepInterval = 500 * time.Millisecond

// keep runs until ctx ends: on the control plane's leader it creates the
// missing segment of a partition (a topic's first, or the next after a
// roll that sealed but did not create) once it has been missing on two
// turns in a row, so that a topic's creation or a roll in flight makes it
// first; on a follower replica of an active segment whose earlier
// replicas have all stopped answering, it seals the segment at the
// longest end the live replicas hold (sealActive, fenced), so that the
// partition moves on without its dead leader.
func (kc *kafkaCluster) keep(ctx context.Context) {
	t := keepTurn{down: map[meta.SegmentID]int{}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(keepInterval):
		}
		v := kc.b.node.View()
		t.wasMissing, t.missing = t.missing, map[meta.SegmentID]bool{}
		for _, tp := range v.Topics() {
			for p := range tp.Partitions {
				if ctx.Err() != nil {
					return
				}
				kc.keepPartition(ctx, v, tp.Name, p, &t)
			}
		}
	}
}

// keepTurn is what keep remembers from turn to turn.
type keepTurn struct {
	down                map[meta.SegmentID]int  // turns an active segment's earlier replicas did not answer
	missing, wasMissing map[meta.SegmentID]bool // segments to create, seen this turn and the last
}

// keepPartition is one partition's turn of keep.
func (kc *kafkaCluster) keepPartition(ctx context.Context, v *meta.View, topic string, p int32, t *keepTurn) {
	b := kc.b
	down := t.down
	chain := v.Chain(topic, p)
	log := b.log.With().Str("topic", topic).Int32("partition", p).Logger()
	if len(chain) == 0 || chain[len(chain)-1].Sealed {
		if !b.node.IsLeader() {
			return
		}
		req := admin.CreateRequest{ID: meta.PartitionSegmentID(topic, p, 0)}
		if n := len(chain); n > 0 {
			_, _, seq, _ := meta.ParsePartitionSegment(chain[n-1].ID)
			req = admin.CreateRequest{ID: meta.PartitionSegmentID(topic, p, seq+1), StartOffset: chain[n-1].EndOffset()}
		}
		t.missing[req.ID] = true
		if !t.wasMissing[req.ID] {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		seg, err := b.create(cctx, req)
		if err != nil {
			log.Warn().Err(err).Str("segment", string(req.ID)).Msg("kafka: creating a partition's next segment; retrying")
			return
		}
		log.Info().Str("segment", string(seg.ID)).Any("replicas", seg.Replicas).Msg("kafka: a partition's next segment created; its first replica leads")
		return
	}
	last := chain[len(chain)-1]
	pos := -1
	for i, r := range last.Replicas {
		if r == b.self {
			pos = i
		}
	}
	if pos <= 0 {
		return
	}
	for _, r := range last.Replicas[:pos] {
		if kc.answers(ctx, v, r) {
			delete(down, last.ID)
			return
		}
	}
	down[last.ID]++
	if down[last.ID] < 3 {
		return
	}
	delete(down, last.ID)
	log.Warn().Str("segment", string(last.ID)).Any("replicas", last.Replicas).Msg("kafka: the partition's leader does not answer; sealing its active segment at the longest end the live replicas hold")
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, _, err := sealActive(sctx, b, *last, -1, nil); err != nil {
		log.Warn().Err(err).Str("segment", string(last.ID)).Msg("kafka: taking over a partition")
	}
}

// answers reports whether broker r's admin API answers a health request.
func (kc *kafkaCluster) answers(ctx context.Context, v *meta.View, r meta.BrokerID) bool {
	br, ok := v.Broker(r)
	if !ok || br.AdminAddr == "" {
		return false
	}
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var h admin.Health
	return kc.b.call(hctx, "GET", br.AdminAddr, "/v1/internal/health", nil, &h) == nil
}
