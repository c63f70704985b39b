package catchup

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/store/crashfs"
)

// A backfill's commit survives a power loss at every change it makes:
// the power is lost at the n-th change of one transfer into StoreSink
// (open, writes of 4 KiB, commit), for every n. After each, the store
// reopened holds the copy whole when Commit had returned before the
// power went, and otherwise a copy a new transfer resumes and commits
// whole; never a copy that verifies short or corrupt once committed.
// Over store/crashfs (unsynced bytes and entries lost).
func TestCommitSurvivesPowerLossAtEveryStep(t *testing.T) {
	src, seg := sealedSource(t)
	total := int64(-1)
	for n := int64(0); total < 0 || n <= total; n++ {
		dir := filepath.Join(t.TempDir(), "dst")
		fsys, err := crashfs.ForStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		opts := store.Options{FS: fsys, ConfirmMinFree: 1}
		db, err := store.Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		fsys.ArmCrash(n, nil)
		if err := transfer(StoreSink{DB: db}, seg, src); err != nil {
			t.Fatalf("crash at change %d: the transfer: %v", n, err)
		}
		after := fsys.Crashed()
		committed := after == nil
		if committed {
			total = fsys.Steps() // every change made: the loop ends at the last one
			after = fsys.Crash(nil)
		}
		db.Close()
		opts.FS = after
		if db, err = store.Open(dir, opts); err != nil {
			t.Fatalf("crash at change %d: reopen: %v", n, err)
		}
		if !committed {
			if err := transfer(StoreSink{DB: db}, seg, src); err != nil {
				t.Fatalf("crash at change %d before the commit returned: the transfer again: %v", n, err)
			}
		}
		if err := db.Verify(seg.ID, seg); err != nil {
			t.Fatalf("crash at change %d (committed before it: %v): %v", n, committed, err)
		}
		db.Close()
	}
	if total < 3 {
		t.Fatalf("only %d changes in a transfer: the loop proved little", total)
	}
}

// sealedSource is a sealed copy's bytes and its segment.
func sealedSource(t *testing.T) ([]byte, meta.Segment) {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const id = meta.SegmentID("bf")
	if err := db.Create(id, 50); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := db.Append(id, []byte(fmt.Sprintf("record %03d %0300d", i, i))); err != nil {
			t.Fatal(err)
		}
	}
	s, err := db.Seal(id)
	if err != nil {
		t.Fatal(err)
	}
	seg := meta.Segment{ID: id, StartOffset: s.StartOffset, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum, Sealed: true, Replicas: []meta.BrokerID{1}}
	b := make([]byte, s.ByteSize+store.FooterSize)
	if _, err := db.ReadAt(id, b, 0); err != nil {
		t.Fatal(err)
	}
	return b, seg
}

// transfer writes src into the sink's target for seg from its resume
// point, in 4 KiB writes as a transfer does, and commits.
func transfer(sink StoreSink, seg meta.Segment, src []byte) error {
	tg, err := sink.OpenTarget(seg)
	if err != nil {
		return err
	}
	for off := tg.Resume(); off < tg.Size(); off += 4096 {
		end := min(off+4096, tg.Size())
		if _, err := tg.File().WriteAt(src[off:end], off); err != nil {
			return err
		}
	}
	return tg.Commit()
}
