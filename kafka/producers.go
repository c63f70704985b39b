package kafka

import "fmt"

// keepBatches is how many of a producer's last batches a partition
// remembers for answering retries, as Kafka does (a producer has at most 5
// batches in flight per partition).
const keepBatches = 5

// Verdict is what to do with a produced batch, decided by Producers.Check.
type Verdict uint8

// The verdicts. The zero value is reserved: a Decision always names one.
const (
	_ Verdict = iota
	// AppendBatch: store the batch, then Record it.
	AppendBatch
	// AnswerDuplicate: the batch is a retry of one stored at
	// Decision.BaseOffset; answer with that offset and store nothing.
	AnswerDuplicate
	// RefuseOutOfOrder: the sequence does not follow the producer's last
	// (OUT_OF_ORDER_SEQUENCE_NUMBER); store nothing.
	RefuseOutOfOrder
	// RefuseStaleEpoch: the producer epoch is older than the partition has
	// seen (INVALID_PRODUCER_EPOCH); store nothing.
	RefuseStaleEpoch
)

func (v Verdict) String() string {
	switch v {
	case AppendBatch:
		return "append"
	case AnswerDuplicate:
		return "duplicate"
	case RefuseOutOfOrder:
		return "out-of-order"
	case RefuseStaleEpoch:
		return "stale-epoch"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Decision is Producers.Check's answer.
type Decision struct {
	Verdict Verdict
	// BaseOffset is the stored batch's base offset for AnswerDuplicate.
	BaseOffset int64
	// Reason says why, for a refusal's log line and error message.
	Reason string
}

// Producers is one partition's idempotent-producer state: per producer id
// its epoch and the sequence ranges and base offsets of its last
// keepBatches stored batches. It is pure (no clock, no I/O) and not safe
// for concurrent use: the partition's lock guards it. The zero value is
// empty and ready.
//
// INVARIANT: for each producer, batches are in log order and their
// sequences are contiguous (each first = previous last + 1 on the ring).
type Producers struct {
	m map[int64]*producer
}

type producer struct {
	epoch   int16
	batches []seqBatch // oldest first, at most keepBatches
}

type seqBatch struct {
	first, last int32
	base        int64
}

// Check decides what to do with a batch with header h; it changes nothing.
// A producer the partition has no state for may start at any sequence, as
// in Kafka (its state may have been lost with its old batches).
func (p *Producers) Check(h BatchHeader) Decision {
	if !h.Idempotent() {
		return Decision{Verdict: AppendBatch}
	}
	e := p.m[h.ProducerID]
	switch {
	case e == nil:
		return Decision{Verdict: AppendBatch}
	case h.ProducerEpoch < e.epoch:
		return Decision{Verdict: RefuseStaleEpoch, Reason: fmt.Sprintf("producer %d epoch %d is older than epoch %d", h.ProducerID, h.ProducerEpoch, e.epoch)}
	case h.ProducerEpoch > e.epoch:
		if h.BaseSequence != 0 {
			return Decision{Verdict: RefuseOutOfOrder, Reason: fmt.Sprintf("producer %d new epoch %d starts at sequence %d, want 0", h.ProducerID, h.ProducerEpoch, h.BaseSequence)}
		}
		return Decision{Verdict: AppendBatch}
	}
	return e.check(h)
}

// check decides for a batch of the producer's current epoch.
func (e *producer) check(h BatchHeader) Decision {
	last := h.LastSequence()
	for _, b := range e.batches {
		if b.first == h.BaseSequence && b.last == last {
			return Decision{Verdict: AnswerDuplicate, BaseOffset: b.base}
		}
	}
	if len(e.batches) == 0 {
		return Decision{Verdict: AppendBatch}
	}
	want := addSequence(e.batches[len(e.batches)-1].last, 1)
	if h.BaseSequence != want {
		return Decision{Verdict: RefuseOutOfOrder, Reason: fmt.Sprintf("producer %d epoch %d: sequence %d, want %d", h.ProducerID, h.ProducerEpoch, h.BaseSequence, want)}
	}
	return Decision{Verdict: AppendBatch}
}

// Record notes that the batch with header h was stored at base. Call it
// only after Check said AppendBatch and the append succeeded, or when
// rebuilding from stored batches in log order.
func (p *Producers) Record(h BatchHeader, base int64) {
	if !h.Idempotent() {
		return
	}
	if p.m == nil {
		p.m = make(map[int64]*producer)
	}
	e := p.m[h.ProducerID]
	if e == nil || e.epoch != h.ProducerEpoch {
		e = &producer{epoch: h.ProducerEpoch}
		p.m[h.ProducerID] = e
	}
	e.batches = append(e.batches, seqBatch{first: h.BaseSequence, last: h.LastSequence(), base: base})
	if n := len(e.batches); n > keepBatches {
		e.batches = append(e.batches[:0], e.batches[n-keepBatches:]...)
	}
}

// Len is the number of producers with state.
func (p *Producers) Len() int { return len(p.m) }

// RebuildProducers returns the state a partition had after storing the
// batches with headers hs, in log order, each at its stored BaseOffset:
// what a new leader computes from its log when it opens the partition.
func RebuildProducers(hs []BatchHeader) *Producers {
	p := &Producers{}
	for _, h := range hs {
		p.Record(h, h.BaseOffset)
	}
	return p
}
