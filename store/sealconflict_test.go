package store_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// ownSealedCopy writes a real sealed copy of n frames in a new store directory
// and returns the directory, the segment it was sealed as and its bytes.
func ownSealedCopy(t *testing.T, id meta.SegmentID, n int) (string, meta.Segment, []byte) {
	t.Helper()
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	fill(t, db, id, 0, n)
	seal, err := db.Seal(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	seg := segment(id, 0, n)
	if seal.ByteSize != seg.ByteSize || seal.Checksum != seg.Checksum || seal.Length != seg.Length {
		t.Fatalf("Seal = %+v, want the seal of %+v", seal, seg)
	}
	b, err := os.ReadFile(copyPath(dir, id))
	if err != nil {
		t.Fatal(err)
	}
	return dir, seg, b
}

// unchanged fails unless the copy's file holds exactly want.
func unchanged(t *testing.T, what, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(got) != len(want) || sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("%s changed the copy: %d bytes (sha256 %x), want %d bytes (sha256 %x)",
			what, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

// Invariant 8: metadata that disagrees with a copy's own valid seal footer
// (the attack: byte_size 0 on a sealed segment) makes Settle and
// OpenTarget refuse with ErrSealConflict, naming both sides, and the file
// stays byte for byte as it was, unlatched and usable.
func TestSealConflictLeavesCopyUntouched(t *testing.T) {
	const id = meta.SegmentID("sc")
	real := segment(id, 0, 12)
	prefix := segment(id, 0, 5) // frames [0, 5) of the copy, checksum and all
	for _, tc := range []struct {
		name string
		edit func(*meta.Segment)
	}{
		// What the injected snapshot said: an empty seal. A bounded scan
		// agrees with it (0 frames, CRC of nothing), so only the copy's own
		// footer stands between it and a cut to 40 bytes.
		{"byte_size 0 length 0", func(s *meta.Segment) { s.ByteSize, s.Length, s.Checksum = 0, 0, meta.CRC32C(0) }},
		{"byte_size 0", func(s *meta.Segment) { s.ByteSize = 0 }},
		{"other checksum", func(s *meta.Segment) { s.Checksum = meta.CRC32C(12345) }},
		{"shorter seal at a frame boundary", func(s *meta.Segment) { *s = prefix }},
		{"longer byte_size", func(s *meta.Segment) { s.ByteSize += 64 }},
		{"other start offset", func(s *meta.Segment) { s.StartOffset = 7 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, seg, want := ownSealedCopy(t, id, 12)
			bad := seg
			tc.edit(&bad)
			path := copyPath(dir, id)
			db := open(t, dir, store.Options{})

			_, err := db.Settle(id, bad)
			checkConflict(t, "Settle", err, seg, bad)
			unchanged(t, "Settle", path, want)

			tg, err := db.OpenTarget(id, bad)
			if err == nil {
				tg.Abort()
			}
			checkConflict(t, "OpenTarget", err, seg, bad)
			unchanged(t, "OpenTarget", path, want)

			// Nothing latched, nothing held: the copy serves the true seal.
			if err := db.LatchErr(id); err != nil {
				t.Fatalf("refusal latched the copy: %v", err)
			}
			if err := db.Verify(id, real); err != nil {
				t.Fatalf("Verify with the true seal after the refusals: %v", err)
			}
			if res, err := db.Settle(id, real); err != nil || res.BytesCut != 0 || res.FooterWritten {
				t.Fatalf("Settle with the true seal = %+v, %v", res, err)
			}
			unchanged(t, "Settle with the true seal", path, want)
		})
	}
}

func checkConflict(t *testing.T, op string, err error, own, bad meta.Segment) {
	t.Helper()
	var sc *store.SealConflictError
	if !errors.Is(err, store.ErrSealConflict) || !errors.As(err, &sc) {
		t.Fatalf("%s with metadata %+v: %v, want ErrSealConflict", op, bad, err)
	}
	want, _ := own.Checksum.Value()
	if sc.Segment != own.ID || sc.Footer.ByteSize != own.ByteSize || sc.Footer.Length != own.Length ||
		sc.Footer.FramesCRC != want || sc.Meta.ByteSize != bad.ByteSize || sc.Meta.Checksum != bad.Checksum {
		t.Fatalf("%s: conflict %+v, want the footer of %+v against %+v", op, sc, own, bad)
	}
	if errors.Is(err, store.ErrLatched) || errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("%s: conflict also reads as latched or corrupt: %v", op, err)
	}
}

// A copy without a valid seal footer of its own (never sealed, or its
// footer damaged) keeps following the metadata: settled to a shorter seal,
// or cut at the seal's durable end by OpenTarget.
func TestNoOwnSealMetadataWins(t *testing.T) {
	const id = meta.SegmentID("ns")
	seg := segment(id, 0, 5)

	// Unsealed: 12 frames, settled to 5.
	db := open(t, t.TempDir(), store.Options{})
	fill(t, db, id, 0, 12)
	res, err := db.Settle(id, seg)
	if err != nil || !res.FooterWritten || res.BytesCut == 0 {
		t.Fatalf("Settle of an unsealed copy to a shorter seal = %+v, %v", res, err)
	}
	if err := db.Verify(id, seg); err != nil {
		t.Fatal(err)
	}

	// Sealed, but its footer's own CRC is damaged: not a valid seal.
	dir, _, b := ownSealedCopy(t, id, 12)
	flipByte(t, copyPath(dir, id), int64(len(b))-2)
	db = open(t, dir, store.Options{})
	res, err = db.Settle(id, seg)
	if err != nil || !res.FooterWritten {
		t.Fatalf("Settle of a copy with a damaged footer = %+v, %v", res, err)
	}
	if got := size(t, copyPath(dir, id)); got != seg.ByteSize+store.FooterSize {
		t.Fatalf("size after Settle %d, want %d", got, seg.ByteSize+store.FooterSize)
	}

	// OpenTarget cuts an unsealed copy with frames past the seal.
	dir, _, b = ownSealedCopy(t, id, 12)
	writeFile(t, copyPath(dir, id), b[:len(b)-store.FooterSize]) // frames only
	db = open(t, dir, store.Options{})
	tg, err := db.OpenTarget(id, seg)
	if err != nil {
		t.Fatalf("OpenTarget of an unsealed copy: %v", err)
	}
	if tg.Resume() != seg.ByteSize || size(t, copyPath(dir, id)) != seg.ByteSize {
		t.Fatalf("OpenTarget resumes at %d (file %d bytes), want %d", tg.Resume(), size(t, copyPath(dir, id)), seg.ByteSize)
	}
	if err := tg.Abort(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(must(os.ReadFile(copyPath(dir, id))), b[:seg.ByteSize]) {
		t.Fatal("OpenTarget did not keep the seal's frames")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
