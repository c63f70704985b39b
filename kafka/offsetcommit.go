package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// offsetCommit answers OffsetCommit: the member and generation are
// checked (checkCommit), then each partition (known, its offset within
// [0, high watermark], its metadata at most MaxOffsetMetadata bytes), and
// the partitions that pass are committed together in one Groups.Commit.
// A refused partition changes nothing; a refused request changes nothing.
func (c *conn) offsetCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetCommitResponse()
	gen, member := req.Generation, req.MemberID
	if req.Version == 0 {
		gen, member = -1, ""
	}
	e := c.coordinates("OffsetCommit", req.Group, AccessWrite)
	if e == nil {
		e = c.s.coord.checkCommit(req.Group, member, gen)
	}
	if e != nil {
		c.log.Debug().Str("group", req.Group).Str("member", member).Int32("generation", gen).Str("error", e.Message).Msg("kafka: OffsetCommit refused")
	}
	var batch []Offset
	var at [][2]int // the response partition of each batch entry
	topics := c.s.cluster.Topics()
	for ti, rt := range req.Topics {
		t := kmsg.NewOffsetCommitResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewOffsetCommitResponseTopicPartition()
			p.Partition = rp.Partition
			pe := e
			if pe == nil {
				pe = c.checkOffset(ctx, topics, rt.Topic, rp)
			}
			if pe == nil {
				o := Offset{Topic: rt.Topic, Partition: rp.Partition, Offset: rp.Offset, LeaderEpoch: -1}
				if req.Version >= 6 {
					o.LeaderEpoch = rp.LeaderEpoch
				}
				if rp.Metadata != nil {
					o.Metadata = *rp.Metadata
				}
				batch = append(batch, o)
				at = append(at, [2]int{ti, len(t.Partitions)})
			}
			p.ErrorCode = code(pe)
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	if len(batch) == 0 {
		return resp
	}
	if err := c.s.groups.CommitOffsets(ctx, req.Group, batch); err != nil {
		c.log.Warn().Str("group", req.Group).Int("partitions", len(batch)).Err(err).Msg("kafka: OffsetCommit: the commit failed")
		ec := storeCode(err).Code
		for _, a := range at {
			resp.Topics[a[0]].Partitions[a[1]].ErrorCode = ec
		}
	}
	return resp
}

// checkOffset checks one committed partition: known, offset within the
// partition, metadata not too large.
func (c *conn) checkOffset(ctx context.Context, topics []TopicInfo, topic string, rp kmsg.OffsetCommitRequestTopicPartition) *kerr.Error {
	if rp.Metadata != nil && len(*rp.Metadata) > MaxOffsetMetadata {
		return kerr.OffsetMetadataTooLarge
	}
	t, ok := findTopic(topics, topic)
	if !ok || rp.Partition < 0 || int(rp.Partition) >= len(t.Partitions) {
		return kerr.UnknownTopicOrPartition
	}
	if rp.Offset < 0 {
		return kerr.OffsetOutOfRange
	}
	end, err := c.s.groups.PartitionEnd(ctx, topic, rp.Partition)
	if err != nil {
		c.log.Debug().Str("topic", topic).Int32("partition", rp.Partition).Err(err).Msg("kafka: OffsetCommit: the partition's end is unknown")
		return storeCode(err)
	}
	if rp.Offset > end {
		return kerr.OffsetOutOfRange
	}
	return nil
}

// storeCode is the error code of a failed Groups call: the request's
// deadline, an unknown partition, a partition without a leader now, or
// COORDINATOR_NOT_AVAILABLE (retriable) for anything else.
func storeCode(err error) *kerr.Error {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kerr.RequestTimedOut
	case errors.Is(err, ErrUnknownTopicOrPartition):
		return kerr.UnknownTopicOrPartition
	case errors.Is(err, ErrNotLeader):
		return kerr.NotLeaderForPartition
	}
	return kerr.CoordinatorNotAvailable
}
