package kafka

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// deleteTopics answers DeleteTopics: topics are never deleted (their
// partitions are chains of segments the control plane keeps: meta
// invariant 9), so every topic is answered TOPIC_DELETION_DISABLED, as
// Kafka answers with delete.topic.enable=false; a peer without write
// access gets TOPIC_AUTHORIZATION_FAILED, a topic named by id (v6+)
// UNKNOWN_TOPIC_ID. Nothing changes.
func (c *conn) deleteTopics(req *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteTopicsResponse()
	answer := func(name *string, id [16]byte) {
		t := kmsg.NewDeleteTopicsResponseTopic()
		t.Topic, t.TopicID = name, id
		switch {
		case name == nil:
			t.ErrorCode = kerr.UnknownTopicID.Code
		case !c.peer.access.Has(AccessWrite):
			c.refused("DeleteTopics", *name, AccessWrite)
			t.ErrorCode = kerr.TopicAuthorizationFailed.Code
		default:
			t.ErrorCode = kerr.TopicDeletionDisabled.Code
		}
		resp.Topics = append(resp.Topics, t)
	}
	if req.Version < 6 {
		for _, name := range req.TopicNames {
			answer(kmsg.StringPtr(name), [16]byte{})
		}
		return resp
	}
	for _, t := range req.Topics {
		answer(t.Topic, t.TopicID)
	}
	return resp
}
