package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/store/errorfs"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func open(t testing.TB, dir string, opts store.Options) *store.DB {
	t.Helper()
	db, err := store.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func payload(i int) []byte {
	return bytes.Repeat([]byte{byte('a' + i%26)}, 10+i%50)
}

// frames returns the encoded frames of n payloads from start, with the
// byte position of each frame (and one past the last).
func frames(start uint64, n int) ([]byte, []int64) {
	var b []byte
	pos := []int64{0}
	for i := 0; i < n; i++ {
		b = store.AppendFrame(b, start+uint64(i), payload(i))
		pos = append(pos, int64(len(b)))
	}
	return b, pos
}

// segment describes the first n frames of frames(start, ...) as sealed.
func segment(id meta.SegmentID, start uint64, n int) meta.Segment {
	b, _ := frames(start, n)
	return meta.Segment{
		ID: id, StartOffset: start, Length: uint64(n), ByteSize: int64(len(b)),
		Sealed: true, Checksum: meta.CRC32C(crc32.Checksum(b, castagnoli)), Replicas: []meta.BrokerID{1},
	}
}

// fill creates id and appends n payloads, then syncs.
func fill(t testing.TB, db *store.DB, id meta.SegmentID, start uint64, n int) {
	t.Helper()
	if err := db.Create(id, start); err != nil {
		t.Fatalf("Create(%s): %v", id, err)
	}
	for i := 0; i < n; i++ {
		off, err := db.Append(id, payload(i))
		if err != nil {
			t.Fatalf("Append(%s) #%d: %v", id, i, err)
		}
		if off != start+uint64(i) {
			t.Fatalf("Append(%s) #%d: offset %d, want %d", id, i, off, start+uint64(i))
		}
	}
	if err := db.Sync(id); err != nil {
		t.Fatalf("Sync(%s): %v", id, err)
	}
}

func size(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func flipByte(t testing.TB, path string, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b[:], at); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyPath is where the store of dir keeps the copy of id.
func copyPath(dir string, id meta.SegmentID) string {
	return store.CopyPath(dir, id)
}

func wantIs(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want one wrapping %v", what, err, target)
	}
}

func TestFrameAndFooterRoundTrip(t *testing.T) {
	b := store.AppendFrame(nil, 42, []byte("hello"))
	if len(b) != store.FrameHeaderSize+5 {
		t.Fatalf("frame length %d", len(b))
	}
	if got := crc32.Checksum(b[4:], castagnoli); got != uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24 {
		t.Fatalf("frame CRC field does not cover the rest of the frame")
	}
	ft := store.Footer{StartOffset: 7, Length: 3, ByteSize: 99, FramesCRC: 0xdeadbeef}
	fb := store.AppendFooter(nil, ft)
	if len(fb) != store.FooterSize {
		t.Fatalf("footer length %d", len(fb))
	}
	got, ok := store.DecodeFooter(fb)
	if !ok || got != ft {
		t.Fatalf("DecodeFooter = %+v, %v; want %+v", got, ok, ft)
	}
	fb[20] ^= 1
	if _, ok := store.DecodeFooter(fb); ok {
		t.Fatal("DecodeFooter accepted a damaged footer")
	}
}

func TestAppendSealReopen(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	const id = meta.SegmentID("s1")
	fill(t, db, id, 100, 50)
	seal, err := db.Seal(id)
	if err != nil {
		t.Fatal(err)
	}
	want := segment(id, 100, 50)
	if seal.StartOffset != 100 || seal.Length != 50 || seal.ByteSize != want.ByteSize || seal.Checksum != want.Checksum {
		t.Fatalf("Seal = %+v, want start 100 length 50 byte_size %d %v", seal, want.ByteSize, want.Checksum)
	}
	if got := size(t, db.Path(id)); got != want.ByteSize+store.FooterSize {
		t.Fatalf("sealed file size %d, want %d", got, want.ByteSize+store.FooterSize)
	}
	_, err = db.Append(id, []byte("late"))
	wantIs(t, "Append after Seal", err, store.ErrSealed)
	if err := db.Verify(id, want); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	// Seal again returns the recorded seal.
	if again, err := db.Seal(id); err != nil || again != seal {
		t.Fatalf("second Seal = %+v, %v; want %+v", again, err, seal)
	}
	db.Close()

	db = open(t, dir, store.Options{})
	if got := db.List(); len(got) != 1 || got[0] != id {
		t.Fatalf("List after reopen = %v", got)
	}
	end, err := db.DurableEnd(id)
	if err != nil {
		t.Fatal(err)
	}
	if !end.Footer || end.Bytes != want.ByteSize || end.NextOffset != 150 || end.Frames != 50 || end.Cause != nil {
		t.Fatalf("DurableEnd after reopen = %+v", end)
	}
	_, err = db.Append(id, []byte("late"))
	wantIs(t, "Append after reopen of a sealed copy", err, store.ErrSealed)
	if err := db.Verify(id, want); err != nil {
		t.Fatalf("Verify after reopen: %v", err)
	}
}

// TestAppendAtRefusesAnotherOffset: AppendAt writes the frame only at the
// copy's next offset; at any other it refuses with ErrNotNext and the copy
// is as it was.
func TestAppendAtRefusesAnotherOffset(t *testing.T) {
	db := open(t, t.TempDir(), store.Options{})
	const id = meta.SegmentID("s1")
	fill(t, db, id, 100, 2)
	for _, at := range []uint64{100, 101, 103} {
		wantIs(t, fmt.Sprintf("AppendAt(%d) of a copy whose next frame is 102", at), db.AppendAt(id, at, []byte("x")), store.ErrNotNext)
	}
	if end, err := db.DurableEnd(id); err != nil || end.Frames != 2 || end.Bytes != segment(id, 100, 2).ByteSize {
		t.Fatalf("after refused AppendAt: %+v, %v; want the 2 frames as they were", end, err)
	}
	if err := db.AppendAt(id, 102, []byte("x")); err != nil {
		t.Fatalf("AppendAt(102) of a copy whose next frame is 102: %v", err)
	}
	if end, err := db.DurableEnd(id); err != nil || end.Frames != 3 || end.NextOffset != 103 {
		t.Fatalf("after AppendAt(102): %+v, %v; want 3 frames, next 103", end, err)
	}
}

// TestRestoreStartOfReopenedEmptyCopy: an active copy reopened before its
// first frame cannot know its start from its file, so Append and Seal
// refuse it until RestoreStart supplies it from the segment's metadata;
// a start that disagrees with the copy's is refused and changes nothing.
func TestRestoreStartOfReopenedEmptyCopy(t *testing.T) {
	dir := t.TempDir()
	const id = meta.SegmentID("p1")
	db := open(t, dir, store.Options{Preallocate: 1 << 16})
	if err := db.Create(id, 40); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = open(t, dir, store.Options{Preallocate: 1 << 16})
	_, err := db.Append(id, []byte("a"))
	wantIs(t, "Append to a reopened empty copy", err, store.ErrInvalid)
	_, err = db.Seal(id)
	wantIs(t, "Seal of a reopened empty copy", err, store.ErrInvalid)
	if err := db.RestoreStart(id, 40); err != nil {
		t.Fatalf("RestoreStart: %v", err)
	}
	if off, err := db.Append(id, []byte("a")); err != nil || off != 40 {
		t.Fatalf("Append after RestoreStart = %d, %v; want offset 40", off, err)
	}
	if err := db.Sync(id); err != nil {
		t.Fatal(err)
	}
	err = db.RestoreStart(id, 41)
	wantIs(t, "RestoreStart with another start", err, store.ErrInvalid)
	db.Close()

	db = open(t, dir, store.Options{Preallocate: 1 << 16})
	err = db.RestoreStart(id, 39)
	wantIs(t, "RestoreStart against the first frame's offset", err, store.ErrInvalid)
	if err := db.RestoreStart(id, 40); err != nil {
		t.Fatalf("RestoreStart of the copy's own start: %v", err)
	}
	if off, err := db.Append(id, []byte("b")); err != nil || off != 41 {
		t.Fatalf("Append after reopen = %d, %v; want offset 41", off, err)
	}
	s, err := db.Seal(id)
	if err != nil || s.StartOffset != 40 || s.Length != 2 {
		t.Fatalf("Seal = %+v, %v; want start 40, 2 frames", s, err)
	}
	wantIs(t, "RestoreStart of an unknown copy", db.RestoreStart("none", 0), store.ErrUnknownCopy)
}

func TestCreateExistsAndBadInput(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	if err := db.Create("a", 0); err != nil {
		t.Fatal(err)
	}
	wantIs(t, "Create twice", db.Create("a", 0), store.ErrExists)
	wantIs(t, "Create bad id", db.Create("../x", 0), store.ErrInvalid)
	_, err := db.Append("nope", []byte("x"))
	wantIs(t, "Append unknown", err, store.ErrUnknownCopy)
	_, err = db.Settle("a", meta.Segment{ID: "a"})
	wantIs(t, "Settle unsealed segment", err, store.ErrInvalid)
	_, err = db.Settle("a", segment("b", 0, 1))
	wantIs(t, "Settle with another segment's metadata", err, store.ErrInvalid)
	// A file already on disk but unknown to this DB.
	writeFile(t, copyPath(dir, "disk"), nil)
	wantIs(t, "Create over an existing file", db.Create("disk", 0), store.ErrExists)
	if _, err := store.Open(dir, store.Options{}); !errors.Is(err, store.ErrInUse) {
		t.Fatalf("second Open of an open directory: %v", err)
	}
	if _, err := store.Open(dir, store.Options{Preallocate: -1}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Open with negative Preallocate: %v", err)
	}
}

func TestPreallocatedTail(t *testing.T) {
	dir := t.TempDir()
	const pre = 256 << 10
	db := open(t, dir, store.Options{Preallocate: pre})
	const id = meta.SegmentID("pre")
	fill(t, db, id, 0, 20)
	seg := segment(id, 0, 20)
	if got := size(t, db.Path(id)); got != pre {
		t.Fatalf("file size %d, want the preallocated %d", got, pre)
	}
	end, err := db.DurableEnd(id)
	if err != nil {
		t.Fatal(err)
	}
	if end.Bytes != seg.ByteSize || end.NextOffset != 20 || end.FileSize != pre || end.Footer {
		t.Fatalf("DurableEnd = %+v, want bytes %d next 20 file %d", end, seg.ByteSize, pre)
	}
	wantIs(t, "cause of a preallocated tail", end.Cause, store.ErrZeroTail)
	if errors.Is(end.Cause, store.ErrCorrupt) {
		t.Fatalf("a zero tail is reported as corrupt: %v", end.Cause)
	}
	// A restart keeps the tail; an append then resumes after the last frame.
	db.Close()
	db = open(t, dir, store.Options{Preallocate: pre})
	end2, err := db.DurableEnd(id)
	if err != nil || end2.Bytes != end.Bytes || end2.NextOffset != 20 {
		t.Fatalf("DurableEnd after restart = %+v, %v", end2, err)
	}
	off, err := db.Append(id, payload(20))
	if err != nil || off != 20 {
		t.Fatalf("Append after restart = %d, %v; want 20", off, err)
	}
	if err := db.Sync(id); err != nil {
		t.Fatal(err)
	}
	// Settle to the 21 frames: footer written, tail cut.
	seg = segment(id, 0, 21)
	before := size(t, db.Path(id))
	res, err := db.Settle(id, seg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.SyncedAndRolled || !res.FooterWritten || res.BytesCut != before-seg.ByteSize-store.FooterSize {
		t.Fatalf("Settle = %+v (file was %d bytes)", res, before)
	}
	if got := size(t, db.Path(id)); got != seg.ByteSize+store.FooterSize {
		t.Fatalf("settled size %d, want %d", got, seg.ByteSize+store.FooterSize)
	}
	if err := db.Verify(id, seg); err != nil {
		t.Fatal(err)
	}
	_, err = db.Append(id, payload(21))
	wantIs(t, "Append after Settle (fence)", err, store.ErrSealed)
}

func TestPreallocationGrowsInSteps(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{Preallocate: 4096})
	fill(t, db, "g", 0, 0)
	big := bytes.Repeat([]byte{1}, 10000)
	for i := 0; i < 3; i++ {
		if _, err := db.Append("g", big); err != nil {
			t.Fatal(err)
		}
	}
	frameBytes := int64(3 * (store.FrameHeaderSize + len(big)))
	got := size(t, db.Path("g"))
	if got < frameBytes || got%4096 != 0 {
		t.Fatalf("file size %d: want a multiple of 4096 covering %d frame bytes", got, frameBytes)
	}
	end, err := db.DurableEnd("g")
	if err != nil || end.Bytes != frameBytes || end.Frames != 3 {
		t.Fatalf("DurableEnd = %+v, %v", end, err)
	}
}

func TestTornLastFrame(t *testing.T) {
	dir := t.TempDir()
	const id = meta.SegmentID("torn")
	b, pos := frames(5, 10)
	writeFile(t, copyPath(dir, id), b[:pos[9]+7]) // the 10th frame is torn 7 bytes in
	db := open(t, dir, store.Options{})
	end, err := db.DurableEnd(id)
	if err != nil {
		t.Fatal(err)
	}
	if end.Bytes != pos[9] || end.NextOffset != 14 || end.Frames != 9 || end.FileSize != pos[9]+7 {
		t.Fatalf("DurableEnd = %+v, want bytes %d next 14", end, pos[9])
	}
	wantIs(t, "cause", end.Cause, store.ErrTorn)
	var ce *store.CorruptError
	if !errors.As(end.Cause, &ce) || ce.Offset != pos[9] {
		t.Fatalf("cause %v: want a *CorruptError at %d", end.Cause, pos[9])
	}
	// Settle refuses a short copy and says where it ends.
	seg := segment(id, 5, 10)
	_, err = db.Settle(id, seg)
	var se *store.ShortError
	if !errors.As(err, &se) || !errors.Is(err, store.ErrShort) {
		t.Fatalf("Settle of a torn copy: %v, want a *ShortError", err)
	}
	if se.End.Bytes != pos[9] || se.End.NextOffset != 14 || se.Want != seg.ByteSize {
		t.Fatalf("ShortError = %+v", se)
	}
	if got := size(t, db.Path(id)); got != pos[9]+7 {
		t.Fatalf("a refused Settle changed the file: size %d", got)
	}
	err = db.Verify(id, seg)
	wantIs(t, "Verify of a torn copy", err, store.ErrShort)
	// Truncate to the durable end, then a settle to the first 9 frames works.
	if err := db.Truncate(id, end.Bytes); err != nil {
		t.Fatal(err)
	}
	if got := size(t, db.Path(id)); got != pos[9] {
		t.Fatalf("size after Truncate %d, want %d", got, pos[9])
	}
	res, err := db.Settle(id, segment(id, 5, 9))
	if err != nil || !res.FooterWritten || res.SyncedAndRolled || res.BytesCut != 0 {
		t.Fatalf("Settle = %+v, %v", res, err)
	}
}

func TestBitFlipMidFile(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	const id = meta.SegmentID("flip")
	fill(t, db, id, 0, 30)
	if _, err := db.Seal(id); err != nil {
		t.Fatal(err)
	}
	seg := segment(id, 0, 30)
	_, pos := frames(0, 30)
	flipByte(t, db.Path(id), pos[14]+store.FrameHeaderSize+3)

	err := db.Verify(id, seg)
	var ce *store.CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorrupt) || ce.Offset != pos[14] {
		t.Fatalf("Verify after a bit flip in frame 14: %v, want a *CorruptError at byte %d", err, pos[14])
	}
	end, err := db.DurableEnd(id)
	if err != nil {
		t.Fatal(err)
	}
	if end.Bytes != pos[14] || end.NextOffset != 14 || end.Footer {
		t.Fatalf("DurableEnd = %+v, want it to stop before the damaged frame at %d", end, pos[14])
	}
	wantIs(t, "cause", end.Cause, store.ErrCorrupt)
	_, err = db.Settle(id, seg)
	wantIs(t, "Settle of a damaged copy", err, store.ErrShort)
	_, err = db.OpenSource(id, seg)
	if err != nil {
		// OpenSource checks size and footer only: the damage is for Verify.
		t.Fatalf("OpenSource: %v", err)
	}
	// The damage is not an I/O error: no latch.
	if err := db.LatchErr(id); err != nil {
		t.Fatalf("LatchErr = %v", err)
	}
}

func TestBitFlipInHeaderAndOffsetGap(t *testing.T) {
	dir := t.TempDir()
	b, pos := frames(0, 5)
	// A frame with the wrong offset but a valid CRC: an offset gap.
	gap := append(append([]byte{}, b[:pos[3]]...), store.AppendFrame(nil, 9, payload(3))...)
	writeFile(t, copyPath(dir, "gap"), gap)
	// A damaged length field.
	bad := append([]byte{}, b...)
	bad[pos[2]+5] ^= 0x40
	writeFile(t, copyPath(dir, "len"), bad)
	db := open(t, dir, store.Options{})
	end, err := db.DurableEnd("gap")
	if err != nil || end.Bytes != pos[3] || end.NextOffset != 3 || !errors.Is(end.Cause, store.ErrCorrupt) {
		t.Fatalf("offset gap: DurableEnd = %+v, %v", end, err)
	}
	end, err = db.DurableEnd("len")
	if err != nil || end.Bytes != pos[2] || end.NextOffset != 2 || end.Cause == nil {
		t.Fatalf("damaged length: DurableEnd = %+v, %v", end, err)
	}
}

func TestRecordsPastTheSeal(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	const id = meta.SegmentID("past")
	fill(t, db, id, 0, 10)
	seg := segment(id, 0, 7) // the seal excludes the last 3 records
	end, err := db.DurableEnd(id)
	if err != nil || end.Frames != 10 || end.Bytes <= seg.ByteSize {
		t.Fatalf("DurableEnd = %+v, %v", end, err)
	}
	err = db.Verify(id, seg)
	wantIs(t, "Verify before settling", err, store.ErrNotSealed)
	res, err := db.Settle(id, seg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.FooterWritten || !res.SyncedAndRolled || res.BytesCut != end.Bytes-seg.ByteSize-store.FooterSize {
		t.Fatalf("Settle = %+v, want the footer written and %d bytes cut", res, end.Bytes-seg.ByteSize-store.FooterSize)
	}
	if res.End.Bytes != seg.ByteSize || res.End.NextOffset != 7 || !res.End.Footer || res.End.FileSize != seg.ByteSize+store.FooterSize {
		t.Fatalf("Settle End = %+v", res.End)
	}
	if err := db.Verify(id, seg); err != nil {
		t.Fatal(err)
	}
	// A settled copy settles again with nothing to do.
	res, err = db.Settle(id, seg)
	if err != nil || res.FooterWritten || res.SyncedAndRolled || res.BytesCut != 0 {
		t.Fatalf("second Settle = %+v, %v", res, err)
	}
}

func TestRecordsPastAWrittenFooter(t *testing.T) {
	// A footer followed by more bytes (a copy that kept its tail).
	dir := t.TempDir()
	seg := segment("pf", 0, 4)
	b, _ := frames(0, 4)
	crc, _ := seg.Checksum.Value()
	b = store.AppendFooter(b, store.Footer{StartOffset: 0, Length: 4, ByteSize: seg.ByteSize, FramesCRC: crc})
	b = append(b, make([]byte, 100)...)
	writeFile(t, copyPath(dir, "pf"), b)
	db := open(t, dir, store.Options{})
	end, err := db.DurableEnd("pf")
	if err != nil || !end.Footer || end.Bytes != seg.ByteSize {
		t.Fatalf("DurableEnd = %+v, %v", end, err)
	}
	wantIs(t, "cause", end.Cause, store.ErrPastFooter)
	if err := db.Verify("pf", seg); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	res, err := db.Settle("pf", seg)
	if err != nil || res.FooterWritten || res.BytesCut != 100 {
		t.Fatalf("Settle = %+v, %v", res, err)
	}
}

func TestFooterMissing(t *testing.T) {
	dir := t.TempDir()
	seg := segment("nf", 3, 6)
	b, _ := frames(3, 6)
	writeFile(t, copyPath(dir, "nf"), b)
	db := open(t, dir, store.Options{})
	err := db.Verify("nf", seg)
	wantIs(t, "Verify", err, store.ErrNotSealed)
	_, err = db.OpenSource("nf", seg)
	wantIs(t, "OpenSource of an unsealed copy", err, store.ErrNotSealed)
	end, err := db.DurableEnd("nf")
	if err != nil || end.Footer || end.Cause != nil || end.Bytes != seg.ByteSize {
		t.Fatalf("DurableEnd = %+v, %v", end, err)
	}
	res, err := db.Settle("nf", seg)
	if err != nil || !res.FooterWritten || res.SyncedAndRolled {
		t.Fatalf("Settle = %+v, %v", res, err)
	}
	if err := db.Verify("nf", seg); err != nil {
		t.Fatal(err)
	}
	f, err := db.OpenSource("nf", seg)
	if err != nil {
		t.Fatalf("OpenSource after Settle: %v", err)
	}
	f.Close()
}

func TestFooterCorrupt(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	fill(t, db, "fc", 0, 8)
	if _, err := db.Seal("fc"); err != nil {
		t.Fatal(err)
	}
	seg := segment("fc", 0, 8)
	flipByte(t, db.Path("fc"), seg.ByteSize+20)
	err := db.Verify("fc", seg)
	var ce *store.CorruptError
	if !errors.As(err, &ce) || ce.Offset != seg.ByteSize || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Verify with a damaged footer: %v", err)
	}
	_, err = db.OpenSource("fc", seg)
	wantIs(t, "OpenSource with a damaged footer", err, store.ErrCorrupt)
	end, err := db.DurableEnd("fc")
	if err != nil || end.Footer || end.Bytes != seg.ByteSize || !errors.Is(end.Cause, store.ErrCorrupt) {
		t.Fatalf("DurableEnd = %+v, %v", end, err)
	}
	// The frames agree with the segment, so Settle rewrites the footer.
	res, err := db.Settle("fc", seg)
	if err != nil || !res.FooterWritten {
		t.Fatalf("Settle = %+v, %v", res, err)
	}
	if err := db.Verify("fc", seg); err != nil {
		t.Fatal(err)
	}
}

func TestFooterDisagreesWithSegment(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	fill(t, db, "d", 0, 8)
	if _, err := db.Seal("d"); err != nil {
		t.Fatal(err)
	}
	seg := segment("d", 0, 8)
	seg.Checksum = meta.CRC32C(12345)
	wantIs(t, "Verify with another checksum", db.Verify("d", seg), store.ErrCorrupt)
	// The copy's own seal disagrees with the metadata: Settle refuses
	// (invariant 8), OpenSource refuses as a source.
	_, err := db.Settle("d", seg)
	wantIs(t, "Settle with another checksum", err, store.ErrSealConflict)
	_, err = db.OpenSource("d", seg)
	wantIs(t, "OpenSource with another checksum", err, store.ErrCorrupt)
	seg = segment("d", 1, 8) // another start offset
	wantIs(t, "Verify with another start", db.Verify("d", seg), store.ErrCorrupt)
}

func TestFileGone(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	fill(t, db, "gone", 0, 5)
	if _, err := db.Seal("gone"); err != nil {
		t.Fatal(err)
	}
	seg := segment("gone", 0, 5)
	if err := os.Remove(db.Path("gone")); err != nil {
		t.Fatal(err)
	}
	wantIs(t, "Verify of a removed file", db.Verify("gone", seg), store.ErrUnknownCopy)
	if got := db.List(); len(got) != 0 {
		t.Fatalf("List still has the removed copy: %v", got)
	}
	_, err := db.DurableEnd("gone")
	wantIs(t, "DurableEnd", err, store.ErrUnknownCopy)
	if err := db.LatchErr("gone"); err != nil {
		t.Fatalf("a missing file latched the copy: %v", err)
	}
	// A catch-up target recreates it from nothing.
	tg, err := db.OpenTarget("gone", seg)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Resume() != 0 {
		t.Fatalf("Resume = %d, want 0", tg.Resume())
	}
	if err := tg.Abort(); err != nil {
		t.Fatal(err)
	}
	// Identity of a file removed behind the store's back.
	fill(t, db, "gone2", 0, 1)
	os.Remove(db.Path("gone2"))
	_, err = db.Identity("gone2")
	wantIs(t, "Identity", err, store.ErrUnknownCopy)
}

func TestZeroLengthFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, copyPath(dir, "z"), nil)
	db := open(t, dir, store.Options{})
	end, err := db.DurableEnd("z")
	if err != nil || end != (store.End{}) {
		t.Fatalf("DurableEnd of an empty file = %+v, %v", end, err)
	}
	_, err = db.Append("z", []byte("x"))
	wantIs(t, "Append to an empty copy of unknown start", err, store.ErrInvalid)
	seg := segment("z", 10, 3)
	var se *store.ShortError
	if err := db.Verify("z", seg); !errors.As(err, &se) || se.End.Bytes != 0 {
		t.Fatalf("Verify: %v", err)
	}
	if _, err := db.Settle("z", seg); !errors.As(err, &se) || se.End.Bytes != 0 || se.End.NextOffset != 10 {
		t.Fatalf("Settle: %v", err)
	}
	_, err = db.OpenSource("z", seg)
	if !errors.As(err, &se) || se.End.Bytes != 0 || se.End.NextOffset != 10 {
		t.Fatalf("OpenSource of an empty file: %v", err)
	}
	// An empty sealed segment settles to a lone footer.
	empty := meta.Segment{ID: "z", StartOffset: 10, Sealed: true, Checksum: meta.CRC32C(0)}
	res, err := db.Settle("z", empty)
	if err != nil || !res.FooterWritten || size(t, db.Path("z")) != store.FooterSize {
		t.Fatalf("Settle of an empty segment = %+v, %v", res, err)
	}
	if err := db.Verify("z", empty); err != nil {
		t.Fatal(err)
	}
}

func TestTruncate(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	fill(t, db, "t", 0, 6)
	_, pos := frames(0, 6)
	wantIs(t, "Truncate mid-frame", db.Truncate("t", pos[2]+1), store.ErrInvalid)
	wantIs(t, "Truncate past the end", db.Truncate("t", pos[6]+16), store.ErrInvalid)
	wantIs(t, "Truncate negative", db.Truncate("t", -1), store.ErrInvalid)
	if got := size(t, db.Path("t")); got != pos[6] {
		t.Fatalf("a refused Truncate changed the file: %d", got)
	}
	if err := db.Truncate("t", pos[4]); err != nil {
		t.Fatal(err)
	}
	// The active copy continues from the cut.
	off, err := db.Append("t", payload(4))
	if err != nil || off != 4 {
		t.Fatalf("Append after Truncate = %d, %v", off, err)
	}
	seal, err := db.Seal("t")
	if err != nil || seal != (store.Seal{StartOffset: 0, Length: 5, ByteSize: pos[5], Checksum: segment("t", 0, 5).Checksum}) {
		t.Fatalf("Seal = %+v, %v", seal, err)
	}
	// Truncate into a sealed copy unseals it.
	if err := db.Truncate("t", pos[3]); err != nil {
		t.Fatal(err)
	}
	wantIs(t, "Verify after cutting the footer", db.Verify("t", segment("t", 0, 3)), store.ErrNotSealed)
}

func TestLatchOnWriteError(t *testing.T) {
	dir := t.TempDir()
	inj := errorfs.OnIndex(5, syscall.EIO, errorfs.Ops(errorfs.Write), errorfs.PathMatch("a.seg"))
	fsys := errorfs.Wrap(store.OSFS(), inj)
	db := open(t, dir, store.Options{FS: fsys})
	fill(t, db, "a", 0, 5)
	fill(t, db, "b", 0, 5)
	_, err := db.Append("a", payload(5))
	wantIs(t, "Append on the injected write", err, store.ErrLatched)
	wantIs(t, "Append on the injected write", err, syscall.EIO)
	if inj.Injected() != 1 {
		t.Fatalf("injected %d errors", inj.Injected())
	}
	// Every later request on a refuses, naming the cause.
	checks := map[string]error{}
	_, checks["append"] = db.Append("a", payload(6))
	checks["sync"] = db.Sync("a")
	_, checks["durable end"] = db.DurableEnd("a")
	_, checks["seal"] = db.Seal("a")
	_, checks["settle"] = db.Settle("a", segment("a", 0, 5))
	checks["verify"] = db.Verify("a", segment("a", 0, 5))
	checks["truncate"] = db.Truncate("a", 0)
	_, checks["identity"] = db.Identity("a")
	_, checks["open source"] = db.OpenSource("a", segment("a", 0, 5))
	_, checks["open target"] = db.OpenTarget("a", segment("a", 0, 5))
	checks["latch"] = db.LatchErr("a")
	for op, err := range checks {
		wantIs(t, op+" on a latched copy", err, store.ErrLatched)
		wantIs(t, op+" on a latched copy (cause)", err, syscall.EIO)
	}
	// The other copy is untouched.
	if _, err := db.Append("b", payload(5)); err != nil {
		t.Fatalf("Append to another copy: %v", err)
	}
	if err := db.LatchErr("b"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// A restart clears the latch; the acknowledged frames are all there.
	db = open(t, dir, store.Options{})
	if err := db.LatchErr("a"); err != nil {
		t.Fatalf("latch survived a restart: %v", err)
	}
	end, err := db.DurableEnd("a")
	if err != nil || end.NextOffset != 5 || end.Frames != 5 {
		t.Fatalf("DurableEnd after restart = %+v, %v", end, err)
	}
	if off, err := db.Append("a", payload(5)); err != nil || off != 5 {
		t.Fatalf("Append after restart = %d, %v", off, err)
	}
	// A latched copy can still be deleted.
	inj2 := errorfs.Always(syscall.EIO, errorfs.Ops(errorfs.Sync), errorfs.PathMatch("a.seg"))
	fsys.SetInjector(inj2)
	db.Close()
	db = open(t, dir, store.Options{FS: fsys})
	if _, err := db.Append("a", payload(6)); err != nil {
		t.Fatal(err)
	}
	wantIs(t, "Sync on the injected sync", db.Sync("a"), store.ErrLatched)
	if err := db.Delete("a"); err != nil {
		t.Fatalf("Delete of a latched copy: %v", err)
	}
	if _, err := os.Stat(copyPath(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("file still there after Delete: %v", err)
	}
}

func TestLatchOnTruncateAndSettle(t *testing.T) {
	for _, kind := range []errorfs.Kind{errorfs.Truncate, errorfs.Sync, errorfs.Write, errorfs.SyncDir, errorfs.Read} {
		t.Run(kind.String(), func(t *testing.T) {
			dir := t.TempDir()
			fsys := errorfs.Wrap(store.OSFS(), nil)
			db := open(t, dir, store.Options{FS: fsys, Preallocate: 8192})
			fill(t, db, "s", 0, 10)
			seg := segment("s", 0, 10)
			inj := errorfs.OnIndex(0, syscall.EIO, errorfs.Ops(kind))
			fsys.SetInjector(inj)
			_, err := db.Settle("s", seg)
			if inj.Injected() == 0 {
				t.Skipf("settle did no %v", kind)
			}
			wantIs(t, "Settle on the injected "+kind.String(), err, store.ErrLatched)
			wantIs(t, "LatchErr", db.LatchErr("s"), syscall.EIO)
			fsys.SetInjector(nil)
			_, err = db.Settle("s", seg)
			wantIs(t, "Settle again", err, store.ErrLatched)
			db.Close()
			db = open(t, dir, store.Options{FS: fsys})
			if _, err := db.Settle("s", seg); err != nil {
				t.Fatalf("Settle after restart: %v", err)
			}
			if err := db.Verify("s", seg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

type countSyncer struct{ n atomic.Int64 }

func (c *countSyncer) SyncDir(ctx context.Context, path string) error {
	c.n.Add(1)
	return store.OSFS().SyncDir(path)
}

func TestSettleUsesDirSyncer(t *testing.T) {
	dir := t.TempDir()
	cs := &countSyncer{}
	db := open(t, dir, store.Options{DirSyncer: cs})
	fill(t, db, "x", 0, 3)
	seg := segment("x", 0, 3)
	n0 := cs.n.Load()
	if _, err := db.Settle("x", seg); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Settle("x", seg); err != nil {
		t.Fatal(err)
	}
	if got := cs.n.Load() - n0; got != 2 {
		t.Fatalf("two settles made %d directory syncs, want 2", got)
	}
}

// source builds a sealed copy on its own DB and returns its bytes.
func source(t *testing.T, id meta.SegmentID, n int) ([]byte, meta.Segment) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	fill(t, db, id, 0, n)
	if _, err := db.Seal(id); err != nil {
		t.Fatal(err)
	}
	seg := segment(id, 0, n)
	f, err := db.OpenSource(id, seg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, seg.ByteSize+store.FooterSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b, seg
}

func TestTargetResumeAndCommit(t *testing.T) {
	src, seg := source(t, "c", 40)
	_, pos := frames(0, 40)
	dir := t.TempDir()
	// The target holds 17 whole frames and a torn one.
	writeFile(t, copyPath(dir, "c"), src[:pos[17]+9])
	db := open(t, dir, store.Options{})
	tg, err := db.OpenTarget("c", seg)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Resume() != pos[17] {
		t.Fatalf("Resume = %d, want %d", tg.Resume(), pos[17])
	}
	if got := size(t, db.Path("c")); got != pos[17] {
		t.Fatalf("OpenTarget left the file at %d bytes, want %d", got, pos[17])
	}
	// Held: other requests refuse.
	_, err = db.DurableEnd("c")
	wantIs(t, "DurableEnd while held", err, store.ErrBusy)
	_, err = db.OpenTarget("c", seg)
	wantIs(t, "second OpenTarget", err, store.ErrBusy)
	wantIs(t, "Delete while held", db.Delete("c"), store.ErrBusy)
	if _, err := tg.File().WriteAt(src[tg.Resume():], tg.Resume()); err != nil {
		t.Fatal(err)
	}
	if err := tg.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	wantIs(t, "Commit twice", tg.Commit(), store.ErrClosed)
	if err := db.Verify("c", seg); err != nil {
		t.Fatal(err)
	}
	_, err = db.Append("c", []byte("x"))
	wantIs(t, "Append after Commit", err, store.ErrSealed)
	// A complete copy resumes at its end.
	tg, err = db.OpenTarget("c", seg)
	if err != nil || tg.Resume() != seg.ByteSize+store.FooterSize {
		t.Fatalf("OpenTarget of a complete copy: %v, resume %d", err, tg.Resume())
	}
	if err := tg.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestTargetResumesAnActiveCopyTheSealPassedBy: a replica that missed
// its segment's seal (it did not answer it) keeps the copy open for
// appends, short of the sealed size. Heal's backfill in place must be able
// to resume it from its durable end: before, OpenTarget refused an active
// copy (ErrBusy) on every pass, and the segment never healed (seed 777 of
// the nemesis: 90 s of refusals). The target takes the copy from the write
// path; an append after that is refused, and after Commit it is sealed.
func TestTargetResumesAnActiveCopyTheSealPassedBy(t *testing.T) {
	src, seg := source(t, "c", 40)
	_, pos := frames(0, 40)
	db := open(t, t.TempDir(), store.Options{})
	fill(t, db, "c", 0, 17)
	tg, err := db.OpenTarget("c", seg)
	if err != nil {
		t.Fatalf("OpenTarget of the active copy of a sealed segment: %v", err)
	}
	if tg.Resume() != pos[17] {
		t.Fatalf("Resume = %d, want %d (its 17 synced frames)", tg.Resume(), pos[17])
	}
	_, err = db.Append("c", payload(17))
	wantIs(t, "Append while the target holds it", err, store.ErrBusy)
	if _, err := tg.File().WriteAt(src[tg.Resume():], tg.Resume()); err != nil {
		t.Fatal(err)
	}
	if err := tg.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := db.Verify("c", seg); err != nil {
		t.Fatal(err)
	}
	_, err = db.Append("c", payload(40))
	wantIs(t, "Append after Commit", err, store.ErrSealed)
}

func TestTargetCommitRefusesBadTransfer(t *testing.T) {
	src, seg := source(t, "c", 20)
	_, pos := frames(0, 20)
	db := open(t, t.TempDir(), store.Options{})

	// Damaged in flight: a bit flipped in frame 12.
	tg, err := db.OpenTarget("c", seg)
	if err != nil || tg.Resume() != 0 {
		t.Fatalf("OpenTarget: %v", err)
	}
	bad := append([]byte{}, src...)
	bad[pos[12]+store.FrameHeaderSize] ^= 1
	if _, err := tg.File().WriteAt(bad, 0); err != nil {
		t.Fatal(err)
	}
	err = tg.Commit()
	var ce *store.CorruptError
	if !errors.As(err, &ce) || ce.Offset != pos[12] {
		t.Fatalf("Commit of a damaged transfer: %v", err)
	}
	if got := size(t, db.Path("c")); got != pos[12] {
		t.Fatalf("after a failed Commit the file is %d bytes, want cut at %d", got, pos[12])
	}
	// Short transfer.
	tg, err = db.OpenTarget("c", seg)
	if err != nil || tg.Resume() != pos[12] {
		t.Fatalf("OpenTarget after a failed Commit: %v, resume %d", err, tg.Resume())
	}
	if _, err := tg.File().WriteAt(src[pos[12]:pos[15]+3], pos[12]); err != nil {
		t.Fatal(err)
	}
	wantIs(t, "Commit of a short transfer", tg.Commit(), store.ErrShort)
	if got := size(t, db.Path("c")); got != pos[15] {
		t.Fatalf("after a short Commit the file is %d bytes, want %d", got, pos[15])
	}
	// Abort keeps the good frames.
	tg, err = db.OpenTarget("c", seg)
	if err != nil || tg.Resume() != pos[15] {
		t.Fatalf("OpenTarget: %v, resume %d", err, tg.Resume())
	}
	if _, err := tg.File().WriteAt(src[pos[15]:pos[18]+1], pos[15]); err != nil {
		t.Fatal(err)
	}
	if err := tg.Abort(); err != nil {
		t.Fatal(err)
	}
	end, err := db.DurableEnd("c")
	if err != nil || end.Bytes != pos[18] || end.FileSize != pos[18] {
		t.Fatalf("after Abort: %+v, %v", end, err)
	}
	// A divergent copy (valid frames, other checksum) is cut to zero.
	other := segment("c", 0, 20)
	other.Checksum = meta.CRC32C(1)
	tg, err = db.OpenTarget("c", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.File().WriteAt(src[tg.Resume():], tg.Resume()); err != nil {
		t.Fatal(err)
	}
	wantIs(t, "Commit of a divergent copy", tg.Commit(), store.ErrCorrupt)
	if got := size(t, db.Path("c")); got != 0 {
		t.Fatalf("divergent copy cut to %d, want 0", got)
	}
}

func TestTargetWriteErrorLatches(t *testing.T) {
	src, seg := source(t, "c", 10)
	fsys := errorfs.Wrap(store.OSFS(), nil)
	db := open(t, t.TempDir(), store.Options{FS: fsys})
	tg, err := db.OpenTarget("c", seg)
	if err != nil {
		t.Fatal(err)
	}
	fsys.SetInjector(errorfs.OnIndex(0, syscall.ENOSPC, errorfs.Ops(errorfs.Write)))
	if _, err := tg.File().WriteAt(src, 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("WriteAt: %v", err)
	}
	wantIs(t, "Commit after a failed write", tg.Commit(), store.ErrLatched)
	wantIs(t, "LatchErr", db.LatchErr("c"), syscall.ENOSPC)
}

func TestConfirm(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	fill(t, db, "k", 0, 4)
	if _, err := db.Seal("k"); err != nil {
		t.Fatal(err)
	}
	fi, err := db.Identity("k")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Ino == 0 || fi.Size != segment("k", 0, 4).ByteSize+store.FooterSize {
		t.Fatalf("Identity = %+v", fi)
	}
	if ok, err := db.Confirmed("k", fi); err != nil || ok {
		t.Fatalf("Confirmed before Confirm = %v, %v", ok, err)
	}
	if err := db.Confirm("k", fi); err != nil {
		t.Fatal(err)
	}
	if ok, err := db.Confirmed("k", fi); err != nil || !ok {
		t.Fatalf("Confirmed = %v, %v", ok, err)
	}
	db.Close()
	db = open(t, dir, store.Options{})
	if ok, err := db.Confirmed("k", fi); err != nil || !ok {
		t.Fatalf("Confirmed after restart = %v, %v", ok, err)
	}
	// Replace the file with an identical one: another inode, not confirmed.
	b, err := os.ReadFile(db.Path("k"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := db.Path("k") + ".tmp"
	writeFile(t, tmp, b)
	if err := os.Rename(tmp, db.Path("k")); err != nil {
		t.Fatal(err)
	}
	fi2, err := db.Identity("k")
	if err != nil || fi2.Ino == fi.Ino {
		t.Fatalf("Identity of the replaced file = %+v, %v", fi2, err)
	}
	if ok, err := db.Confirmed("k", fi2); err != nil || ok {
		t.Fatalf("replaced file Confirmed = %v, %v", ok, err)
	}
	// Another size is not confirmed either.
	if ok, _ := db.Confirmed("k", store.FileIdentity{Dev: fi.Dev, Ino: fi.Ino, Size: fi.Size + 1}); ok {
		t.Fatal("a resized file is confirmed")
	}
	// A new confirmation replaces the old one; Delete drops it.
	if err := db.Confirm("k", fi2); err != nil {
		t.Fatal(err)
	}
	if ok, _ := db.Confirmed("k", fi); ok {
		t.Fatal("the old identity is still confirmed")
	}
	if err := db.Delete("k"); err != nil {
		t.Fatal(err)
	}
	fill(t, db, "k", 0, 1)
	if ok, _ := db.Confirmed("k", fi2); ok {
		t.Fatal("a confirmation survived Delete")
	}
}

func TestConcurrentCopies(t *testing.T) {
	db := open(t, t.TempDir(), store.Options{Preallocate: 1 << 16})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		id := meta.SegmentID(fmt.Sprintf("c%d", g))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := db.Create(id, 0); err != nil {
				t.Error(err)
				return
			}
			for i := 0; i < 200; i++ {
				if _, err := db.Append(id, payload(i)); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					if err := db.Sync(id); err != nil {
						t.Error(err)
					}
					if _, err := db.DurableEnd(id); err != nil {
						t.Error(err)
					}
				}
			}
			if _, err := db.Seal(id); err != nil {
				t.Error(err)
				return
			}
			if err := db.Verify(id, segment(id, 0, 200)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := db.List(); len(got) != 8 {
		t.Fatalf("List = %v", got)
	}
}

func TestClosed(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, db, "x", 0, 1)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = db.Append("x", []byte("y"))
	wantIs(t, "Append after Close", err, store.ErrClosed)
	wantIs(t, "Create after Close", db.Create("y", 0), store.ErrClosed)
}

func TestLargeFrames(t *testing.T) {
	// Frames larger than the scan buffer are streamed.
	db := open(t, t.TempDir(), store.Options{})
	if err := db.Create("big", 0); err != nil {
		t.Fatal(err)
	}
	var all []byte
	for i, n := range []int{3 << 20, 100, 2<<20 + 17, 5} {
		p := bytes.Repeat([]byte{byte(i + 1)}, n)
		if _, err := db.Append("big", p); err != nil {
			t.Fatal(err)
		}
		all = store.AppendFrame(all, uint64(i), p)
	}
	seal, err := db.Seal("big")
	if err != nil {
		t.Fatal(err)
	}
	seg := meta.Segment{ID: "big", Length: 4, ByteSize: int64(len(all)), Sealed: true, Checksum: meta.CRC32C(crc32.Checksum(all, castagnoli))}
	if seal.Checksum != seg.Checksum || seal.ByteSize != seg.ByteSize {
		t.Fatalf("Seal = %+v, want %+v", seal, seg)
	}
	if err := db.Verify("big", seg); err != nil {
		t.Fatal(err)
	}
	flipByte(t, db.Path("big"), 2<<20)
	var ce *store.CorruptError
	if err := db.Verify("big", seg); !errors.As(err, &ce) || ce.Offset != 0 {
		t.Fatalf("Verify of a damaged large frame: %v", err)
	}
}
