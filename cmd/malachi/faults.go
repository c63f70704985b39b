package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
)

// A diskFault is what an injector did to one copy's file, for the report.
type diskFault struct {
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

var errEmptyCopy = errors.New("malachi: copy file is empty")

// deleteCopyFile removes the copy's file, as a lost file or an operator's
// mistake would.
func deleteCopyFile(path string) (diskFault, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return diskFault{}, fmt.Errorf("delete fault: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return diskFault{}, fmt.Errorf("delete fault: %w", err)
	}
	return diskFault{Kind: "delete", Path: path, SizeBefore: fi.Size(), SizeAfter: -1}, nil
}

// truncateCopyFile cuts the file at a random byte in [0, size), so that the
// copy ends short of its sealed size, possibly inside a frame.
func truncateCopyFile(path string, rng *rand.Rand) (diskFault, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return diskFault{}, fmt.Errorf("truncate fault: %w", err)
	}
	if fi.Size() == 0 {
		return diskFault{}, fmt.Errorf("truncate fault: %s: %w", path, errEmptyCopy)
	}
	at := rng.Int64N(fi.Size())
	if err := os.Truncate(path, at); err != nil {
		return diskFault{}, fmt.Errorf("truncate fault: %w", err)
	}
	return diskFault{Kind: "truncate", Path: path, SizeBefore: fi.Size(), SizeAfter: at, Offset: at}, nil
}

// extendCopyFile appends n random bytes past the end of the file: a copy
// that runs past its sealed size, like a preallocated tail or a record the
// seal excludes.
func extendCopyFile(path string, n int64, rng *rand.Rand) (diskFault, error) {
	if n <= 0 {
		return diskFault{}, fmt.Errorf("extend fault: %s: want a positive byte count, got %d", path, n)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return diskFault{}, fmt.Errorf("extend fault: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return diskFault{}, fmt.Errorf("extend fault: %w", err)
	}
	junk := make([]byte, n)
	for i := range junk {
		junk[i] = byte(rng.UintN(256))
	}
	if _, err := f.WriteAt(junk, fi.Size()); err != nil {
		return diskFault{}, fmt.Errorf("extend fault: %w", err)
	}
	if err := f.Sync(); err != nil {
		return diskFault{}, fmt.Errorf("extend fault: %w", err)
	}
	return diskFault{Kind: "extend", Path: path, SizeBefore: fi.Size(), SizeAfter: fi.Size() + n, Offset: fi.Size()}, nil
}

// bitflipCopyFile flips one random bit of one random byte in [0, limit) of
// the file, in place: the size does not change, so only a checksum can
// tell. limit <= 0 or past the end means the whole file.
func bitflipCopyFile(path string, limit int64, rng *rand.Rand) (diskFault, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return diskFault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return diskFault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	if fi.Size() == 0 {
		return diskFault{}, fmt.Errorf("bitflip fault: %s: %w", path, errEmptyCopy)
	}
	if limit <= 0 || limit > fi.Size() {
		limit = fi.Size()
	}
	at := rng.Int64N(limit)
	bit := uint8(rng.UintN(8))
	var b [1]byte
	if _, err := f.ReadAt(b[:], at); err != nil && !errors.Is(err, io.EOF) {
		return diskFault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b[:], at); err != nil {
		return diskFault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	if err := f.Sync(); err != nil {
		return diskFault{}, fmt.Errorf("bitflip fault: %w", err)
	}
	return diskFault{Kind: "bitflip", Path: path, SizeBefore: fi.Size(), SizeAfter: fi.Size(), Offset: at, Bit: bit}, nil
}

// flipBitAt flips bit of the byte at offset in place (bitflipCopyFile's
// inverse, given its diskFault).
func flipBitAt(path string, offset int64, bit uint8) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], offset); err != nil {
		return err
	}
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b[:], offset); err != nil {
		return err
	}
	return f.Sync()
}
