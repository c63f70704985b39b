package harness

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
)

// A Fault is what an injector did to one copy's file, for a report.
type Fault struct {
	Kind string `json:"kind"` // "delete", "truncate", "extend", "bitflip"
	Path string `json:"path"`
	// SizeBefore and SizeAfter are the file's sizes around the fault; a
	// deleted file has SizeAfter -1.
	SizeBefore int64 `json:"size_before"`
	SizeAfter  int64 `json:"size_after"`
	// Offset is where the file was cut (truncate), where the new bytes
	// start (extend) or the byte whose bit was flipped (bitflip).
	Offset int64 `json:"offset"`
	// Bit is the flipped bit (0-7), bitflip only.
	Bit uint8 `json:"bit,omitempty"`
}

// ErrEmptyCopy: a fault that needs a byte of the file found none.
var ErrEmptyCopy = errors.New("harness: copy file is empty")

// DeleteCopy removes the copy's file, as a lost file or an operator's
// mistake would.
func DeleteCopy(path string) (Fault, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Fault{}, fmt.Errorf("delete fault: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return Fault{}, fmt.Errorf("delete fault: %w", err)
	}
	return Fault{Kind: "delete", Path: path, SizeBefore: fi.Size(), SizeAfter: -1}, nil
}

// TruncateCopy cuts the file at a random byte in [0, size), so that the
// copy ends short of its sealed size, possibly inside a frame.
func TruncateCopy(path string, rng *rand.Rand) (Fault, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Fault{}, fmt.Errorf("truncate fault: %w", err)
	}
	if fi.Size() == 0 {
		return Fault{}, fmt.Errorf("truncate fault: %s: %w", path, ErrEmptyCopy)
	}
	return TruncateCopyAt(path, rng.Int64N(fi.Size()))
}

// TruncateCopyAt cuts the file at byte at, which must be inside it.
func TruncateCopyAt(path string, at int64) (Fault, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Fault{}, fmt.Errorf("truncate fault: %w", err)
	}
	if at < 0 || at >= fi.Size() {
		return Fault{}, fmt.Errorf("truncate fault: %s: at %d: want a byte of the %d-byte file", path, at, fi.Size())
	}
	if err := os.Truncate(path, at); err != nil {
		return Fault{}, fmt.Errorf("truncate fault: %w", err)
	}
	return Fault{Kind: "truncate", Path: path, SizeBefore: fi.Size(), SizeAfter: at, Offset: at}, nil
}

// ExtendCopy appends n random bytes past the end of the file: a copy
// that runs past its sealed size, like a preallocated tail or a record the
// seal excludes.
func ExtendCopy(path string, n int64, rng *rand.Rand) (Fault, error) {
	if n <= 0 {
		return Fault{}, fmt.Errorf("extend fault: %s: want a positive byte count, got %d", path, n)
	}
	junk := make([]byte, n)
	for i := range junk {
		junk[i] = byte(rng.UintN(256))
	}
	return ExtendCopyWith(path, junk)
}

// ExtendCopyWith appends junk (at least one byte) past the end of the
// file, synced.
func ExtendCopyWith(path string, junk []byte) (Fault, error) {
	if len(junk) == 0 {
		return Fault{}, fmt.Errorf("extend fault: %s: want a positive byte count, got 0", path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return Fault{}, fmt.Errorf("extend fault: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Fault{}, fmt.Errorf("extend fault: %w", err)
	}
	if _, err := f.WriteAt(junk, fi.Size()); err != nil {
		return Fault{}, fmt.Errorf("extend fault: %w", err)
	}
	if err := f.Sync(); err != nil {
		return Fault{}, fmt.Errorf("extend fault: %w", err)
	}
	n := int64(len(junk))
	return Fault{Kind: "extend", Path: path, SizeBefore: fi.Size(), SizeAfter: fi.Size() + n, Offset: fi.Size()}, nil
}

// BitflipCopy flips one random bit of one random byte in [0, limit) of
// the file, in place: the size does not change, so only a checksum can
// tell. limit <= 0 or past the end means the whole file.
func BitflipCopy(path string, limit int64, rng *rand.Rand) (Fault, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Fault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	if fi.Size() == 0 {
		return Fault{}, fmt.Errorf("bitflip fault: %s: %w", path, ErrEmptyCopy)
	}
	if limit <= 0 || limit > fi.Size() {
		limit = fi.Size()
	}
	at := rng.Int64N(limit)
	return FlipBit(path, at, uint8(rng.UintN(8)))
}

// FlipBit flips bit (0-7) of the byte at offset in place, synced; the
// same call again undoes it.
func FlipBit(path string, offset int64, bit uint8) (Fault, error) {
	if bit > 7 {
		return Fault{}, fmt.Errorf("bitflip fault: %s: bit %d: want 0-7", path, bit)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return Fault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Fault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	if offset < 0 || offset >= fi.Size() {
		return Fault{}, fmt.Errorf("bitflip fault: %s: offset %d: want a byte of the %d-byte file", path, offset, fi.Size())
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], offset); err != nil && !errors.Is(err, io.EOF) {
		return Fault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b[:], offset); err != nil {
		return Fault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	if err := f.Sync(); err != nil {
		return Fault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	return Fault{Kind: "bitflip", Path: path, SizeBefore: fi.Size(), SizeAfter: fi.Size(), Offset: offset, Bit: bit}, nil
}

// RepeatFault does to the copy file at path exactly what first did to
// another (deleted; the same bit of the same byte flipped; cut at the same
// byte). Copies are byte-identical, so every copy then lacks the same
// bytes and no two of them make an intact copy together.
func RepeatFault(first Fault, path string) (Fault, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Fault{}, fmt.Errorf("%s fault: %w", first.Kind, err)
	}
	switch first.Kind {
	case "delete":
		return DeleteCopy(path)
	case "bitflip":
		return FlipBit(path, first.Offset, first.Bit)
	case "truncate":
		if err := os.Truncate(path, first.Offset); err != nil {
			return Fault{}, fmt.Errorf("truncate fault: %w", err)
		}
		return Fault{Kind: "truncate", Path: path, SizeBefore: fi.Size(), SizeAfter: first.Offset, Offset: first.Offset}, nil
	}
	return Fault{}, fmt.Errorf("harness: %s: cannot repeat a %q fault", path, first.Kind)
}
