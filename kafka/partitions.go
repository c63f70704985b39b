package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
)

// codeOf maps an error of the Cluster, a Log or a check to its Kafka error.
func codeOf(err error) *kerr.Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotLeader):
		return kerr.NotLeaderForPartition
	case errors.Is(err, ErrUnknownTopicOrPartition):
		return kerr.UnknownTopicOrPartition
	case errors.Is(err, ErrTopicExists):
		return kerr.TopicAlreadyExists
	case errors.Is(err, ErrInvalidTopic):
		return kerr.InvalidTopicException
	case errors.Is(err, ErrInvalidPartitions):
		return kerr.InvalidPartitions
	case errors.Is(err, ErrOffsetOutOfRange):
		return kerr.OffsetOutOfRange
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kerr.RequestTimedOut
	}
	return kerrOf(err)
}

// code is the wire value of e, 0 for nil.
func code(e *kerr.Error) int16 {
	if e == nil {
		return 0
	}
	return e.Code
}

// topicPartition names a partition.
type topicPartition struct {
	topic string
	index int32
}

// partition is the listener's state of a partition this broker leads.
type partition struct {
	// mu serializes produce: the producer check, the Append and the Record
	// of one batch happen under it, so sequences and offsets agree.
	mu  sync.Mutex
	log Log
	// producers is nil until the first produce rebuilds it from the log.
	// Protected by mu.
	producers *Producers
}

// partitions caches partition state per Log value: a new Log (leadership
// moved away and back) starts with fresh state rebuilt from its batches.
type partitions struct {
	mu sync.Mutex
	m  map[topicPartition]*partition // protected by mu
}

// get is the state of the partition whose log is l.
func (ps *partitions) get(tp topicPartition, l Log) *partition {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = make(map[topicPartition]*partition)
	}
	p := ps.m[tp]
	if p == nil || p.log != l {
		p = &partition{log: l}
		ps.m[tp] = p
	}
	return p
}

// loadProducers rebuilds p.producers from the log's batch headers when
// not yet done. Call with p.mu held.
func (p *partition) loadProducers() error {
	if p.producers != nil {
		return nil
	}
	hs, err := scanHeaders(p.log)
	if err != nil {
		return err
	}
	p.producers = RebuildProducers(hs)
	return nil
}

// scanChunk is how much scanHeaders reads at once.
const scanChunk = 1 << 20

// scanHeaders reads the headers of every batch in l up to its high
// watermark, in log order.
func scanHeaders(l Log) ([]BatchHeader, error) {
	start, hw := l.Offsets()
	var hs []BatchHeader
	next := start
	for next < hw {
		b, err := l.Read(next, scanChunk)
		if err != nil {
			return nil, fmt.Errorf("kafka: rebuilding producer state at offset %d: %w", next, err)
		}
		progressed := false
		for len(b) > 0 {
			h, size, err := ParseBatch(b)
			if err != nil {
				return nil, fmt.Errorf("kafka: rebuilding producer state at offset %d: %w", next, err)
			}
			b = b[size:]
			end := h.BaseOffset + int64(h.Records())
			if end <= next && len(hs) > 0 {
				continue
			}
			hs = append(hs, h)
			next, progressed = end, true
		}
		if !progressed {
			return nil, fmt.Errorf("kafka: rebuilding producer state: Read(%d) returned no batch below the high watermark %d", next, hw)
		}
	}
	return hs, nil
}
