package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/malachi-log/malachi/meta"
)

// The produce hold (fault_injection only), for a test that must kill a
// leader between its replicas storing a batch and its answer to the
// producer:
//
//	POST /v1/faults/hold-produce/{topic}/{partition}  arm: the next batch
//	    this broker stores on every replica of the partition holds its
//	    Produce answer until the broker stops
//	GET  /v1/faults/hold-produce/{topic}/{partition}  wait until a batch
//	    is held (or the request ends); answers what is held
//
// The test SIGKILLs the broker once the GET answers: the client's retry
// of the held batch meets a new leader, which must answer it as a
// duplicate.

// errFaultInjectionOff refuses a fault route on a broker whose config
// does not have fault_injection = true.
var errFaultInjectionOff = errors.New("malachid: fault_injection is off")

// HeldBatch is what the produce hold holds: the batch's partition and its
// Kafka offsets [BaseOffset, BaseOffset+Records).
type HeldBatch struct {
	Topic      string `json:"topic"`
	Partition  int32  `json:"partition"`
	BaseOffset int64  `json:"base_offset"`
	Records    int32  `json:"records"`
}

// produceHolds are the armed holds, one per partition. The zero value is
// not used: nil is "fault_injection off".
type produceHolds struct {
	mu    sync.Mutex
	armed map[partKey]*produceHold // protected by mu
}

// produceHold is one arming: held is closed when a batch is held, and at
// is set before it is.
type produceHold struct {
	held  chan struct{}
	fired bool      // protected by produceHolds.mu
	at    HeldBatch // written once, before held is closed
}

func newProduceHolds() *produceHolds { return &produceHolds{armed: map[partKey]*produceHold{}} }

// arm arms k's hold unless one is armed and not fired yet.
func (h *produceHolds) arm(k partKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur := h.armed[k]; cur != nil && !cur.fired {
		return
	}
	h.armed[k] = &produceHold{held: make(chan struct{})}
}

// get is k's latest arming, nil when never armed.
func (h *produceHolds) get(k partKey) *produceHold {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.armed[k]
}

// hold is called by partLog.Append once a batch is on every replica: when
// k's hold is armed and has not fired, it fires, logs, and blocks until
// stop ends (the broker's Close; in the test, never: it is killed).
func (h *produceHolds) hold(stop context.Context, b *Server, at HeldBatch) {
	k := partKey{at.Topic, at.Partition}
	h.mu.Lock()
	p := h.armed[k]
	if p == nil || p.fired {
		h.mu.Unlock()
		return
	}
	p.fired, p.at = true, at
	close(p.held)
	h.mu.Unlock()
	b.log.Warn().Str("fault", "hold-produce").Str("topic", at.Topic).Int32("partition", at.Partition).
		Int64("base_offset", at.BaseOffset).Int32("records", at.Records).
		Msg("fault injected: holding a Produce answer whose batch every replica stored")
	<-stop.Done()
}

// parseHoldPath reads {topic}/{partition} of a hold route, refusing a
// broker without fault_injection and a partition the topic does not have.
func (b *Server) parseHoldPath(r *http.Request) (partKey, error) {
	if b.holds == nil {
		return partKey{}, fmt.Errorf("%w: %s %s needs fault_injection = true in the broker's config", errFaultInjectionOff, r.Method, r.URL.Path)
	}
	topic, ps := r.PathValue("topic"), r.PathValue("partition")
	p, err := strconv.ParseInt(ps, 10, 32)
	if err != nil {
		return partKey{}, fmt.Errorf("%w: partition %q of %s: not a number", errBadRequest, ps, topic)
	}
	tp, ok := b.node.View().Topic(topic)
	if !ok {
		return partKey{}, fmt.Errorf("%w: topic %q", meta.ErrUnknownTopic, topic)
	}
	if p < 0 || p >= int64(tp.Partitions) {
		return partKey{}, fmt.Errorf("%w: partition %d of %s: it has %d", errBadRequest, p, topic, tp.Partitions)
	}
	return partKey{topic, int32(p)}, nil
}

// armHold answers POST /v1/faults/hold-produce/{topic}/{partition}.
func (b *Server) armHold(r *http.Request, body []byte) (any, error) {
	k, err := b.parseHoldPath(r)
	if err != nil {
		return nil, err
	}
	var req struct{}
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	b.holds.arm(k)
	b.log.Warn().Str("fault", "hold-produce").Str("topic", k.topic).Int32("partition", k.index).Msg("fault armed")
	return map[string]any{"armed": "hold-produce", "topic": k.topic, "partition": k.index}, nil
}

// waitHold answers GET /v1/faults/hold-produce/{topic}/{partition}: the
// held batch once the armed hold fires, or the request's end.
func (b *Server) waitHold(r *http.Request, _ []byte) (any, error) {
	k, err := b.parseHoldPath(r)
	if err != nil {
		return nil, err
	}
	p := b.holds.get(k)
	if p == nil {
		return nil, fmt.Errorf("%w: no produce hold armed for %s/%d", errNotFound, k.topic, k.index)
	}
	select {
	case <-p.held:
		return p.at, nil
	case <-r.Context().Done():
		return nil, fmt.Errorf("produce hold of %s/%d: no batch held: %w", k.topic, k.index, r.Context().Err())
	}
}
