package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// createTopics answers CreateTopics. The replication factor and configs
// asked for are the broker's to decide and are ignored; an explicit
// replica assignment is refused (INVALID_REPLICA_ASSIGNMENT).
func (c *conn) createTopics(ctx context.Context, req *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := kmsg.NewPtrCreateTopicsResponse()
	seen := make(map[string]bool, len(req.Topics))
	for _, rt := range req.Topics {
		t := kmsg.NewCreateTopicsResponseTopic()
		t.Topic = rt.Topic
		n := rt.NumPartitions
		if n == -1 {
			n = c.s.cfg.NumPartitions
		}
		switch {
		case seen[rt.Topic]:
			t.ErrorCode = kerr.InvalidRequest.Code
		case !c.peer.access.Has(AccessWrite):
			c.refused("CreateTopics", rt.Topic, AccessWrite)
			t.ErrorCode = kerr.TopicAuthorizationFailed.Code
		case len(rt.ReplicaAssignment) > 0:
			t.ErrorCode = kerr.InvalidReplicaAssignment.Code
		case n < 1:
			t.ErrorCode = kerr.InvalidPartitions.Code
		case req.ValidateOnly:
			if _, ok := findTopic(c.s.cluster.Topics(), rt.Topic); ok {
				t.ErrorCode = kerr.TopicAlreadyExists.Code
			}
		default:
			t.ErrorCode = code(codeOf(c.s.cluster.CreateTopic(ctx, rt.Topic, n)))
		}
		seen[rt.Topic] = true
		if t.ErrorCode == 0 {
			t.NumPartitions, t.ReplicationFactor = n, c.replicationFactor(rt.Topic)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

// replicationFactor is the replica count of topic's first partition, -1
// when unknown.
func (c *conn) replicationFactor(topic string) int16 {
	t, ok := findTopic(c.s.cluster.Topics(), topic)
	if !ok || len(t.Partitions) == 0 {
		return -1
	}
	return int16(len(t.Partitions[0].Replicas))
}
