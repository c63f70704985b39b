package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSizeHintHoldsFetchResponses: a Fetch response encodes within the
// capacity sizeHint gives it, at every version served, so encode never
// grows the buffer that carries its record batches.
func TestSizeHintHoldsFetchResponses(t *testing.T) {
	for v := supported[kmsg.Fetch].min; v <= supported[kmsg.Fetch].max; v++ {
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(v)
		for _, name := range []string{"a", "a-much-longer-topic-name-of-many-bytes"} {
			tp := kmsg.NewFetchResponseTopic()
			tp.Topic = name
			for p := range int32(3) {
				pr := kmsg.NewFetchResponseTopicPartition()
				pr.Partition = p
				pr.RecordBatches = make([]byte, 1<<20+int(p))
				pr.AbortedTransactions = make([]kmsg.FetchResponseTopicPartitionAbortedTransaction, 2)
				tp.Partitions = append(tp.Partitions, pr)
			}
			resp.Topics = append(resp.Topics, tp)
		}
		hint := sizeHint(resp)
		b := encode(nil, header{key: kmsg.Fetch, version: v}, resp)
		if len(b) > hint || cap(b) != hint {
			t.Errorf("Fetch v%d: encoded %d bytes (capacity %d), sizeHint %d: the buffer grew", v, len(b), cap(b), hint)
		}
	}
}
