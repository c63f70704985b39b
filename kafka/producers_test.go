package kafka

import (
	"errors"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// hdr is a header of producer pid, epoch, first sequence and record count,
// stored at base.
func hdr(pid int64, epoch int16, seq, n int32, base int64) BatchHeader {
	return BatchHeader{BaseOffset: base, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, LastOffsetDelta: n - 1, NumRecords: n}
}

func TestProducersCheck(t *testing.T) {
	tests := []struct {
		name   string
		stored []BatchHeader // recorded in order at their BaseOffset
		batch  BatchHeader
		want   Verdict
		base   int64 // for AnswerDuplicate
	}{
		{"a non-idempotent batch is appended", nil, hdr(-1, -1, -1, 3, 0), AppendBatch, 0},
		{"an unknown producer starts at 0", nil, hdr(7, 0, 0, 3, 0), AppendBatch, 0},
		{"an unknown producer may start anywhere, as in Kafka", nil, hdr(7, 0, 40, 3, 0), AppendBatch, 0},
		{"the next sequence is appended", []BatchHeader{hdr(7, 0, 0, 3, 0)}, hdr(7, 0, 3, 2, 0), AppendBatch, 0},
		{"a retry of the last batch is a duplicate at its offset", []BatchHeader{hdr(7, 0, 0, 3, 10)}, hdr(7, 0, 0, 3, 0), AnswerDuplicate, 10},
		{"a retry of the 5th-last batch is a duplicate", []BatchHeader{hdr(7, 0, 0, 1, 0), hdr(7, 0, 1, 1, 1), hdr(7, 0, 2, 1, 2), hdr(7, 0, 3, 1, 3), hdr(7, 0, 4, 1, 4)}, hdr(7, 0, 0, 1, 0), AnswerDuplicate, 0},
		{"a retry of the 6th-last batch is out of order", []BatchHeader{hdr(7, 0, 0, 1, 0), hdr(7, 0, 1, 1, 1), hdr(7, 0, 2, 1, 2), hdr(7, 0, 3, 1, 3), hdr(7, 0, 4, 1, 4), hdr(7, 0, 5, 1, 5)}, hdr(7, 0, 0, 1, 0), RefuseOutOfOrder, 0},
		{"a gap is out of order", []BatchHeader{hdr(7, 0, 0, 3, 0)}, hdr(7, 0, 4, 1, 0), RefuseOutOfOrder, 0},
		{"a sequence behind but not a cached batch is out of order", []BatchHeader{hdr(7, 0, 0, 3, 0)}, hdr(7, 0, 1, 2, 0), RefuseOutOfOrder, 0},
		{"an older epoch is stale", []BatchHeader{hdr(7, 2, 0, 3, 0)}, hdr(7, 1, 3, 1, 0), RefuseStaleEpoch, 0},
		{"a newer epoch starting at 0 is appended", []BatchHeader{hdr(7, 0, 0, 3, 0)}, hdr(7, 1, 0, 1, 0), AppendBatch, 0},
		{"a newer epoch not starting at 0 is out of order", []BatchHeader{hdr(7, 0, 0, 3, 0)}, hdr(7, 1, 3, 1, 0), RefuseOutOfOrder, 0},
		{"producers are independent", []BatchHeader{hdr(7, 0, 0, 3, 0)}, hdr(8, 0, 0, 1, 0), AppendBatch, 0},
		{"sequences wrap from MaxInt32 to 0", []BatchHeader{hdr(7, 0, math.MaxInt32-1, 2, 0)}, hdr(7, 0, 0, 1, 0), AppendBatch, 0},
		{"a batch across the wrap is a duplicate of itself", []BatchHeader{hdr(7, 0, math.MaxInt32, 3, 5)}, hdr(7, 0, math.MaxInt32, 3, 0), AnswerDuplicate, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := RebuildProducers(tt.stored)
			d := p.Check(tt.batch)
			if d.Verdict != tt.want || (d.Verdict == AnswerDuplicate && d.BaseOffset != tt.base) {
				t.Fatalf("Check = %v at %d (%s), want %v at %d", d.Verdict, d.BaseOffset, d.Reason, tt.want, tt.base)
			}
			if d.Verdict != AppendBatch && d.Verdict != AnswerDuplicate && d.Reason == "" {
				t.Fatalf("refusal %v without a reason", d.Verdict)
			}
		})
	}
}

// TestProducersRebuild: the state built by Check/Record while appending
// equals the state rebuilt from the stored headers alone.
func TestProducersRebuild(t *testing.T) {
	live := &Producers{}
	var stored []BatchHeader
	offset := int64(0)
	for i, b := range []BatchHeader{
		hdr(7, 0, 0, 3, 0), hdr(8, 0, 0, 1, 0), hdr(7, 0, 3, 2, 0), hdr(7, 0, 3, 2, 0), // a retry
		hdr(-1, -1, -1, 4, 0), hdr(7, 1, 0, 1, 0), hdr(8, 0, 5, 1, 0), // a gap
		hdr(7, 1, 1, 1, 0), hdr(7, 1, 2, 1, 0), hdr(7, 1, 3, 1, 0), hdr(7, 1, 4, 1, 0), hdr(7, 1, 5, 1, 0),
	} {
		if live.Check(b).Verdict != AppendBatch {
			continue
		}
		b.BaseOffset = offset
		live.Record(b, offset)
		stored = append(stored, b)
		offset += int64(b.Records())
		t.Logf("batch %d stored at %d", i, b.BaseOffset)
	}
	rebuilt := RebuildProducers(stored)
	probes := []BatchHeader{hdr(7, 1, 1, 1, 0), hdr(7, 1, 5, 1, 0), hdr(7, 1, 6, 1, 0), hdr(7, 0, 5, 1, 0), hdr(8, 0, 0, 1, 0), hdr(8, 0, 1, 1, 0), hdr(9, 0, 3, 1, 0)}
	for _, pr := range probes {
		if a, b := live.Check(pr), rebuilt.Check(pr); a != b {
			t.Errorf("probe %+v: live %+v, rebuilt %+v", pr, a, b)
		}
	}
	if live.Len() != rebuilt.Len() || live.Len() != 2 {
		t.Fatalf("producers: live %d, rebuilt %d, want 2", live.Len(), rebuilt.Len())
	}
}

func TestValidateProduce(t *testing.T) {
	good := makeBatch(7, 0, 0, "a", "b")
	flip := func(i int) []byte { b := append([]byte(nil), good...); b[i] ^= 1; return b }
	tests := []struct {
		name  string
		batch []byte
		want  *kerr.Error
	}{
		{"good", good, nil},
		{"a flipped record byte fails the CRC", flip(len(good) - 1), kerr.CorruptMessage},
		{"a flipped attribute byte fails the CRC", flip(crcStart + 1), kerr.CorruptMessage},
		{"the base offset is outside the CRC", flip(7), nil},
		{"truncated", good[:len(good)-1], kerr.CorruptMessage},
		{"shorter than a header", good[:30], kerr.CorruptMessage},
		{"magic 1", func() []byte { b := append([]byte(nil), good...); b[16] = 1; return b }(), kerr.UnsupportedForMessageFormat},
		{"two batches", append(append([]byte(nil), good...), good...), kerr.InvalidRecord},
		{"over the size limit", makeBatch(7, 0, 0, string(make([]byte, 2000))), kerr.MessageTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ValidateProduce(tt.batch, 1024)
			if tt.want == nil {
				if err != nil || h.Records() != 2 || h.ProducerID != 7 {
					t.Fatalf("ValidateProduce = %+v, %v", h, err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("ValidateProduce error %v, want %v", err, tt.want)
			}
		})
	}
}
