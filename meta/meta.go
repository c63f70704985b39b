package meta

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Errors returned by validation and by Apply. Match them with errors.Is.
var (
	ErrInvalid        = errors.New("meta: invalid")
	ErrUnknownSegment = errors.New("meta: unknown segment")
	ErrSegmentExists  = errors.New("meta: segment exists")
	ErrStaleReplicas  = errors.New("meta: stale replica set")
	ErrSealed         = errors.New("meta: segment sealed")
	ErrNotSealed      = errors.New("meta: segment not sealed")
)

// BrokerID names a broker. Zero is reserved and never valid.
type BrokerID uint32

// String returns the decimal form of the id.
func (b BrokerID) String() string { return strconv.FormatUint(uint64(b), 10) }

// ParseBrokerID parses the decimal form written by String.
func ParseBrokerID(s string) (BrokerID, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("%w: broker id %q: want a decimal number from 1 to %d", ErrInvalid, s, uint32(1<<32-1))
	}
	return BrokerID(v), nil
}

// MaxSegmentIDLen bounds the length of a SegmentID in bytes.
const MaxSegmentIDLen = 200

// SegmentID names a segment. It is also the base name of every copy's file,
// so it is restricted to one safe path element (invariant 2).
type SegmentID string

// Validate reports whether id is a usable segment name: 1 to MaxSegmentIDLen
// bytes of [A-Za-z0-9._-], not "." or "..", not starting with a dot.
func (id SegmentID) Validate() error {
	if len(id) == 0 {
		return fmt.Errorf("%w: segment id is empty", ErrInvalid)
	}
	if len(id) > MaxSegmentIDLen {
		return fmt.Errorf("%w: segment id %.40q...: %d bytes, more than %d", ErrInvalid, string(id), len(id), MaxSegmentIDLen)
	}
	if id[0] == '.' {
		return fmt.Errorf("%w: segment id %q starts with a dot", ErrInvalid, string(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: segment id %q: byte %q at %d is not one of [A-Za-z0-9._-]", ErrInvalid, string(id), c, i)
		}
	}
	return nil
}

// Checksum is the CRC32C of a copy's frames. The zero value means that no
// checksum is recorded; CRC32C builds a set one, so that a CRC of zero is
// still representable.
type Checksum uint64

// NoChecksum is the zero Checksum: none recorded.
const NoChecksum Checksum = 0

const checksumSet = 1 << 32

// CRC32C returns the Checksum holding the CRC32C value v.
func CRC32C(v uint32) Checksum { return Checksum(checksumSet | uint64(v)) }

// Value returns the CRC32C value and whether one is recorded.
func (c Checksum) Value() (uint32, bool) { return uint32(c), c&checksumSet != 0 }

// IsSet reports whether a checksum is recorded.
func (c Checksum) IsSet() bool { return c&checksumSet != 0 }

// String returns "crc32c:xxxxxxxx", or "none".
func (c Checksum) String() string {
	v, ok := c.Value()
	if !ok {
		return "none"
	}
	return fmt.Sprintf("crc32c:%08x", v)
}

// MarshalText implements encoding.TextMarshaler with the String form.
func (c Checksum) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText parses the String form.
func (c *Checksum) UnmarshalText(b []byte) error {
	s := string(b)
	if s == "none" || s == "" {
		*c = NoChecksum
		return nil
	}
	hex, ok := strings.CutPrefix(s, "crc32c:")
	if !ok || len(hex) != 8 {
		return fmt.Errorf("%w: checksum %q: want crc32c:xxxxxxxx or none", ErrInvalid, s)
	}
	v, err := strconv.ParseUint(hex, 16, 32)
	if err != nil {
		return fmt.Errorf("%w: checksum %q: %v", ErrInvalid, s, err)
	}
	*c = CRC32C(uint32(v))
	return nil
}

// Broker is a registered member of the cluster.
type Broker struct {
	ID BrokerID `json:"id"`
	// Rack is the failure domain (rack or zone); empty when unknown.
	Rack string `json:"rack,omitempty"`
	// AdminAddr is the broker's own admin API (host:port), which exists
	// whether or not the heal plugin is enabled.
	AdminAddr string `json:"admin_addr,omitempty"`
	// RaftAddr is the control plane's consensus transport (host:port).
	RaftAddr string `json:"raft_addr,omitempty"`
	// RPCAddr is the heal plugin's control listener (host:port); empty
	// when the plugin is disabled on that broker.
	RPCAddr string `json:"rpc_addr,omitempty"`
	// DataAddr is the catch-up data listener (host:port).
	DataAddr string `json:"data_addr,omitempty"`
	// KafkaAddr is the broker's Kafka listener (host:port); empty when it
	// serves no Kafka clients.
	KafkaAddr string `json:"kafka_addr,omitempty"`
	// Mode is the operator's lifecycle mode (SetBrokerMode); empty is
	// active. RegisterBroker keeps it.
	Mode BrokerMode `json:"mode,omitempty"`
	// Until ends a maintenance window (UTC). An active broker whose window
	// was ended early keeps when it was ended; zero otherwise.
	Until time.Time `json:"until,omitzero"`
}

// Validate checks the broker's id and mode.
func (b Broker) Validate() error {
	if b.ID == 0 {
		return fmt.Errorf("%w: broker id 0 is reserved", ErrInvalid)
	}
	if err := b.Mode.Validate(); err != nil {
		return fmt.Errorf("broker %d: %w", b.ID, err)
	}
	return nil
}

// Segment is the metadata of one segment of the log.
type Segment struct {
	ID SegmentID `json:"id"`
	// StartOffset is the offset of the first record.
	StartOffset uint64 `json:"start_offset"`
	// Length is the number of records; fixed once sealed.
	Length uint64 `json:"length"`
	// ByteSize is the number of bytes of the frames; fixed once sealed.
	ByteSize int64 `json:"byte_size"`
	// Sealed reports that the offset range and ByteSize are fixed.
	Sealed bool `json:"sealed"`
	// Checksum is the CRC32C of the frames; set when sealed.
	Checksum Checksum `json:"checksum"`
	// Replicas is the ordered replica set: reads prefer the first.
	Replicas []BrokerID `json:"replicas"`
	// Version increments on every change.
	Version uint64 `json:"version"`
}

// EndOffset is StartOffset+Length: one past the last record.
func (s *Segment) EndOffset() uint64 { return s.StartOffset + s.Length }

// HasReplica reports whether b is in the replica set.
func (s *Segment) HasReplica(b BrokerID) bool {
	for _, r := range s.Replicas {
		if r == b {
			return true
		}
	}
	return false
}

// Validate checks invariants 2, 3 and 4 for one segment.
func (s *Segment) Validate() error {
	if err := s.ID.Validate(); err != nil {
		return err
	}
	if s.ByteSize < 0 {
		return fmt.Errorf("%w: segment %s: byte_size %d is negative", ErrInvalid, s.ID, s.ByteSize)
	}
	if s.StartOffset+s.Length < s.StartOffset {
		return fmt.Errorf("%w: segment %s: start_offset %d + length %d overflows", ErrInvalid, s.ID, s.StartOffset, s.Length)
	}
	if s.Sealed && !s.Checksum.IsSet() {
		return fmt.Errorf("%w: segment %s: sealed without a checksum", ErrInvalid, s.ID)
	}
	if s.Length == 0 && s.ByteSize != 0 {
		return fmt.Errorf("%w: segment %s: %d bytes for zero records", ErrInvalid, s.ID, s.ByteSize)
	}
	if err := ValidateReplicas(s.Replicas); err != nil {
		return fmt.Errorf("segment %s: %w", s.ID, err)
	}
	return nil
}

// Clone returns a copy of s that shares no memory with it.
func (s Segment) Clone() Segment {
	s.Replicas = append([]BrokerID(nil), s.Replicas...)
	return s
}

// ValidateReplicas checks invariant 3: no broker zero, no broker twice.
func ValidateReplicas(rs []BrokerID) error {
	for i, r := range rs {
		if r == 0 {
			return fmt.Errorf("%w: replica set %v: broker id 0 at position %d", ErrInvalid, rs, i)
		}
		for _, q := range rs[:i] {
			if q == r {
				return fmt.Errorf("%w: replica set %v: broker %d appears twice", ErrInvalid, rs, r)
			}
		}
	}
	return nil
}

// SameReplicas reports whether a and b are the same ordered replica set.
func SameReplicas(a, b []BrokerID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Snapshot is a consistent view of the metadata at one applied index.
type Snapshot struct {
	// Index is the control plane's applied index this view reflects.
	Index uint64 `json:"index"`
	// ReplicationFactor is the number of replicas every segment should have.
	ReplicationFactor int `json:"replication_factor"`
	// Brokers are the registered brokers, sorted by ID.
	Brokers []Broker `json:"brokers"`
	// Topics are the registered Kafka topics, sorted by name.
	Topics []Topic `json:"topics,omitempty"`
	// Groups are the Kafka consumer groups' committed offsets, sorted by
	// group; absent from snapshots written before groups.
	Groups []GroupOffsets `json:"groups,omitempty"`
	// Segments are all segments, sorted by ID.
	Segments []Segment `json:"segments"`
}

// Segment returns the segment named id, found by binary search.
func (s *Snapshot) Segment(id SegmentID) (*Segment, bool) {
	i := sort.Search(len(s.Segments), func(i int) bool { return s.Segments[i].ID >= id })
	if i < len(s.Segments) && s.Segments[i].ID == id {
		return &s.Segments[i], true
	}
	return nil, false
}

// SameReplicaSets reports whether s and o hold the same segments with the
// same replica sets (SameReplicas: the same brokers in the same order).
func (s *Snapshot) SameReplicaSets(o *Snapshot) bool {
	if len(s.Segments) != len(o.Segments) {
		return false
	}
	for _, seg := range s.Segments {
		other, ok := o.Segment(seg.ID)
		if !ok || !SameReplicas(seg.Replicas, other.Replicas) {
			return false
		}
	}
	return true
}

// Broker returns the registered broker id.
func (s *Snapshot) Broker(id BrokerID) (Broker, bool) {
	i := sort.Search(len(s.Brokers), func(i int) bool { return s.Brokers[i].ID >= id })
	if i < len(s.Brokers) && s.Brokers[i].ID == id {
		return s.Brokers[i], true
	}
	return Broker{}, false
}

// Validate checks every segment and broker and the sort order.
func (s *Snapshot) Validate() error {
	if s.ReplicationFactor < 1 {
		return fmt.Errorf("%w: replication_factor %d: want at least 1", ErrInvalid, s.ReplicationFactor)
	}
	for i := range s.Brokers {
		if err := s.Brokers[i].Validate(); err != nil {
			return err
		}
		if i > 0 && s.Brokers[i-1].ID >= s.Brokers[i].ID {
			return fmt.Errorf("%w: brokers not sorted by id or duplicated at %d", ErrInvalid, s.Brokers[i].ID)
		}
	}
	for i := range s.Topics {
		if err := s.Topics[i].Validate(); err != nil {
			return err
		}
		if i > 0 && s.Topics[i-1].Name >= s.Topics[i].Name {
			return fmt.Errorf("%w: topics not sorted by name or duplicated at %s", ErrInvalid, s.Topics[i].Name)
		}
	}
	for i := range s.Segments {
		if err := s.Segments[i].Validate(); err != nil {
			return err
		}
		if i > 0 && s.Segments[i-1].ID >= s.Segments[i].ID {
			return fmt.Errorf("%w: segments not sorted by id or duplicated at %s", ErrInvalid, s.Segments[i].ID)
		}
	}
	return nil
}

// MarshalJSON writes the String form as a JSON string.
func (c Checksum) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

// UnmarshalJSON reads the String form from a JSON string.
func (c *Checksum) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: checksum: %v", ErrInvalid, err)
	}
	return c.UnmarshalText([]byte(s))
}
