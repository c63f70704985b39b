package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetch answers Fetch. Fetch sessions are declined: every fetch is a full
// one answered with session id 0, and an incremental fetch (epoch > 0),
// which names a session we never created, gets FETCH_SESSION_ID_NOT_FOUND.
// The answer goes out once MinBytes are available, a partition has an
// error, or MaxWaitMillis passed: the handler waits on the logs' Wait
// channels, never polls.
func (c *conn) fetch(ctx context.Context, req *kmsg.FetchRequest) kmsg.Response {
	resp := kmsg.NewPtrFetchResponse()
	if req.SessionEpoch > 0 {
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp
	}
	timer := time.NewTimer(time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond)
	defer timer.Stop()
	var work time.Duration // handling time, without the waits for data
	defer func() { c.s.cfg.Latency.Observe(c.s.now(), work) }()
	for {
		start := c.s.now()
		resp, got, wait := c.fetchOnce(req)
		work += c.s.now().Sub(start)
		if got >= int64(req.MinBytes) || wait == nil {
			return resp
		}
		wctx, cancel := context.WithCancel(ctx)
		woken := anyOf(wctx, wait)
		select {
		case <-woken:
			cancel()
		case <-timer.C:
			cancel()
			return resp
		case <-ctx.Done():
			cancel()
			return resp
		}
	}
}

// fetchOnce reads every requested partition once. It returns the answer,
// the bytes of record batches in it, and the channels to wait on for
// more, nil when the answer must go now (an error in some partition).
func (c *conn) fetchOnce(req *kmsg.FetchRequest) (*kmsg.FetchResponse, int64, []<-chan struct{}) {
	c.arena = c.arena[:0] // a response built before and not sent is dropped
	resp := kmsg.NewPtrFetchResponse()
	var got int64
	var wait []<-chan struct{}
	failed := false
	for _, rt := range req.Topics {
		t := kmsg.NewFetchResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			limit := rp.PartitionMaxBytes
			if req.Version >= 3 && req.MaxBytes > 0 && int64(req.MaxBytes)-got < int64(limit) {
				limit = int32(max(int64(req.MaxBytes)-got, 0))
			}
			out, ch := c.fetchPartition(rt.Topic, rp, limit, got > 0)
			got += int64(len(out.RecordBatches))
			failed = failed || out.ErrorCode != 0
			if ch != nil {
				wait = append(wait, ch)
			}
			t.Partitions = append(t.Partitions, out)
		}
		resp.Topics = append(resp.Topics, t)
	}
	if failed {
		wait = nil
	}
	return resp, got, wait
}

// fetchPartition reads one partition from rp.FetchOffset, at most limit
// bytes once the response already holds some (haveSome), and returns the
// channel that closes when more data arrives.
func (c *conn) fetchPartition(topic string, rp kmsg.FetchRequestTopicPartition, limit int32, haveSome bool) (kmsg.FetchResponseTopicPartition, <-chan struct{}) {
	out := kmsg.NewFetchResponseTopicPartition()
	out.Partition = rp.Partition
	// An empty record set, not a null one, whatever the outcome: Kafka
	// sends empty, and librdkafka refuses null (MessageSetSize -1).
	out.RecordBatches = []byte{}
	if !c.peer.access.Has(AccessRead) {
		c.refused("Fetch", topic, AccessRead)
		out.ErrorCode = kerr.TopicAuthorizationFailed.Code
		return out, nil
	}
	l, err := c.s.cluster.Partition(topic, rp.Partition)
	if err != nil {
		out.ErrorCode = code(codeOf(err))
		return out, nil
	}
	start, hw := l.Offsets()
	out.HighWatermark, out.LastStableOffset, out.LogStartOffset = hw, hw, start
	if rp.FetchOffset < start || rp.FetchOffset > hw {
		out.ErrorCode = kerr.OffsetOutOfRange.Code
		return out, nil
	}
	if rp.FetchOffset == hw || (haveSome && limit <= 0) {
		return out, l.Wait(hw)
	}
	b, err := c.read(l, rp.FetchOffset, limit)
	if err != nil {
		c.log.Warn().Str("topic", topic).Int32("partition", rp.Partition).Int64("offset", rp.FetchOffset).Err(err).Msg("kafka: fetch read")
		out.ErrorCode = code(codeOf(err))
		return out, nil
	}
	if len(b) > 0 {
		out.RecordBatches = b
	}
	return out, l.Wait(hw)
}

// read is l.Read, or, for an AppendReader, a read into the connection's
// arena (the slice returned is the part of it this read appended).
func (c *conn) read(l Log, offset int64, limit int32) ([]byte, error) {
	ar, ok := l.(AppendReader)
	if !ok {
		return l.Read(offset, limit)
	}
	start := len(c.arena)
	arena, err := ar.AppendRead(c.arena, offset, limit)
	if err != nil {
		return nil, err
	}
	c.arena = arena
	return arena[start:len(arena):len(arena)], nil
}

// anyOf returns a channel closed once any of chs closes, or never if ctx
// ends first; its goroutines end with ctx.
func anyOf(ctx context.Context, chs []<-chan struct{}) <-chan struct{} {
	woken := make(chan struct{})
	fire := make(chan struct{}, 1)
	for _, ch := range chs {
		go func() {
			select {
			case <-ch:
				select {
				case fire <- struct{}{}:
				default:
				}
			case <-ctx.Done():
			}
		}()
	}
	go func() {
		select {
		case <-fire:
			close(woken)
		case <-ctx.Done():
		}
	}()
	return woken
}
