package store

import (
	"errors"
	"fmt"

	"github.com/malachi-log/malachi/meta"
)

// Errors returned by the store. Match them with errors.Is; the returned
// errors wrap them with the segment, the operation and the byte position.
var (
	// ErrUnknownCopy: the store holds no copy of the segment (or its file
	// is gone).
	ErrUnknownCopy = errors.New("store: unknown copy")
	// ErrExists: Create of a copy that already exists.
	ErrExists = errors.New("store: copy exists")
	// ErrLatched: the copy failed in storage earlier in this process and
	// refuses every request until a restart (a new Open).
	ErrLatched = errors.New("store: copy latched")
	// ErrNotSealed: the copy carries no valid seal footer.
	ErrNotSealed = errors.New("store: copy not sealed")
	// ErrSealed: the copy is sealed and fenced; it refuses appends.
	ErrSealed = errors.New("store: copy sealed")
	// ErrShort: the copy's frames end before the segment's byte_size
	// (errors.As to *ShortError for where).
	ErrShort = errors.New("store: copy short")
	// ErrCorrupt: a frame or the footer is damaged or disagrees with the
	// segment (errors.As to *CorruptError for where).
	ErrCorrupt = errors.New("store: copy corrupt")
	// ErrClosed: the DB was closed.
	ErrClosed = errors.New("store: closed")
	// ErrBusy: the copy is held by a catch-up target until Commit or Abort.
	ErrBusy = errors.New("store: copy busy")
	// ErrConfirmState: the confirmation DB (Pebble) reported a fatal error
	// (a failed MANIFEST or WAL write); confirmations are unavailable until
	// a restart. The copies are not affected.
	ErrConfirmState = errors.New("store: confirmation state failed")
	// ErrInUse: Open of a directory another open DB owns (flock on LOCK).
	ErrInUse = errors.New("store: directory in use")
	// ErrFormat: Open of a store whose FORMAT file records a format this
	// build does not know (newer than FormatVersion) or cannot read; the
	// store was not changed.
	ErrFormat = errors.New("store: unsupported store format")
	// ErrInvalid: a request with bad arguments; nothing was changed.
	ErrInvalid = errors.New("store: invalid request")
	// ErrSealConflict: the copy carries its own valid seal footer (agreeing
	// with its frames and their checksum) and the segment metadata the
	// caller passed disagrees with it (start offset, length, byte_size or
	// checksum). The store refused to cut, reseal or overwrite the copy and
	// changed nothing (errors.As to *SealConflictError for both sides).
	ErrSealConflict = errors.New("store: seal conflict")
	// ErrNotNext: AppendAt of a frame at an offset that is not the copy's
	// next; nothing was written.
	ErrNotNext = errors.New("store: not the copy's next frame")

	// Reasons a durable-end scan stops before the end of the file; they
	// are wrapped by a *CorruptError in End.Cause. ErrTorn and ErrZeroTail
	// are what a crash or a preallocated tail leave and do not wrap
	// ErrCorrupt.

	// ErrTorn: the last frame runs past the end of the file.
	ErrTorn = errors.New("store: torn frame")
	// ErrZeroTail: zero bytes where a frame header would be (preallocation).
	ErrZeroTail = errors.New("store: zero tail")
	// ErrPastFooter: bytes follow a valid seal footer.
	ErrPastFooter = errors.New("store: bytes past the seal footer")
)

// CorruptError says where a scan or a verification found a frame or a
// footer it could not accept. Err is ErrCorrupt, ErrTorn, ErrZeroTail or
// ErrPastFooter, and is what errors.Is sees.
type CorruptError struct {
	// Offset is the byte position in the copy's file.
	Offset int64
	// Reason says what was wrong, in words.
	Reason string
	// Err classifies the stop; nil means ErrCorrupt.
	Err error
}

func (e *CorruptError) kind() error {
	if e.Err == nil {
		return ErrCorrupt
	}
	return e.Err
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%v at byte %d: %s", e.kind(), e.Offset, e.Reason)
}

// Unwrap returns the classification (ErrCorrupt by default).
func (e *CorruptError) Unwrap() error { return e.kind() }

func corruptf(off int64, format string, args ...any) *CorruptError {
	return &CorruptError{Offset: off, Reason: fmt.Sprintf(format, args...), Err: ErrCorrupt}
}

// ShortError says that a copy's valid frames end before the segment's
// byte_size: the copy is short and must be backfilled from End.
type ShortError struct {
	// End is the durable end of the copy.
	End End
	// Want is the segment's byte_size.
	Want int64
}

func (e *ShortError) Error() string {
	s := fmt.Sprintf("%v: frames end at byte %d (next offset %d, %d frames), want byte_size %d",
		ErrShort, e.End.Bytes, e.End.NextOffset, e.End.Frames, e.Want)
	if e.End.Cause != nil {
		s += " (stopped by: " + e.End.Cause.Error() + ")"
	}
	return s
}

// Unwrap returns ErrShort.
func (e *ShortError) Unwrap() error { return ErrShort }

// latchError is the error a latched copy returns.
type latchError struct {
	id    string
	op    string
	cause error
}

func (e *latchError) Error() string {
	return fmt.Sprintf("%v: segment %s: %s failed: %v", ErrLatched, e.id, e.op, e.cause)
}

// Unwrap returns ErrLatched and the cause, so errors.Is finds both.
func (e *latchError) Unwrap() []error { return []error{ErrLatched, e.cause} }

// SealConflictError says that a copy's own valid seal footer disagrees with
// the segment metadata a request carried, and that the request changed
// nothing.
type SealConflictError struct {
	// Op is the refused request (settle, open target).
	Op      string
	Segment meta.SegmentID
	// Footer is what the copy's footer records.
	Footer Footer
	// Meta is the segment metadata of the request.
	Meta meta.Segment
}

func (e *SealConflictError) Error() string {
	f, m := e.Footer, e.Meta
	return fmt.Sprintf("%v: %s %s: the copy's seal footer records start_offset %d length %d byte_size %d checksum %v, "+
		"the segment metadata says start_offset %d length %d byte_size %d checksum %v; the copy is left as it is",
		ErrSealConflict, e.Op, e.Segment, f.StartOffset, f.Length, f.ByteSize, meta.CRC32C(f.FramesCRC),
		m.StartOffset, m.Length, m.ByteSize, m.Checksum)
}

// Unwrap returns ErrSealConflict.
func (e *SealConflictError) Unwrap() error { return ErrSealConflict }

// footerAgrees reports whether ft records exactly seg's seal.
func footerAgrees(ft Footer, seg meta.Segment) bool {
	want, _ := seg.Checksum.Value()
	return ft.StartOffset == seg.StartOffset && ft.Length == seg.Length && ft.ByteSize == seg.ByteSize && ft.FramesCRC == want
}
