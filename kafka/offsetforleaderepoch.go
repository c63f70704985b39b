package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// offsetForLeaderEpoch answers OffsetForLeaderEpoch, which a consumer
// sends after a leader change to find whether the log it read was
// truncated: the end of the asked epoch, at or below the current one, is
// answered as the partition's high watermark. That is exact for the
// current epoch, and safe for an earlier one: the log never truncates
// below its high watermark (every batch below it is on every replica and
// a new leader starts where the common part ends), and a consumer reads
// only below it, so no consumer is ever told its position was cut. The
// leader checks Kafka's fencing first: a CurrentLeaderEpoch (v2+) older
// than the partition's is FENCED_LEADER_EPOCH, a newer one
// UNKNOWN_LEADER_EPOCH. Only the partition's leader answers
// (NOT_LEADER_OR_FOLLOWER).
func (c *conn) offsetForLeaderEpoch(req *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetForLeaderEpochResponse()
	topics := c.s.cluster.Topics()
	for _, rt := range req.Topics {
		t := kmsg.NewOffsetForLeaderEpochResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			t.Partitions = append(t.Partitions, c.epochEnd(topics, rt.Topic, rp, req.Version))
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

func (c *conn) epochEnd(topics []TopicInfo, topic string, rp kmsg.OffsetForLeaderEpochRequestTopicPartition, version int16) kmsg.OffsetForLeaderEpochResponseTopicPartition {
	out := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
	out.Partition, out.LeaderEpoch, out.EndOffset = rp.Partition, -1, -1
	l, e := c.readLog("OffsetForLeaderEpoch", topic, rp.Partition)
	if e != nil {
		out.ErrorCode = e.Code
		return out
	}
	t, _ := findTopic(topics, topic)
	if int(rp.Partition) >= len(t.Partitions) {
		out.ErrorCode = kerr.UnknownTopicOrPartition.Code
		return out
	}
	current := t.Partitions[rp.Partition].LeaderEpoch
	switch {
	case version >= 2 && rp.CurrentLeaderEpoch >= 0 && rp.CurrentLeaderEpoch < current:
		out.ErrorCode = kerr.FencedLeaderEpoch.Code
		return out
	case version >= 2 && rp.CurrentLeaderEpoch > current:
		out.ErrorCode = kerr.UnknownLeaderEpoch.Code
		return out
	}
	_, hw := l.Offsets()
	out.LeaderEpoch, out.EndOffset = min(rp.LeaderEpoch, current), hw
	return out
}
