package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// offsetFetch answers OffsetFetch: each group's committed offsets of the
// partitions asked for (every committed one for no topic list), -1 for a
// partition never committed. Up to v7 one group, from v8 a list.
func (c *conn) offsetFetch(ctx context.Context, req *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetFetchResponse()
	if req.Version >= 8 {
		for _, rg := range req.Groups {
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group = rg.Group
			var asked []kmsg.OffsetFetchRequestTopic
			if rg.Topics != nil {
				asked = make([]kmsg.OffsetFetchRequestTopic, len(rg.Topics))
				for i, t := range rg.Topics {
					asked[i] = kmsg.OffsetFetchRequestTopic{Topic: t.Topic, Partitions: t.Partitions}
				}
			}
			topics, e := c.fetchOffsets(ctx, rg.Group, asked)
			g.ErrorCode = code(e)
			for _, t := range topics {
				gt := kmsg.NewOffsetFetchResponseGroupTopic()
				gt.Topic = t.Topic
				for _, p := range t.Partitions {
					gp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					gp.Partition, gp.Offset, gp.LeaderEpoch, gp.Metadata, gp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
					gt.Partitions = append(gt.Partitions, gp)
				}
				g.Topics = append(g.Topics, gt)
			}
			resp.Groups = append(resp.Groups, g)
		}
		return resp
	}
	asked := req.Topics
	if req.Version < 2 && asked == nil {
		asked = []kmsg.OffsetFetchRequestTopic{} // all topics is v2+
	}
	topics, e := c.fetchOffsets(ctx, req.Group, asked)
	resp.Topics, resp.ErrorCode = topics, code(e)
	if req.Version < 2 && e != nil { // no top-level error before v2: each partition carries it
		for _, rt := range req.Topics {
			t := kmsg.NewOffsetFetchResponseTopic()
			t.Topic = rt.Topic
			for _, p := range rt.Partitions {
				tp := kmsg.NewOffsetFetchResponseTopicPartition()
				tp.Partition, tp.Offset, tp.ErrorCode = p, -1, e.Code
				t.Partitions = append(t.Partitions, tp)
			}
			resp.Topics = append(resp.Topics, t)
		}
	}
	return resp
}

// fetchOffsets is group's committed offsets of asked (nil: all of them)
// in the v0-v7 form, or the error of the whole group.
func (c *conn) fetchOffsets(ctx context.Context, group string, asked []kmsg.OffsetFetchRequestTopic) ([]kmsg.OffsetFetchResponseTopic, *kerr.Error) {
	if e := c.coordinates("OffsetFetch", group, AccessRead); e != nil {
		return nil, e
	}
	committed, err := c.s.groups.FetchOffsets(ctx, group)
	if err != nil {
		c.log.Warn().Str("group", group).Err(err).Msg("kafka: OffsetFetch: the committed offsets are unknown")
		return nil, storeCode(err)
	}
	part := func(o Offset) kmsg.OffsetFetchResponseTopicPartition {
		p := kmsg.NewOffsetFetchResponseTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch, p.Metadata = o.Partition, o.Offset, o.LeaderEpoch, kmsg.StringPtr(o.Metadata)
		return p
	}
	var out []kmsg.OffsetFetchResponseTopic
	if asked == nil {
		for _, o := range committed {
			if n := len(out); n == 0 || out[n-1].Topic != o.Topic {
				t := kmsg.NewOffsetFetchResponseTopic()
				t.Topic = o.Topic
				out = append(out, t)
			}
			out[len(out)-1].Partitions = append(out[len(out)-1].Partitions, part(o))
		}
		return out, nil
	}
	for _, rt := range asked {
		t := kmsg.NewOffsetFetchResponseTopic()
		t.Topic = rt.Topic
		for _, p := range rt.Partitions {
			o := Offset{Topic: rt.Topic, Partition: p, Offset: -1, LeaderEpoch: -1}
			for _, x := range committed {
				if x.Topic == rt.Topic && x.Partition == p {
					o = x
					break
				}
			}
			t.Partitions = append(t.Partitions, part(o))
		}
		out = append(out, t)
	}
	return out, nil
}
