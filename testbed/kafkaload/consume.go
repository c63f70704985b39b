package kafkaload

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/malachi-log/malachi/internal/retry"
)

// Consume reads every partition of the topic from offset 0 to its high
// watermark as ListOffsets gives it when Consume starts, through
// kgo.ConsumePartitions, and returns the records in the order read with
// the high watermarks. Each partition is read to its end even when a
// record is missing (the checker then finds it lost); ctx bounds the
// whole read, and an error says how far it got.
func (c Config) Consume(ctx context.Context) ([]Record, map[int32]int64, error) {
	ends, err := c.ends(ctx)
	if err != nil {
		return nil, nil, err
	}
	parts := map[int32]kgo.Offset{}
	next := map[int32]int64{}
	for p, end := range ends {
		if end > 0 {
			parts[p], next[p] = kgo.NewOffset().At(0), 0
		}
	}
	if len(parts) == 0 {
		return nil, ends, nil
	}
	cl, err := kgo.NewClient(c.opts(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.Topic: parts}))...)
	if err != nil {
		return nil, ends, fmt.Errorf("kafkaload: consuming %s: %w", c.Topic, err)
	}
	defer cl.Close()
	var out []Record
	done := func() bool {
		for p, n := range next {
			if n < ends[p] {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, ends, fmt.Errorf("kafkaload: consuming %s: %w; read up to %v of high watermarks %v", c.Topic, err, next, ends)
		}
		fs.EachError(func(topic string, p int32, err error) {
			c.Logger.Debug().Err(err).Str("topic", topic).Int32("partition", p).Msg("kafka load: fetch error (retried)")
		})
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, NewRecord(r.Topic, r.Partition, r.Offset, r.Key, r.Value))
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
		})
	}
	return out, ends, nil
}

// ends asks the high watermark of every partition of the topic, retrying
// until each answers or ctx ends.
func (c Config) ends(ctx context.Context) (map[int32]int64, error) {
	cl, err := kgo.NewClient(c.opts()...)
	if err != nil {
		return nil, fmt.Errorf("kafkaload: high watermarks of %s: %w", c.Topic, err)
	}
	defer cl.Close()
	ends, err := untilAnswered(ctx, func() (map[int32]int64, error) { return c.listEnds(ctx, cl) })
	if err != nil {
		return nil, fmt.Errorf("kafkaload: high watermarks of %s: %w", c.Topic, err)
	}
	return ends, nil
}

// untilAnswered calls try until it answers without an error, backing off
// between tries, or ctx ends (an error naming the last try's).
func untilAnswered[T any](ctx context.Context, try func() (T, error)) (T, error) {
	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for {
		out, err := try()
		if err == nil {
			return out, nil
		}
		if werr := b.Wait(ctx); werr != nil {
			return out, fmt.Errorf("%w (last: %v)", werr, err)
		}
	}
}

// listEnds is one try of ends: the topic's partitions from Metadata, then
// ListOffsets (latest) of each.
func (c Config) listEnds(ctx context.Context, cl *kgo.Client) (map[int32]int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(c.Topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(rctx, cl)
	if err != nil {
		return nil, err
	}
	if len(mresp.Topics) != 1 {
		return nil, fmt.Errorf("metadata answered %d topics", len(mresp.Topics))
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = c.Topic
	var want []int32
	for _, p := range mresp.Topics[0].Partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p.Partition, -1
		rt.Partitions = append(rt.Partitions, rp)
		want = append(want, p.Partition)
	}
	if len(want) == 0 {
		return nil, errors.New("metadata lists no partition")
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(rctx, cl)
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("partition %d: %w", p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	for _, p := range want {
		if _, ok := ends[p]; !ok {
			return nil, fmt.Errorf("partition %d: no end offset answered (of %v)", p, slices.Sorted(maps.Keys(ends)))
		}
	}
	return ends, nil
}
