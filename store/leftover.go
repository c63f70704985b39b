package store

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/malachi-log/malachi/meta"
)

// CopiesVersion changes whenever the store gains or loses a copy (Create,
// OpenTarget creating one, Delete, a copy found gone). A caller that keeps
// a list derived from List recomputes it only when this changed.
func (db *DB) CopiesVersion() uint64 { return db.copiesVersion.Load() }

// Tail describes a copy without loading it: its stored size and whether
// a valid seal footer ends it (the footer's own CRC matches and its
// byte_size plus FooterSize is the file's size). It reads at most
// FooterSize bytes, takes no lock of the copy (a copy being written may
// be seen mid-write) and latches nothing: it is for copies the caller
// must not load (leftovers the probe reports, a broker's list of its
// copies).
type Tail struct {
	Size   int64
	Footer bool
}

// Tail returns the Tail of the copy of id; a copy the store does not hold
// (or whose file is gone) is ErrUnknownCopy.
func (db *DB) Tail(id meta.SegmentID) (Tail, error) {
	if err := id.Validate(); err != nil {
		return Tail{}, fmt.Errorf("%w: tail: %w", ErrInvalid, err)
	}
	if db.closed.Load() {
		return Tail{}, fmt.Errorf("%w: tail %s", ErrClosed, id)
	}
	c := db.copyOf(id)
	if c == nil {
		return Tail{}, fmt.Errorf("%w: tail %s", ErrUnknownCopy, id)
	}
	f, err := db.fs.OpenFile(c.path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return Tail{}, fmt.Errorf("%w: tail %s: %w", ErrUnknownCopy, id, err)
	}
	if err != nil {
		return Tail{}, fmt.Errorf("store: tail %s: %w", id, err)
	}
	defer f.Close()
	fi, err := db.fs.Stat(c.path)
	if err != nil {
		return Tail{}, fmt.Errorf("store: tail %s: %w", id, err)
	}
	t := Tail{Size: fi.Size()}
	if t.Size < FooterSize {
		return t, nil
	}
	var b [FooterSize]byte
	if _, err := f.ReadAt(b[:], t.Size-FooterSize); err != nil && !errors.Is(err, io.EOF) {
		return t, fmt.Errorf("store: tail %s: reading the last %d bytes: %w", id, FooterSize, err)
	}
	ft, ok := DecodeFooter(b[:])
	t.Footer = ok && ft.ByteSize+FooterSize == t.Size
	return t, nil
}
