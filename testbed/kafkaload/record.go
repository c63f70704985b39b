package kafkaload

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
)

// Record is one record as the checker sees it: where it is (or was
// acknowledged to be) and what it holds. The value is kept as its length
// and SHA-256, so a long run's history stays small.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Size      int      // bytes of the value
	Sum       [32]byte // SHA-256 of the value
}

// NewRecord is the Record of a record with the given value.
func NewRecord(topic string, partition int32, offset int64, key, value []byte) Record {
	return Record{Topic: topic, Partition: partition, Offset: offset, Key: string(key), Size: len(value), Sum: sha256.Sum256(value)}
}

// same says r and o hold the same key and value.
func (r Record) same(o Record) bool { return r.Key == o.Key && r.Size == o.Size && r.Sum == o.Sum }

func (r Record) String() string {
	return fmt.Sprintf("%s/%d@%d key %q (%d value bytes)", r.Topic, r.Partition, r.Offset, r.Key, r.Size)
}

// keyPrefix starts every key Key makes.
const keyPrefix = "kl-p"

// Key is the self-describing key of producer's record seq:
// "kl-p<producer>-<seq>", unique within a run.
func Key(producer, seq int) []byte { return fmt.Appendf(nil, "%s%03d-%09d", keyPrefix, producer, seq) }

// ParseKey reads back a key made by Key; ok is false for any other key.
func ParseKey(key string) (producer, seq int, ok bool) {
	rest, found := strings.CutPrefix(key, keyPrefix)
	if !found {
		return 0, 0, false
	}
	p, s, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, false
	}
	producer, err1 := strconv.Atoi(p)
	seq, err2 := strconv.Atoi(s)
	if err1 != nil || err2 != nil || producer < 0 || seq < 0 {
		return 0, 0, false
	}
	return producer, seq, true
}

// Value is the value of the record with key: the key, a '|', then size
// bytes in all of printable filler that depends on the key, so that a
// value read back under another key, or cut short, differs.
func Value(key []byte, size int) []byte {
	v := make([]byte, 0, max(size, len(key)+1))
	v = append(v, key...)
	v = append(v, '|')
	sum := sha256.Sum256(key)
	for i := 0; len(v) < size; i++ {
		v = append(v, 'a'+sum[i%len(sum)]%26)
	}
	return v
}
