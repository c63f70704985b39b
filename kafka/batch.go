package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// batchHeaderLen is the length of a v2 record batch header: everything
// before the records.
const batchHeaderLen = 61

// crcStart is the offset of the attributes field, where the CRC-32C of a v2
// batch starts (it covers attributes through the end of the batch).
const crcStart = 21

// Batch attribute bits the listener reads.
const (
	attrTransactional = 0x10
	attrControl       = 0x20
)

// castagnoli is the CRC-32C table of record batch v2.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errBatch marks a batch that is not one well-formed v2 record batch; the
// wrapped kerr error is the code it is answered with.
var errBatch = errors.New("kafka: bad record batch")

// BatchHeader is the header of a v2 record batch: what the listener checks
// on produce and what producer state is rebuilt from.
type BatchHeader struct {
	BaseOffset      int64
	Length          int32 // bytes after the Length field
	Attributes      int16
	LastOffsetDelta int32
	ProducerID      int64 // -1: not an idempotent producer
	ProducerEpoch   int16
	BaseSequence    int32
	NumRecords      int32
}

// Records is the number of offsets the batch takes: lastOffsetDelta+1.
func (h BatchHeader) Records() int32 { return h.LastOffsetDelta + 1 }

// Idempotent says whether the batch carries a producer id and sequence.
func (h BatchHeader) Idempotent() bool { return h.ProducerID >= 0 }

// LastSequence is the sequence of the batch's last record; sequences wrap
// from MaxInt32 to 0.
func (h BatchHeader) LastSequence() int32 { return addSequence(h.BaseSequence, h.LastOffsetDelta) }

// addSequence returns seq+n on the sequence ring [0, MaxInt32].
func addSequence(seq, n int32) int32 {
	const maxSeq = 1<<31 - 1
	if seq > maxSeq-n {
		return n - (maxSeq - seq) - 1
	}
	return seq + n
}

// ParseBatch reads the header of the record batch that starts b and
// returns it with the batch's length on the wire. It checks only that b
// holds a whole batch of magic 2; ValidateProduce checks the rest.
func ParseBatch(b []byte) (BatchHeader, int, error) {
	if len(b) < batchHeaderLen {
		return BatchHeader{}, 0, fmt.Errorf("%w: %d bytes, a v2 header needs %d: %w", errBatch, len(b), batchHeaderLen, kerr.CorruptMessage)
	}
	length := int32(binary.BigEndian.Uint32(b[8:12]))
	size := 12 + int(length)
	if length < batchHeaderLen-12 || size > len(b) {
		return BatchHeader{}, 0, fmt.Errorf("%w: length field %d, %d bytes present: %w", errBatch, length, len(b), kerr.CorruptMessage)
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b[:size]); err != nil {
		return BatchHeader{}, 0, fmt.Errorf("%w: %v: %w", errBatch, err, kerr.CorruptMessage)
	}
	if rb.Magic != 2 {
		return BatchHeader{}, 0, fmt.Errorf("%w: magic %d, want 2: %w", errBatch, rb.Magic, kerr.UnsupportedForMessageFormat)
	}
	return BatchHeader{
		BaseOffset:      rb.FirstOffset,
		Length:          rb.Length,
		Attributes:      rb.Attributes,
		LastOffsetDelta: rb.LastOffsetDelta,
		ProducerID:      rb.ProducerID,
		ProducerEpoch:   rb.ProducerEpoch,
		BaseSequence:    rb.FirstSequence,
		NumRecords:      rb.NumRecords,
	}, size, nil
}

// ValidateProduce checks that records, one partition's records of a
// Produce request, is exactly one v2 batch whose CRC-32C matches, that
// counts its records consistently and that is not transactional, and
// returns its header. The error wraps the kerr error to answer with.
func ValidateProduce(records []byte, maxBytes int32) (BatchHeader, error) {
	if maxBytes > 0 && len(records) > int(maxBytes) {
		return BatchHeader{}, fmt.Errorf("%w: %d bytes over the limit of %d: %w", errBatch, len(records), maxBytes, kerr.MessageTooLarge)
	}
	h, size, err := ParseBatch(records)
	if err != nil {
		return BatchHeader{}, err
	}
	if size != len(records) {
		return BatchHeader{}, fmt.Errorf("%w: %d bytes after the first batch; a produce carries exactly one batch: %w", errBatch, len(records)-size, kerr.InvalidRecord)
	}
	want := binary.BigEndian.Uint32(records[17:21])
	if got := crc32.Checksum(records[crcStart:size], castagnoli); got != want {
		return BatchHeader{}, fmt.Errorf("%w: CRC-32C %08x, header says %08x: %w", errBatch, got, want, kerr.CorruptMessage)
	}
	if h.LastOffsetDelta < 0 || h.NumRecords != h.LastOffsetDelta+1 {
		return BatchHeader{}, fmt.Errorf("%w: %d records with last offset delta %d: %w", errBatch, h.NumRecords, h.LastOffsetDelta, kerr.InvalidRecord)
	}
	if h.Attributes&(attrTransactional|attrControl) != 0 {
		return BatchHeader{}, fmt.Errorf("%w: attributes %#x: transactions are not supported: %w", errBatch, h.Attributes, kerr.InvalidTxnState)
	}
	if h.Idempotent() && (h.BaseSequence < 0 || h.ProducerEpoch < 0) {
		return BatchHeader{}, fmt.Errorf("%w: producer %d with epoch %d and sequence %d: %w", errBatch, h.ProducerID, h.ProducerEpoch, h.BaseSequence, kerr.InvalidRecord)
	}
	return h, nil
}

// kerrOf is the Kafka error err wraps, or UNKNOWN_SERVER_ERROR.
func kerrOf(err error) *kerr.Error {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke
	}
	return kerr.UnknownServerError
}
