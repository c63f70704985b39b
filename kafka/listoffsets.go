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

// readLog is the Log of topic/partition for a read by request:
// TOPIC_AUTHORIZATION_FAILED without read access, else the error of
// Cluster.Partition.
func (c *conn) readLog(request, topic string, partition int32) (Log, *kerr.Error) {
	if !c.peer.access.Has(AccessRead) {
		c.refused(request, topic, AccessRead)
		return nil, kerr.TopicAuthorizationFailed
	}
	l, err := c.s.cluster.Partition(topic, partition)
	if err != nil {
		return nil, codeOf(err)
	}
	return l, nil
}

func (c *conn) listPartition(topic string, rp kmsg.ListOffsetsRequestTopicPartition) kmsg.ListOffsetsResponseTopicPartition {
	out := kmsg.NewListOffsetsResponseTopicPartition()
	out.Partition, out.Timestamp, out.Offset, out.LeaderEpoch = rp.Partition, -1, -1, -1
	l, e := c.readLog("ListOffsets", topic, rp.Partition)
	if e != nil {
		out.ErrorCode = e.Code
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
