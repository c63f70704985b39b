package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metadata answers Metadata: the brokers, and the topics asked for (all
// of them for a nil list, or an empty one at v0), creating unknown ones
// when allowed.
func (c *conn) metadata(ctx context.Context, req *kmsg.MetadataRequest) kmsg.Response {
	resp := kmsg.NewPtrMetadataResponse()
	cl := c.s.cluster
	for _, b := range cl.Brokers() {
		rb := kmsg.NewMetadataResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = b.NodeID, b.Host, b.Port, b.rack()
		resp.Brokers = append(resp.Brokers, rb)
	}
	resp.ClusterID = kmsg.StringPtr(c.s.cfg.ClusterID)
	resp.ControllerID = cl.Self()
	topics := cl.Topics()
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		if c.peer.access.Has(AccessRead) {
			for _, t := range topics {
				resp.Topics = append(resp.Topics, topicMetadata(t))
			}
		}
		return resp
	}
	autoCreate := c.s.cfg.AutoCreateTopics && (req.Version < 4 || req.AllowAutoTopicCreation)
	for _, rt := range req.Topics {
		resp.Topics = append(resp.Topics, c.topicMetadata(ctx, rt, topics, autoCreate))
	}
	return resp
}

// topicMetadata answers for one requested topic.
func (c *conn) topicMetadata(ctx context.Context, rt kmsg.MetadataRequestTopic, topics []TopicInfo, autoCreate bool) kmsg.MetadataResponseTopic {
	if rt.Topic == nil {
		t := kmsg.NewMetadataResponseTopic()
		t.TopicID, t.ErrorCode = rt.TopicID, kerr.UnknownTopicID.Code // topics are named, not identified
		return t
	}
	name := *rt.Topic
	refuse := func(e *kerr.Error) kmsg.MetadataResponseTopic {
		t := kmsg.NewMetadataResponseTopic()
		t.Topic, t.ErrorCode = kmsg.StringPtr(name), e.Code
		return t
	}
	if !c.peer.access.Has(AccessRead) {
		c.refused("Metadata", name, AccessRead)
		return refuse(kerr.TopicAuthorizationFailed)
	}
	if t, ok := findTopic(topics, name); ok {
		return topicMetadata(t)
	}
	if !autoCreate || !c.peer.access.Has(AccessWrite) {
		return refuse(kerr.UnknownTopicOrPartition)
	}
	err := c.s.cluster.CreateTopic(ctx, name, c.s.cfg.NumPartitions)
	if err != nil && !errors.Is(err, ErrTopicExists) {
		c.log.Warn().Str("topic", name).Err(err).Msg("kafka: auto-creating a topic")
		return refuse(codeOf(err))
	}
	c.log.Info().Str("topic", name).Int32("partitions", c.s.cfg.NumPartitions).Msg("kafka: topic auto-created")
	if t, ok := findTopic(c.s.cluster.Topics(), name); ok {
		return topicMetadata(t)
	}
	return refuse(kerr.LeaderNotAvailable)
}

// rack is b's rack on the wire: null for none.
func (b BrokerAddr) rack() *string {
	if b.Rack == "" {
		return nil
	}
	return kmsg.StringPtr(b.Rack)
}

// findTopic is the topic named name.
func findTopic(topics []TopicInfo, name string) (TopicInfo, bool) {
	for _, t := range topics {
		if t.Name == name {
			return t, true
		}
	}
	return TopicInfo{}, false
}

// topicMetadata is t on the wire; every replica is in sync.
func topicMetadata(t TopicInfo) kmsg.MetadataResponseTopic {
	rt := kmsg.NewMetadataResponseTopic()
	rt.Topic = kmsg.StringPtr(t.Name)
	for _, p := range t.Partitions {
		rp := kmsg.NewMetadataResponseTopicPartition()
		rp.Partition, rp.Leader, rp.LeaderEpoch = p.Index, p.Leader, p.LeaderEpoch
		rp.Replicas, rp.ISR = p.Replicas, p.Replicas
		if p.Leader < 0 {
			rp.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		rt.Partitions = append(rt.Partitions, rp)
	}
	return rt
}

// refused logs a request refused for lack of access.
func (c *conn) refused(request, topic string, missing Access) {
	c.log.Warn().Str("request", request).Str("topic", topic).Stringer("missing", missing).
		Stringer("has", c.peer.access).Msg("kafka: request refused: the peer's role lacks access")
}
