package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errAcksZeroFailed closes a connection whose acks=0 produce failed: the
// client gets no response, so the closed connection is how it learns (as
// in Kafka).
var errAcksZeroFailed = errors.New("kafka: produce with acks=0 failed")

// produce answers Produce: each partition's one batch is validated,
// checked against its producer's sequence and appended. The Log is always
// acks=all, so acks=1 is answered as -1 is. acks=0 gets no response.
func (c *conn) produce(ctx context.Context, req *kmsg.ProduceRequest) kmsg.Response {
	resp := kmsg.NewPtrProduceResponse()
	if req.TimeoutMillis > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMillis)*time.Millisecond)
		defer cancel()
	}
	var wg sync.WaitGroup
	failed := false
	for _, rt := range req.Topics {
		t := kmsg.NewProduceResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for i, rp := range rt.Partitions {
			out := &t.Partitions[i]
			*out = kmsg.NewProduceResponseTopicPartition()
			out.Partition = rp.Partition
			if e := c.produceRefusal(req.Acks, rt.Topic); e != nil {
				out.ErrorCode = e.Code
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.producePartition(ctx, rt.Topic, rp, out)
			}()
		}
		resp.Topics = append(resp.Topics, t)
	}
	wg.Wait()
	if req.Acks != 0 {
		c.hintLeaders(req.Version, resp)
		return resp
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			failed = failed || p.ErrorCode != 0
		}
	}
	if failed {
		// No response to carry the error: close the connection.
		c.log.Warn().Err(errAcksZeroFailed).Msg("kafka: closing the connection")
		c.nc.Close()
	}
	return nil
}

// hintLeaders gives, from v10 (KIP-951), each partition answered
// NOT_LEADER_OR_FOLLOWER its current leader and epoch, and the response
// the live brokers' endpoints, so that a client moves the partition to
// its new leader at once instead of waiting for its next metadata
// refresh (kgo refreshes at most every 5 s by default). A partition whose
// leader is not known (-1) gets no hint; the client refreshes as before.
func (c *conn) hintLeaders(version int16, resp *kmsg.ProduceResponse) {
	if version < 10 {
		return
	}
	var leaders map[topicPartition]PartitionInfo
	for i := range resp.Topics {
		t := &resp.Topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if p.ErrorCode != kerr.NotLeaderForPartition.Code {
				continue
			}
			if leaders == nil {
				leaders = c.s.leaders()
			}
			if l, ok := leaders[topicPartition{t.Topic, p.Partition}]; ok && l.Leader >= 0 {
				p.CurrentLeader.LeaderID, p.CurrentLeader.LeaderEpoch = l.Leader, l.LeaderEpoch
			}
		}
	}
	if leaders == nil {
		return
	}
	for _, b := range c.s.cluster.Brokers() {
		rb := kmsg.NewProduceResponseBroker()
		rb.NodeID, rb.Host, rb.Port = b.NodeID, b.Host, b.Port
		if b.Rack != "" {
			rb.Rack = kmsg.StringPtr(b.Rack)
		}
		resp.Brokers = append(resp.Brokers, rb)
	}
}

// leaders is every partition's place, by topic and index.
func (s *Server) leaders() map[topicPartition]PartitionInfo {
	out := map[topicPartition]PartitionInfo{}
	for _, t := range s.cluster.Topics() {
		for _, p := range t.Partitions {
			out[topicPartition{t.Name, p.Index}] = p
		}
	}
	return out
}

// produceRefusal is the error of a request no partition of topic may take.
func (c *conn) produceRefusal(acks int16, topic string) *kerr.Error {
	switch {
	case acks != 0 && acks != 1 && acks != -1:
		return kerr.InvalidRequiredAcks
	case !c.peer.access.Has(AccessWrite):
		c.refused("Produce", topic, AccessWrite)
		return kerr.TopicAuthorizationFailed
	}
	return nil
}

// producePartition stores rp's batch and fills out.
func (c *conn) producePartition(ctx context.Context, topic string, rp kmsg.ProduceRequestTopicPartition, out *kmsg.ProduceResponseTopicPartition) {
	log := c.log.With().Str("topic", topic).Int32("partition", rp.Partition).Logger()
	h, err := ValidateProduce(rp.Records, c.s.cfg.MaxBatchBytes)
	if err != nil {
		log.Warn().Err(err).Msg("kafka: produced batch refused")
		out.ErrorCode = code(codeOf(err))
		return
	}
	l, err := c.s.cluster.Partition(topic, rp.Partition)
	if err != nil {
		out.ErrorCode = code(codeOf(err))
		return
	}
	p := c.s.parts.get(topicPartition{topic, rp.Partition}, l)
	base, err := p.append(ctx, h, rp.Records)
	if err != nil {
		log.Warn().Err(err).Int64("producer", h.ProducerID).Int16("epoch", h.ProducerEpoch).
			Int32("sequence", h.BaseSequence).Msg("kafka: produced batch not stored")
		out.ErrorCode = code(codeOf(err))
		out.ErrorMessage = kmsg.StringPtr(err.Error())
		return
	}
	out.BaseOffset = base
	out.LogAppendTime = -1
	out.LogStartOffset, _ = l.Offsets()
}

// append applies the producer check to the batch with header h and stores
// it unless it is a duplicate, returning its base offset. The error wraps
// the kerr error to answer with.
func (p *partition) append(ctx context.Context, h BatchHeader, batch []byte) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.loadProducers(); err != nil {
		return 0, err
	}
	d := p.producers.Check(h)
	switch d.Verdict {
	case AnswerDuplicate:
		return d.BaseOffset, nil
	case RefuseOutOfOrder:
		return 0, &refusal{d.Reason, kerr.OutOfOrderSequenceNumber}
	case RefuseStaleEpoch:
		return 0, &refusal{d.Reason, kerr.InvalidProducerEpoch}
	case AppendBatch:
	default: // a bug in Producers.Check
		return 0, &refusal{"producer check returned verdict " + d.Verdict.String(), kerr.UnknownServerError}
	}
	base, err := p.log.Append(ctx, batch, h.Records())
	if err != nil {
		return 0, err
	}
	p.producers.Record(h, base)
	return base, nil
}

// refusal is a decision not to store, with its Kafka error.
type refusal struct {
	reason string
	code   *kerr.Error
}

func (r *refusal) Error() string { return "kafka: " + r.reason }
func (r *refusal) Unwrap() error { return r.code }

// produceRecords counts the records of req's partitions, from the count
// field of each one's v2 batch header (a partition without one counts one;
// validating the batch is the handler's business): the weight of the
// request's time in Latency.
func produceRecords(req *kmsg.ProduceRequest) int {
	n := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			b, k := p.Records, 1
			if len(b) >= batchHeaderLen && b[16] == 2 { // magic 2: the count is at byte 57
				k = max(int(int32(binary.BigEndian.Uint32(b[57:61]))), 1)
			}
			n += k
		}
	}
	return n
}
