package heal

import (
	"fmt"
	"math/bits"
	"time"
	"unicode/utf8"

	"github.com/malachi-log/malachi/meta"
)

// Kind classifies what is wrong with one sealed copy. It is heal's own
// vocabulary (Classify derives it from a broker's Fact); it is not sent by
// brokers. The zero value means "nothing": the copy is intact.
type Kind uint8

const (
	// KindUnknown is the zero value: an intact copy, no anomaly.
	KindUnknown Kind = iota
	// Missing: the metadata assigns the copy to the broker but it has no
	// file for it (a deleted file, a swapped disk).
	Missing
	// Short: the copy's stored bytes do not run past the sealed ByteSize
	// (a copy of exactly ByteSize lacks its footer); Anomaly.Size is the
	// stored size. It is backfilled resuming at its durable end.
	Short
	// Overrun: the copy's stored bytes run past the sealed ByteSize (a
	// correctly sealed copy carries its footer, so it always measures
	// above until confirmed) and the broker holds no confirmation of this
	// exact file; Anomaly.Size is the stored size.
	Overrun
	// Latched: the broker's storage latched the copy as failed; it refuses
	// every request until the broker restarts.
	Latched
	// TimedOut: the copy's probe did not finish before the deadline, or
	// its stat failed; its state is unknown this tick.
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

// String returns the name of k ("missing", "short", ...).
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText implements encoding.TextMarshaler with the String form.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses the String form; a name this build does not know
// reads as the zero Kind ("unknown"), which a pass refuses (Input
// validation names it), so that one unknown anomaly does not make a
// whole probe report unreadable.
func (k *Kind) UnmarshalText(b []byte) error {
	*k = Kind(lenientName(kindNames[:], b, true, 0))
	return nil
}

// lenientName is the index of b in names (index 0 not matched when
// skipZero), or unknown: the enums of reports decode whatever a newer
// broker sends.
func lenientName(names []string, b []byte, skipZero bool, unknown uint8) uint8 {
	for i, n := range names {
		if n == string(b) && (i != 0 || !skipZero) {
			return uint8(i)
		}
	}
	return unknown
}

// FactFlags are what a broker observed of a copy besides its size and
// identity, one bit each; the wire form is one integer.
type FactFlags uint8

const (
	// FactMissing: the broker has no file for the copy.
	FactMissing FactFlags = 1 << iota
	// FactTimedOut: the copy's stat did not finish before the deadline.
	FactTimedOut
	// FactStatFailed: the stat failed (Fact.Why says how); the copy's
	// state is unknown this tick, as if it had timed out.
	FactStatFailed
	// FactLatched: the broker's storage latched the copy (Fact.Why is the
	// latch error); it was not stat'ed.
	FactLatched
	// FactConfirmed: the broker's store holds a confirmation of exactly
	// this file identity (Dev, Ino, Size).
	FactConfirmed
	// FactCorrupt: the broker's scrubber found a checksum mismatch in
	// exactly this file (Dev, Ino, Size).
	FactCorrupt

	factKnown = FactMissing | FactTimedOut | FactStatFailed | FactLatched | FactConfirmed | FactCorrupt
	// factNoStat are the flags of a copy that has no stat result: at most
	// one of them, and none with a stat result (size, identity,
	// confirmation, scrub verdict).
	factNoStat = FactMissing | FactTimedOut | FactStatFailed | FactLatched
)

// MaxWhy is the longest Fact.Why a valid report carries; ProbeReport.Add
// cuts a longer one.
const MaxWhy = 200

// Fact is what a broker observed of one of its sealed copies: facts, not a
// verdict. Classify (and Intact) decide what they mean.
type Fact struct {
	Segment meta.SegmentID `json:"s"`
	Flags   FactFlags      `json:"f,omitempty"`
	// Size is the stored size from the stat (zero when not stat'ed).
	Size int64 `json:"n,omitempty"`
	// Dev and Ino are the file's identity (zero when not stat'ed).
	Dev uint64 `json:"d,omitempty"`
	Ino uint64 `json:"i,omitempty"`
	// Why is the latch or stat error, short (at most MaxWhy bytes); empty
	// otherwise.
	Why string `json:"w,omitempty"`
}

// Anomaly is heal's verdict on one copy: its Kind and, for Short and
// Overrun, its stored Size.
type Anomaly struct {
	Segment meta.SegmentID `json:"segment"`
	Kind    Kind           `json:"kind"`
	Size    int64          `json:"size,omitempty"`
}

// Classify decides what f, observed of a copy of the sealed segment seg,
// means. The checks run in this order, the first that holds deciding:
// latched; timed out; missing; stat failed (TimedOut: the copy's state is
// unknown); corrupt; size at most seg.ByteSize (Short: the frames end at or
// before byte_size, and a copy of exactly byte_size lacks its footer, which
// the backfill resumes); size above seg.ByteSize (Overrun, unless
// confirmed: then intact, KindUnknown).
//
// Why "confirmed" needs no footer size here: a broker confirms a copy only
// once it measures exactly ByteSize plus the store's footer (the plugin's
// confirm handler refuses anything else), the confirmation records that
// file identity (dev, ino, size), and a sealed segment's ByteSize never
// changes (meta invariant 4). So FactConfirmed — the confirmation equals
// the stat's (dev, ino, size) — implies size == ByteSize+footer, which is
// what the broker used to check before looking the confirmation up.
func Classify(seg *meta.Segment, f *Fact) Anomaly {
	a := Anomaly{Segment: f.Segment}
	switch fl := f.Flags; {
	case fl&FactLatched != 0:
		a.Kind = Latched
	case fl&FactTimedOut != 0:
		a.Kind = TimedOut
	case fl&FactMissing != 0:
		a.Kind = Missing
	case fl&FactStatFailed != 0:
		a.Kind = TimedOut
	case fl&FactCorrupt != 0:
		a.Kind = Corrupt
	case f.Size <= seg.ByteSize:
		a.Kind, a.Size = Short, f.Size
	case fl&FactConfirmed == 0:
		a.Kind, a.Size = Overrun, f.Size
	}
	return a
}

// Intact reports whether a broker may leave f out of its report: the copy
// was stat'ed, is neither latched nor corrupt, measures above seg.ByteSize
// and is confirmed (Classify says KindUnknown).
func Intact(seg *meta.Segment, f *Fact) bool {
	return f.Flags&(factNoStat|FactCorrupt|FactConfirmed) == FactConfirmed && f.Size > seg.ByteSize
}

// Validate checks f on its own: a valid segment id, known flags that do
// not contradict each other, a size not negative, a short Why.
func (f *Fact) Validate() error {
	if err := f.Segment.Validate(); err != nil {
		return err
	}
	if u := f.Flags &^ factKnown; u != 0 {
		return fmt.Errorf("fact on %s: flags %d: kind %d is unknown (bits %#x are not fact flags)", f.Segment, f.Flags, f.Flags, uint8(u))
	}
	if f.Size < 0 {
		return fmt.Errorf("fact on %s: size %d is negative", f.Segment, f.Size)
	}
	if len(f.Why) > MaxWhy {
		return fmt.Errorf("fact on %s: why is %d bytes, at most %d", f.Segment, len(f.Why), MaxWhy)
	}
	if ns := f.Flags & factNoStat; ns != 0 {
		if bits.OnesCount8(uint8(ns)) > 1 {
			return fmt.Errorf("fact on %s: flags %#x contradict: at most one of missing, timed out, stat failed, latched", f.Segment, uint8(f.Flags))
		}
		if f.Flags&(FactConfirmed|FactCorrupt) != 0 || f.Size != 0 || f.Dev != 0 || f.Ino != 0 {
			return fmt.Errorf("fact on %s: flags %#x contradict: a copy not stat'ed carries a stat result (size %d, dev %d, ino %d, confirmed or corrupt)",
				f.Segment, uint8(f.Flags), f.Size, f.Dev, f.Ino)
		}
	}
	return nil
}

// ProbeReport is one broker's answer to pass.Prober.Probe for one tick. It
// carries facts and counts only: a copy that is not listed is Intact.
// Network cost therefore grows with what is wrong, not with what is stored.
type ProbeReport struct {
	Broker meta.BrokerID `json:"broker"`
	// At is when the executor received the report (zero: at the
	// pass's Now): the broker's last-seen time. Not on the wire.
	At time.Time `json:"-"`
	// Index is the metadata index whose assignment the broker probed;
	// at least the snapshotIndex it was asked for.
	Index uint64 `json:"index"`
	// Copies is the number of sealed copies probed.
	Copies int `json:"copies"`
	// Facts lists the copies that are not Intact (a broker builds it with
	// Add), one per segment, in any order. The planner sorts its own copy;
	// of two facts for one copy it keeps the one whose Kind is the more
	// severe: latched, corrupt, timed out, missing, short, overrun. Facts
	// for segments the snapshot does not assign to the broker are ignored;
	// an Intact fact that is listed anyway counts as an anomaly that
	// changes nothing.
	Facts []Fact `json:"facts,omitempty"`
	// Leftovers are the copies the broker's store holds outside their
	// segment's replica set at Index (see Leftover), in any order; never
	// counted in Copies.
	Leftovers []Leftover `json:"leftovers,omitempty"`
}

// Add appends f, observed of the broker's copy of seg, unless it is Intact
// (then it allocates nothing). A Why longer than MaxWhy is cut.
func (r *ProbeReport) Add(seg *meta.Segment, f Fact) {
	if Intact(seg, &f) {
		return
	}
	f.Segment = seg.ID
	if len(f.Why) > MaxWhy {
		n := MaxWhy
		for n > 0 && !utf8.RuneStart(f.Why[n]) {
			n-- // cut at a rune boundary: JSON would widen a broken rune
		}
		f.Why = f.Why[:n]
	}
	r.Facts = append(r.Facts, f)
}

// Validate checks the report on its own: a broker id, copies not negative,
// each fact valid (Fact.Validate). It returns an error wrapping ErrInvalid.
// It is meant to run once, where the report crosses the network.
func (r *ProbeReport) Validate() error {
	if r.Broker == 0 {
		return fmt.Errorf("%w: probe report: broker id 0", ErrInvalid)
	}
	if r.Copies < 0 {
		return fmt.Errorf("%w: probe report from broker %d: copies %d is negative", ErrInvalid, r.Broker, r.Copies)
	}
	for i := range r.Facts {
		if err := r.Facts[i].Validate(); err != nil {
			return fmt.Errorf("%w: probe report from broker %d: fact %d: %w", ErrInvalid, r.Broker, i, err)
		}
	}
	for i := range r.Leftovers {
		if err := r.Leftovers[i].Validate(); err != nil {
			return fmt.Errorf("%w: probe report from broker %d: leftover %d: %w", ErrInvalid, r.Broker, i, err)
		}
	}
	return nil
}
