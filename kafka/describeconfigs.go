package kafka

import (
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SegmentConfig is a Cluster that tells how its partitions' segments roll
// (DescribeConfigs' segment.bytes and segment.ms); without it those two
// are left out. Found by type assertion.
type SegmentConfig interface {
	// SegmentConfig is the size in bytes at which a partition's active
	// segment rolls, and its age in milliseconds (0: never by age).
	SegmentConfig() (bytes, ms int64)
}

// configEntry is one described setting.
type configEntry struct {
	name, value string
	typ         kmsg.ConfigType
	source      kmsg.ConfigSource
}

// describeConfigs answers DescribeConfigs for topics and for this broker:
// the settings that hold, all read-only (AlterConfigs is not served). A
// topic's: its segments' roll size and age, the largest batch, cleanup
// by deletion only with no retention (nothing is deleted); this broker's:
// its id, the partitions of new topics, auto-creation, the largest batch
// and request, the segments' roll. Another broker's id, or another
// resource type, is INVALID_REQUEST; an unknown topic
// UNKNOWN_TOPIC_OR_PARTITION; a peer without read access is refused.
func (c *conn) describeConfigs(req *kmsg.DescribeConfigsRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeConfigsResponse()
	for _, rr := range req.Resources {
		r := kmsg.NewDescribeConfigsResponseResource()
		r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
		entries, e := c.configsOf(rr)
		if e != nil {
			r.ErrorCode, r.ErrorMessage = e.Code, kmsg.StringPtr(e.Message)
			resp.Resources = append(resp.Resources, r)
			continue
		}
		for _, ce := range entries {
			if len(rr.ConfigNames) > 0 && !slices.Contains(rr.ConfigNames, ce.name) {
				continue
			}
			rc := kmsg.NewDescribeConfigsResponseResourceConfig()
			rc.Name, rc.Value, rc.ReadOnly, rc.Source, rc.ConfigType = ce.name, kmsg.StringPtr(ce.value), true, ce.source, ce.typ
			rc.IsDefault = ce.source == kmsg.ConfigSourceDefaultConfig
			r.Configs = append(r.Configs, rc)
		}
		resp.Resources = append(resp.Resources, r)
	}
	return resp
}

// configsOf is the settings of one resource, or its error.
func (c *conn) configsOf(rr kmsg.DescribeConfigsRequestResource) ([]configEntry, *kerr.Error) {
	cfg := c.s.cfg
	static := kmsg.ConfigSourceStaticBrokerConfig
	var seg []configEntry
	if sc, ok := c.s.cluster.(SegmentConfig); ok {
		bytes, ms := sc.SegmentConfig()
		seg = []configEntry{
			{"segment.bytes", strconv.FormatInt(bytes, 10), kmsg.ConfigTypeInt, static},
			{"segment.ms", strconv.FormatInt(ms, 10), kmsg.ConfigTypeLong, static},
		}
	}
	switch rr.ResourceType {
	case kmsg.ConfigResourceTypeTopic:
		if !c.peer.access.Has(AccessRead) {
			c.refused("DescribeConfigs", rr.ResourceName, AccessRead)
			return nil, kerr.TopicAuthorizationFailed
		}
		if _, ok := findTopic(c.s.cluster.Topics(), rr.ResourceName); !ok {
			return nil, kerr.UnknownTopicOrPartition
		}
		def := kmsg.ConfigSourceDefaultConfig
		return append(seg,
			configEntry{"max.message.bytes", strconv.Itoa(int(cfg.MaxBatchBytes)), kmsg.ConfigTypeInt, static},
			configEntry{"cleanup.policy", "delete", kmsg.ConfigTypeList, def},
			configEntry{"retention.ms", "-1", kmsg.ConfigTypeLong, def},
			configEntry{"retention.bytes", "-1", kmsg.ConfigTypeLong, def},
		), nil
	case kmsg.ConfigResourceTypeBroker:
		if !c.peer.access.Has(AccessRead) {
			c.refused("DescribeConfigs", "", AccessRead)
			return nil, kerr.ClusterAuthorizationFailed
		}
		self := strconv.Itoa(int(c.s.cluster.Self()))
		if rr.ResourceName != "" && rr.ResourceName != self {
			return nil, kerr.InvalidRequest
		}
		out := []configEntry{
			{"broker.id", self, kmsg.ConfigTypeInt, static},
			{"num.partitions", strconv.Itoa(int(cfg.NumPartitions)), kmsg.ConfigTypeInt, static},
			{"auto.create.topics.enable", strconv.FormatBool(cfg.AutoCreateTopics), kmsg.ConfigTypeBoolean, static},
			{"message.max.bytes", strconv.Itoa(int(cfg.MaxBatchBytes)), kmsg.ConfigTypeInt, static},
			{"socket.request.max.bytes", strconv.Itoa(int(cfg.MaxFrameBytes)), kmsg.ConfigTypeInt, static},
		}
		for _, s := range seg { // the broker's names of the topic settings
			s.name = map[string]string{"segment.bytes": "log.segment.bytes", "segment.ms": "log.roll.ms"}[s.name]
			out = append(out, s)
		}
		return out, nil
	}
	return nil, kerr.InvalidRequest
}
