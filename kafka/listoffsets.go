package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The special timestamps of ListOffsets.
const (
	listLatest   = -1
	listEarliest = -2
)

// listOffsets answers ListOffsets for the earliest (-2) and latest (-1)
// offsets. Looking an offset up by timestamp is not served: any other
// timestamp gets UNSUPPORTED_VERSION for its partition (the log keeps no
// time index).
func (c *conn) listOffsets(req *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := kmsg.NewPtrListOffsetsResponse()
	for _, rt := range req.Topics {
		t := kmsg.NewListOffsetsResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			t.Partitions = append(t.Partitions, c.listPartition(rt.Topic, rp))
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

func (c *conn) listPartition(topic string, rp kmsg.ListOffsetsRequestTopicPartition) kmsg.ListOffsetsResponseTopicPartition {
	out := kmsg.NewListOffsetsResponseTopicPartition()
	out.Partition, out.Timestamp, out.Offset, out.LeaderEpoch = rp.Partition, -1, -1, -1
	if !c.peer.access.Has(AccessRead) {
		c.refused("ListOffsets", topic, AccessRead)
		out.ErrorCode = kerr.TopicAuthorizationFailed.Code
		return out
	}
	l, err := c.s.cluster.Partition(topic, rp.Partition)
	if err != nil {
		out.ErrorCode = code(codeOf(err))
		return out
	}
	start, hw := l.Offsets()
	switch rp.Timestamp {
	case listEarliest:
		out.Offset = start
	case listLatest:
		out.Offset = hw
	default:
		out.ErrorCode = kerr.UnsupportedVersion.Code
	}
	return out
}
