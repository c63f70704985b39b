package meta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Command is a change to the metadata, applied by the control plane in log
// order. Every implementation is a value type listed in this file; Apply on
// an unknown type is a programming error.
type Command interface {
	// Op is the command's wire name, e.g. "set_segment_replicas".
	Op() string
	// Validate checks the command on its own, before it is proposed.
	Validate() error
}

// RegisterBroker adds a broker or updates its addresses and rack; the
// mode of a registered broker is kept (only SetBrokerMode changes it).
type RegisterBroker struct {
	Broker Broker `json:"broker"`
}

// CreateSegment adds a new, active segment with its initial replica set.
type CreateSegment struct {
	Segment Segment `json:"segment"`
}

// SealSegment fixes a segment's length, byte size and checksum.
type SealSegment struct {
	ID       SegmentID `json:"id"`
	Length   uint64    `json:"length"`
	ByteSize int64     `json:"byte_size"`
	Checksum Checksum  `json:"checksum"`
}

// SetSegmentReplicas replaces a segment's replica set, provided the current
// set is still Expected (compare-and-set).
type SetSegmentReplicas struct {
	ID       SegmentID  `json:"id"`
	Expected []BrokerID `json:"expected"`
	Replicas []BrokerID `json:"replicas"`
}

// SetReplicationFactor changes the cluster's replication factor.
type SetReplicationFactor struct {
	Factor int `json:"factor"`
}

// Op implements Command.
func (RegisterBroker) Op() string { return "register_broker" }

// Op implements Command.
func (CreateSegment) Op() string { return "create_segment" }

// Op implements Command.
func (SealSegment) Op() string { return "seal_segment" }

// Op implements Command.
func (SetSegmentReplicas) Op() string { return "set_segment_replicas" }

// Op implements Command.
func (SetReplicationFactor) Op() string { return "set_replication_factor" }

// Validate implements Command.
func (c RegisterBroker) Validate() error { return c.Broker.Validate() }

// Validate implements Command.
func (c CreateSegment) Validate() error {
	if c.Segment.Sealed {
		return fmt.Errorf("%w: create_segment %s: a segment is created active, then sealed", ErrInvalid, c.Segment.ID)
	}
	if len(c.Segment.Replicas) == 0 {
		return fmt.Errorf("%w: create_segment %s: empty replica set", ErrInvalid, c.Segment.ID)
	}
	return c.Segment.Validate()
}

// Validate implements Command.
func (c SealSegment) Validate() error {
	if err := c.ID.Validate(); err != nil {
		return err
	}
	if c.ByteSize < 0 {
		return fmt.Errorf("%w: seal_segment %s: byte_size %d is negative", ErrInvalid, c.ID, c.ByteSize)
	}
	if !c.Checksum.IsSet() {
		return fmt.Errorf("%w: seal_segment %s: no checksum", ErrInvalid, c.ID)
	}
	return nil
}

// Validate implements Command.
func (c SetSegmentReplicas) Validate() error {
	if err := c.ID.Validate(); err != nil {
		return err
	}
	if len(c.Replicas) == 0 {
		return fmt.Errorf("%w: set_segment_replicas %s: empty replica set", ErrInvalid, c.ID)
	}
	if err := ValidateReplicas(c.Replicas); err != nil {
		return fmt.Errorf("set_segment_replicas %s: replicas: %w", c.ID, err)
	}
	if err := ValidateReplicas(c.Expected); err != nil {
		return fmt.Errorf("set_segment_replicas %s: expected: %w", c.ID, err)
	}
	return nil
}

// Validate implements Command.
func (c SetReplicationFactor) Validate() error {
	if c.Factor < 1 {
		return fmt.Errorf("%w: set_replication_factor %d: want at least 1", ErrInvalid, c.Factor)
	}
	return nil
}

// ApplyTo applies c to seg, the current metadata of c's segment, and returns
// the new value. It checks the compare-and-set and bumps the version; it
// never modifies seg.
func (c SetSegmentReplicas) ApplyTo(seg Segment) (Segment, error) {
	if !SameReplicas(seg.Replicas, c.Expected) {
		return seg, fmt.Errorf("%w: segment %s: expected %v, current %v (version %d)", ErrStaleReplicas, c.ID, c.Expected, seg.Replicas, seg.Version)
	}
	seg.Replicas = append([]BrokerID(nil), c.Replicas...)
	seg.Version++
	return seg, nil
}

// ApplyTo applies c to seg, the current metadata of c's segment. Sealing a
// sealed segment again with the same values changes nothing; with other
// values it is refused with an error wrapping ErrSealed that names each
// field, its sealed value and the value c asked for (invariant 4).
func (c SealSegment) ApplyTo(seg Segment) (Segment, error) {
	next := seg
	next.Length, next.ByteSize, next.Checksum, next.Sealed = c.Length, c.ByteSize, c.Checksum, true
	if seg.Sealed {
		if err := SealedChange(c.Op(), seg, next); err != nil {
			return seg, err
		}
		return seg, nil // idempotent
	}
	next.Version++
	return next, next.Validate()
}

// SealedChange returns nil unless prev is sealed and next changes what
// sealing fixed (invariant 4): its start_offset, length, byte_size or
// checksum, or its sealed flag. The error wraps ErrSealed and names op, the
// segment and every such field with its old and new value.
func SealedChange(op string, prev, next Segment) error {
	if !prev.Sealed {
		return nil
	}
	var diffs []string
	if prev.StartOffset != next.StartOffset {
		diffs = append(diffs, fmt.Sprintf("start_offset %d -> %d", prev.StartOffset, next.StartOffset))
	}
	if prev.Length != next.Length {
		diffs = append(diffs, fmt.Sprintf("length %d -> %d", prev.Length, next.Length))
	}
	if prev.ByteSize != next.ByteSize {
		diffs = append(diffs, fmt.Sprintf("byte_size %d -> %d", prev.ByteSize, next.ByteSize))
	}
	if prev.Checksum != next.Checksum {
		diffs = append(diffs, fmt.Sprintf("checksum %v -> %v", prev.Checksum, next.Checksum))
	}
	if !next.Sealed {
		diffs = append(diffs, "sealed true -> false")
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s %s: a sealed segment never changes: %s", ErrSealed, op, prev.ID, strings.Join(diffs, ", "))
}

// envelope is the wire form of a Command: {"op": ..., "args": {...}}.
type envelope struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
}

// EncodeCommand returns the wire form of c.
func EncodeCommand(c Command) ([]byte, error) {
	args, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("meta: encode %s: %w", c.Op(), err)
	}
	return json.Marshal(envelope{Op: c.Op(), Args: args})
}

// DecodeCommand parses the wire form written by EncodeCommand and validates
// the command. Unknown ops and unknown fields are errors.
func DecodeCommand(b []byte) (Command, error) {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("%w: command: %v", ErrInvalid, err)
	}
	var c Command
	var err error
	switch env.Op {
	case RegisterBroker{}.Op():
		c, err = decodeArgs[RegisterBroker](env.Args)
	case CreateSegment{}.Op():
		c, err = decodeArgs[CreateSegment](env.Args)
	case SealSegment{}.Op():
		c, err = decodeArgs[SealSegment](env.Args)
	case SetSegmentReplicas{}.Op():
		c, err = decodeArgs[SetSegmentReplicas](env.Args)
	case SetReplicationFactor{}.Op():
		c, err = decodeArgs[SetReplicationFactor](env.Args)
	case SetBrokerMode{}.Op():
		c, err = decodeArgs[SetBrokerMode](env.Args)
	case CreateTopic{}.Op():
		c, err = decodeArgs[CreateTopic](env.Args)
	case AllocateProducerIDs{}.Op():
		c, err = decodeArgs[AllocateProducerIDs](env.Args)
	case CommitOffsets{}.Op():
		c, err = decodeArgs[CommitOffsets](env.Args)
	case DeleteGroupOffsets{}.Op():
		c, err = decodeArgs[DeleteGroupOffsets](env.Args)
	default:
		return nil, fmt.Errorf("%w: command op %q is unknown", ErrInvalid, env.Op)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: command %s: %v", ErrInvalid, env.Op, err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func decodeArgs[T Command](raw json.RawMessage) (T, error) {
	var v T
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(&v)
	return v, err
}
