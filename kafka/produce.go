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
