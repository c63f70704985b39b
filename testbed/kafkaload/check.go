package kafkaload

import (
	"fmt"
	"sort"
)

// Result is what Check found. Acknowledged, ReadBack and Lost count
// acknowledged records; Read counts every record read; Duplicated and
// OutOfOrder count records read.
type Result struct {
	// Acknowledged counts the acknowledged records (distinct by topic,
	// partition and offset; a second acknowledgement of an offset counts
	// as a record too, and one of the two is necessarily lost).
	Acknowledged int `json:"acknowledged"`
	// ReadBack counts the acknowledged records read back at their offset
	// with the same key and value bytes.
	ReadBack int `json:"read_back"`
	// Read counts every record read, acknowledged or not (a produce that
	// failed may still have been stored).
	Read int `json:"read"`
	// Lost counts the acknowledged records not read back at their offset,
	// or read there with another key or other bytes.
	Lost int `json:"lost"`
	// Duplicated counts the reads of a key beyond its first (a key made
	// once, read back twice).
	Duplicated int `json:"duplicated"`
	// OutOfOrder counts the reads whose offset is not above the one read
	// before in the same partition, and the reads of a producer's record
	// (a key of Key) at an offset above one of its later records in the
	// same partition.
	OutOfOrder int `json:"out_of_order"`
	// Violations describe the first maxViolations of them.
	Violations []string `json:"violations,omitempty"`
	// More counts the violations not described.
	More int `json:"more_violations,omitempty"`
}

// maxViolations bounds Result.Violations.
const maxViolations = 20

// OK says nothing acknowledged was lost and nothing read was duplicated
// or out of order.
func (r Result) OK() bool { return r.Lost == 0 && r.Duplicated == 0 && r.OutOfOrder == 0 }

func (r *Result) violation(format string, args ...any) {
	if len(r.Violations) == maxViolations {
		r.More++
		return
	}
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

type partKey struct {
	topic string
	p     int32
}

type offKey struct {
	partKey
	off int64
}

// Check compares the acknowledged records with the records read, in the
// order they were read (each partition from offset 0 to its high
// watermark). It is a pure function of its arguments, which it does not
// change.
func Check(acked, read []Record) Result {
	var r Result
	r.Read = len(read)
	at := make(map[offKey]Record, len(read))
	keys := map[string]int{}
	last := map[partKey]int64{}
	for _, x := range read {
		pk := partKey{x.Topic, x.Partition}
		prev, seen := last[pk]
		if seen && x.Offset <= prev {
			r.OutOfOrder++
			r.violation("out of order: %s read after offset %d", x, prev)
		}
		if !seen || x.Offset > prev {
			last[pk] = x.Offset
		}
		k := offKey{pk, x.Offset}
		if _, ok := at[k]; !ok {
			at[k] = x
		}
		if x.Key == "" {
			continue
		}
		keys[x.Key]++
		if keys[x.Key] > 1 {
			r.Duplicated++
			r.violation("duplicated: %s is read number %d of its key", x, keys[x.Key])
		}
	}
	r.checkProducerOrder(read)
	for _, a := range acked {
		r.Acknowledged++
		got, ok := at[offKey{partKey{a.Topic, a.Partition}, a.Offset}]
		switch {
		case !ok:
			r.Lost++
			r.violation("lost: %s acknowledged, nothing read at its offset", a)
		case !got.same(a):
			r.Lost++
			r.violation("lost: %s acknowledged, read %s", a, got)
		default:
			r.ReadBack++
		}
	}
	return r
}

// checkProducerOrder counts the records of a producer (keys of Key) read
// in a partition at an offset above a record it produced later.
func (r *Result) checkProducerOrder(read []Record) {
	type prodKey struct {
		partKey
		producer int
	}
	byProducer := map[prodKey][]Record{}
	for _, x := range read {
		p, _, ok := ParseKey(x.Key)
		if !ok {
			continue
		}
		k := prodKey{partKey{x.Topic, x.Partition}, p}
		byProducer[k] = append(byProducer[k], x)
	}
	ks := make([]prodKey, 0, len(byProducer))
	for k := range byProducer {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.topic != b.topic {
			return a.topic < b.topic
		}
		if a.p != b.p {
			return a.p < b.p
		}
		return a.producer < b.producer
	})
	for _, k := range ks {
		xs := byProducer[k]
		sort.SliceStable(xs, func(i, j int) bool { return xs[i].Offset < xs[j].Offset })
		maxSeq, maxAt := -1, Record{}
		for _, x := range xs {
			_, seq, _ := ParseKey(x.Key)
			if seq < maxSeq {
				r.OutOfOrder++
				r.violation("out of order: producer %d's %s stored after its %s", k.producer, x, maxAt)
				continue
			}
			maxSeq, maxAt = seq, x
		}
	}
}
