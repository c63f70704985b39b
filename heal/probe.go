package heal

import (
	"fmt"

	"github.com/malachi-log/malachi/meta"
)

// Kind classifies what a broker found wrong with one of its sealed copies.
// The zero value is reserved and never sent.
type Kind uint8

const (
	// KindUnknown is the reserved zero value; the planner ignores it.
	KindUnknown Kind = iota
	// Missing: the metadata assigns the copy to the broker but it has no
	// file for it (a deleted file, a swapped disk).
	Missing
	// Short: the copy's stored bytes fall short of the sealed ByteSize;
	// Anomaly.Size is the stored size. It is backfilled resuming at its
	// durable end.
	Short
	// Overrun: the copy's stored bytes run past the sealed ByteSize (a
	// correctly sealed copy carries its footer, so it always measures
	// above until confirmed); Anomaly.Size is the stored size and
	// Anomaly.Confirmed says the broker has already confirmed this exact
	// file, in which case the planner never selects it again.
	Overrun
	// Latched: the broker's storage latched the copy as failed; it refuses
	// every request until the broker restarts.
	Latched
	// TimedOut: the copy's probe did not finish before the deadline; its
	// state is unknown this tick.
	TimedOut
	// Corrupt: the broker's scrubber found a checksum mismatch in the
	// copy although its byte size is intact (in-place corruption the size
	// probe cannot see). The copy is lost: never a backfill source,
	// replaced from an intact replica (ReplaceCorruptCopy) and deleted
	// only once the set leaving it out is recorded; with no spare broker
	// it stays in the set behind the healthy replicas.
	Corrupt
)

var kindNames = [...]string{"unknown", "missing", "short", "overrun", "latched", "timed_out", "corrupt"}

// String returns the wire name of k ("missing", "short", ...).
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText implements encoding.TextMarshaler with the String form.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses the String form.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if n == string(b) && i != 0 {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("%w: anomaly kind %q: want one of missing, short, overrun, latched, timed_out, corrupt", ErrInvalid, string(b))
}

// Anomaly is one copy that is not simply intact.
type Anomaly struct {
	Segment meta.SegmentID `json:"segment"`
	Kind    Kind           `json:"kind"`
	// Size is the stored size in bytes for Short and Overrun; zero
	// otherwise.
	Size int64 `json:"size,omitempty"`
	// Confirmed is set on an Overrun copy the broker has already
	// confirmed (same file identity and sealed size).
	Confirmed bool `json:"confirmed,omitempty"`
}

// ProbeReport is one broker's answer to Prober.Probe for one tick. It
// carries anomalies and counts only: a copy that is not listed is intact
// (present, exactly its sealed size or confirmed, not latched, not found
// corrupt by the broker's scrubber). Network cost
// therefore grows with what is wrong, not with what is stored.
type ProbeReport struct {
	Broker meta.BrokerID `json:"broker"`
	// Index is the metadata index whose assignment the broker probed;
	// at least the snapshotIndex it was asked for.
	Index uint64 `json:"index"`
	// Copies is the number of sealed copies probed.
	Copies int `json:"copies"`
	// Anomalies lists the copies that are not intact, one per segment, in
	// any order (the planner sorts its own copy; of two anomalies for one
	// segment it keeps the more severe: latched, corrupt, timed out,
	// missing, short, overrun). Anomalies for segments the snapshot does not assign
	// to the broker are ignored.
	Anomalies []Anomaly `json:"anomalies,omitempty"`
	// LatchUnknown says the broker could not read its latch state this
	// tick: no copy of it is then confirmed, and it is not a source.
	LatchUnknown bool `json:"latch_unknown,omitempty"`
}

// Validate checks the report on its own: a broker id, known kinds, valid
// segment ids, sizes not negative. It returns an error wrapping ErrInvalid.
func (r *ProbeReport) Validate() error {
	if r.Broker == 0 {
		return fmt.Errorf("%w: probe report: broker id 0", ErrInvalid)
	}
	if r.Copies < 0 {
		return fmt.Errorf("%w: probe report from broker %d: copies %d is negative", ErrInvalid, r.Broker, r.Copies)
	}
	for i, a := range r.Anomalies {
		if a.Kind == KindUnknown || a.Kind > Corrupt {
			return fmt.Errorf("%w: probe report from broker %d: anomaly %d on %s: kind %d is unknown", ErrInvalid, r.Broker, i, a.Segment, a.Kind)
		}
		if a.Size < 0 {
			return fmt.Errorf("%w: probe report from broker %d: anomaly on %s: size %d is negative", ErrInvalid, r.Broker, a.Segment, a.Size)
		}
		if err := a.Segment.Validate(); err != nil {
			return fmt.Errorf("%w: probe report from broker %d: %w", ErrInvalid, r.Broker, err)
		}
	}
	return nil
}
