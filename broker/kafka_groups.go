package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"

	"github.com/malachi-log/malachi/cluster"
	"github.com/malachi-log/malachi/kafka"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/rpc"
)

// The consumer groups' side of kafkaCluster (kafka.Groups): which broker
// coordinates a group (a rendezvous hash of the group id over the live
// brokers, kafka_live.go), and the committed offsets, kept by the control
// plane (meta.CommitOffsets: replicated as the metadata is, in its
// snapshot, so that they survive a coordinator's death), checked against
// a partition's high watermark asked of its leader.

var _ kafka.Groups = (*kafkaCluster)(nil)

// errNoLiveBroker: Coordinator with no live broker listed.
var errNoLiveBroker = errors.New("malachid: kafka: no live broker with a Kafka listener")

// Coordinator implements kafka.Groups: of the live brokers with a Kafka
// listener (Brokers), the one whose hash with the group id is highest
// (rendezvous hashing: when a broker dies only its groups move, each to
// the next in its own order; when it returns they come back).
func (kc *kafkaCluster) Coordinator(group string) (int32, error) {
	return coordinatorOf(group, kc.Brokers())
}

// coordinatorOf is Coordinator over brokers.
func coordinatorOf(group string, brokers []kafka.BrokerAddr) (int32, error) {
	h := fnv.New64a()
	h.Write([]byte(group))
	gh := h.Sum64()
	best, bestSum := int32(-1), uint64(0)
	for _, b := range brokers {
		if s := mix64(gh ^ mix64(uint64(b.NodeID))); best < 0 || s > bestSum || (s == bestSum && b.NodeID < best) {
			best, bestSum = b.NodeID, s
		}
	}
	if best < 0 {
		return -1, fmt.Errorf("group %q: %w", group, errNoLiveBroker)
	}
	return best, nil
}

// mix64 is splitmix64's finalizer: every input bit moves every output
// bit, so that the brokers' orders of the groups are independent.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// CommitOffsets implements kafka.Groups: one meta.CommitOffsets through
// the control plane's leader.
func (kc *kafkaCluster) CommitOffsets(ctx context.Context, group string, offsets []kafka.Offset) error {
	c := meta.CommitOffsets{Group: group, Offsets: make([]meta.PartitionOffset, len(offsets))}
	for i, o := range offsets {
		c.Offsets[i] = meta.PartitionOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata}
	}
	idx, err := kc.b.apply(ctx, c)
	if err != nil {
		if errors.Is(err, meta.ErrUnknownTopic) {
			return fmt.Errorf("%w: %w", kafka.ErrUnknownTopicOrPartition, err)
		}
		return fmt.Errorf("commit offsets of group %s: %w", group, err)
	}
	return kc.waitApplied(ctx, idx)
}

// waitApplied returns once this broker's metadata holds the command at
// idx (the leader applied it; this broker may trail by a heartbeat), so
// that the coordinator reads its own commits back.
func (kc *kafkaCluster) waitApplied(ctx context.Context, idx uint64) error {
	return kc.b.node.AwaitView(ctx, func(v *meta.View) bool { return v.Index() >= idx })
}

// FetchOffsets implements kafka.Groups from this broker's metadata once
// it has applied every command the control plane's leader had committed
// when asked (readIndex): a coordinator that took a group over reads
// every commit its predecessor had acknowledged, even when its own raft
// log trails (it just restarted, or came back from a partition). Reading
// up to what this broker knew committed was not enough: the nemesis (seed
// 777) had a group resume 10,950 offsets below its acknowledged commit.
func (kc *kafkaCluster) FetchOffsets(ctx context.Context, group string) ([]kafka.Offset, error) {
	idx, err := kc.b.readIndex(ctx)
	if err == nil {
		err = kc.waitApplied(ctx, idx)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	offs := kc.b.node.View().Offsets(group)
	out := make([]kafka.Offset, len(offs))
	for i, o := range offs {
		out[i] = kafka.Offset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata}
	}
	return out, nil
}

// DeleteOffsets implements kafka.Groups: one meta.DeleteGroupOffsets.
func (kc *kafkaCluster) DeleteOffsets(ctx context.Context, group string) error {
	if _, err := kc.b.apply(ctx, meta.DeleteGroupOffsets{Group: group}); err != nil {
		return fmt.Errorf("delete offsets of group %s: %w", group, err)
	}
	return nil
}

// readIndexPath is the control plane leader's internal route answering
// the index of the metadata it has applied, every command committed
// before the request included.
const readIndexPath = "/v1/internal/read_index"

type readIndexResponse struct {
	Index uint64 `json:"index"`
}

// readIndex returns an index of the metadata at or past every command
// committed before the call: the control plane leader's, after a barrier
// (here when this broker leads, else asked over readIndexPath).
func (b *Server) readIndex(ctx context.Context) (uint64, error) {
	var resp readIndexResponse
	err := b.onLeader(ctx, leaderRequest{
		what: "read index", method: http.MethodPost, path: readIndexPath, resp: &resp,
		here: func() (bool, error) {
			idx, err := b.leaderIndex(ctx)
			if errors.Is(err, cluster.ErrNotLeader) {
				return false, nil
			}
			resp.Index = idx
			return true, err
		},
	})
	return resp.Index, err
}

// leaderIndex is, on the control plane's leader, the index its metadata
// has applied after a barrier; cluster.ErrNotLeader elsewhere.
func (b *Server) leaderIndex(ctx context.Context) (uint64, error) {
	if !b.node.IsLeader() {
		return 0, cluster.ErrNotLeader
	}
	if err := b.node.Barrier(ctx); err != nil {
		return 0, err
	}
	if !b.node.IsLeader() { // the barrier may have been a follower's
		return 0, cluster.ErrNotLeader
	}
	return b.node.View().Index(), nil
}

func (b *Server) internalReadIndex(r *http.Request, body []byte) (any, error) {
	if err := decodeJSON(body, &struct{}{}); err != nil {
		return nil, err
	}
	idx, err := b.leaderIndex(r.Context())
	return readIndexResponse{Index: idx}, err
}

// partitionEndPath is the internal route answering a partition's high
// watermark on its leader.
const partitionEndPath = "/v1/internal/kafka/end"

type partitionEndRequest struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

type partitionEndResponse struct {
	End int64 `json:"end"`
}

// PartitionEnd implements kafka.Groups: the high watermark of the Log
// here when this broker leads the partition, else its leader's (the first
// replica of the active segment, when live) over partitionEndPath.
func (kc *kafkaCluster) PartitionEnd(ctx context.Context, topic string, index int32) (int64, error) {
	v := kc.b.node.View()
	tp, ok := v.Topic(topic)
	if !ok || index < 0 || index >= tp.Partitions {
		return 0, fmt.Errorf("%w: %s/%d", kafka.ErrUnknownTopicOrPartition, topic, index)
	}
	chain := v.Chain(topic, index)
	if len(chain) == 0 || chain[len(chain)-1].Sealed || len(chain[len(chain)-1].Replicas) == 0 {
		return 0, fmt.Errorf("%w: %s/%d has no active segment now", kafka.ErrNotLeader, topic, index)
	}
	leader := chain[len(chain)-1].Replicas[0]
	if leader == kc.b.self {
		l, err := kc.Partition(topic, index)
		if err != nil {
			return 0, err
		}
		_, hw := l.Offsets()
		return hw, nil
	}
	br, ok := v.Broker(leader)
	if !ok || br.AdminAddr == "" || !kc.live.ok(leader) {
		return 0, fmt.Errorf("%w: %s/%d: its leader %d is not live", kafka.ErrNotLeader, topic, index, leader)
	}
	var resp partitionEndResponse
	if err := kc.b.call(ctx, http.MethodPost, br.AdminAddr, partitionEndPath, partitionEndRequest{Topic: topic, Partition: index}, &resp); err != nil {
		return 0, fmt.Errorf("%w: %s/%d: asking its leader %d: %w", kafka.ErrNotLeader, topic, index, leader, err)
	}
	return resp.End, nil
}

// groupRoutes are the internal routes of the groups and liveness, between
// brokers (rpc.Brokers).
func (b *Server) groupRoutes(srv *rpc.Server, mux *http.ServeMux) {
	srv.Handle(mux, "POST "+partitionEndPath, rpc.Brokers, adapt(b.internalPartitionEnd))
	srv.Handle(mux, "POST "+readIndexPath, rpc.Brokers, adapt(b.internalReadIndex))
	srv.Handle(mux, "GET "+alivePath, rpc.Brokers, adapt(b.internalAlive))
}

// internalPartitionEnd answers partitionEndPath: the high watermark of a
// partition this broker leads.
func (b *Server) internalPartitionEnd(_ *http.Request, body []byte) (any, error) {
	var req partitionEndRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if b.kafka == nil {
		return nil, fmt.Errorf("%w: partition end of %s/%d: this broker serves no Kafka listener", errBadRequest, req.Topic, req.Partition)
	}
	l, err := b.kafka.Partition(req.Topic, req.Partition)
	if err != nil {
		return nil, err
	}
	_, hw := l.Offsets()
	return partitionEndResponse{End: hw}, nil
}

var _ kafka.SegmentConfig = (*kafkaCluster)(nil)

// SegmentConfig implements kafka.SegmentConfig: the [kafka] table's
// segment_bytes and segment_ms.
func (kc *kafkaCluster) SegmentConfig() (bytes, ms int64) {
	return kc.b.cfg.Kafka.SegmentBytes, kc.b.cfg.Kafka.SegmentMS
}
