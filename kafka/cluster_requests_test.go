package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *testCluster) SegmentConfig() (int64, int64) { return 65536, 0 }

// TestDescribeCluster: the cluster id, this broker as controller, and
// the brokers Cluster.Brokers lists; controllers are not an endpoint.
func TestDescribeCluster(t *testing.T) {
	tc, rc, _ := groupServer(t)
	req := kmsg.NewPtrDescribeClusterRequest()
	req.SetVersion(1)
	req.EndpointType = endpointBrokers
	resp := rc.do(req).(*kmsg.DescribeClusterResponse)
	if resp.ErrorCode != 0 || resp.ClusterID != "malachi" || resp.ControllerID != 1 || len(resp.Brokers) != 1 || resp.Brokers[0].Port != tc.addr.Port {
		t.Fatalf("DescribeCluster: %+v", resp)
	}
	req.EndpointType = endpointControllers
	wantCode(t, "controllers", rc.do(req).(*kmsg.DescribeClusterResponse).ErrorCode, kerr.UnsupportedEndpointType)
}

// TestDeleteTopicsRefused: every topic is answered
// TOPIC_DELETION_DISABLED and stays.
func TestDeleteTopicsRefused(t *testing.T) {
	tc, rc, _ := groupServer(t)
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.SetVersion(5)
	req.TopicNames = []string{"t", "none"}
	for _, tp := range rc.do(req).(*kmsg.DeleteTopicsResponse).Topics {
		wantCode(t, "delete "+*tp.Topic, tp.ErrorCode, kerr.TopicDeletionDisabled)
	}
	if _, ok := findTopic(tc.Topics(), "t"); !ok {
		t.Fatal("topic t deleted")
	}
}

// TestOffsetForLeaderEpoch: an epoch's end is the high watermark; a
// stale or future current epoch is fenced.
func TestOffsetForLeaderEpoch(t *testing.T) {
	_, rc, _ := groupServer(t)
	ask := func(current, epoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.SetVersion(3)
		req.ReplicaID = -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, current, epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rc.do(req).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
	}
	if p := ask(0, 0); p.ErrorCode != 0 || p.EndOffset != 3 || p.LeaderEpoch != 0 {
		t.Fatalf("epoch 0: %+v, want its end at 3", p)
	}
	wantCode(t, "current epoch 1 of a partition at 0", ask(1, 0).ErrorCode, kerr.UnknownLeaderEpoch)
	wantCode(t, "current epoch -1 (none)", ask(-1, 0).ErrorCode, nil)
}

// TestDescribeConfigs: a topic's and this broker's settings, read-only;
// another broker and an unknown topic are refused.
func TestDescribeConfigs(t *testing.T) {
	_, rc, _ := groupServer(t)
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.SetVersion(4)
	for _, r := range []struct {
		typ  kmsg.ConfigResourceType
		name string
	}{{kmsg.ConfigResourceTypeTopic, "t"}, {kmsg.ConfigResourceTypeBroker, "1"}, {kmsg.ConfigResourceTypeBroker, "2"}, {kmsg.ConfigResourceTypeTopic, "none"}} {
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = r.typ, r.name
		req.Resources = append(req.Resources, rr)
	}
	resp := rc.do(req).(*kmsg.DescribeConfigsResponse)
	values := func(r kmsg.DescribeConfigsResponseResource) map[string]string {
		out := map[string]string{}
		for _, c := range r.Configs {
			if !c.ReadOnly {
				t.Errorf("%s of %s is writable", c.Name, r.ResourceName)
			}
			out[c.Name] = *c.Value
		}
		return out
	}
	if v := values(resp.Resources[0]); v["segment.bytes"] != "65536" || v["segment.ms"] != "0" || v["retention.ms"] != "-1" {
		t.Fatalf("topic t: %v", v)
	}
	if v := values(resp.Resources[1]); v["log.segment.bytes"] != "65536" || v["broker.id"] != "1" || v["num.partitions"] != "3" {
		t.Fatalf("broker 1: %v", v)
	}
	wantCode(t, "another broker", resp.Resources[2].ErrorCode, kerr.InvalidRequest)
	wantCode(t, "an unknown topic", resp.Resources[3].ErrorCode, kerr.UnknownTopicOrPartition)
}
