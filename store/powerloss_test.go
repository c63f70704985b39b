package store_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/store/crashfs"
)

// crashDir is a store directory on a new crash FS (crashfs.ForStore).
func crashDir(t testing.TB) (string, *crashfs.FS) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	fsys, err := crashfs.ForStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, fsys
}

// crashOpts are the options of a store on fsys: no free-space check unless
// the FS says how much is free.
func crashOpts(fsys store.FS) store.Options {
	return store.Options{FS: fsys, ConfirmMinFree: 1}
}

// reopen closes db (on the FS before the crash) and opens the store on
// after, the FS the crash left.
func reopen(t testing.TB, db *store.DB, dir string, after *crashfs.FS) *store.DB {
	t.Helper()
	db.Close()
	return open(t, dir, crashOpts(after))
}

// writeFooterUnsynced plays a process that wrote a copy's seal footer and
// died before its fsync: the footer is in the page cache only.
func writeFooterUnsynced(t testing.TB, fsys store.FS, path string, seg meta.Segment) {
	t.Helper()
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ft := store.Footer{StartOffset: seg.StartOffset, Length: seg.Length, ByteSize: seg.ByteSize}
	ft.FramesCRC, _ = seg.Checksum.Value()
	if _, err := f.WriteAt(store.AppendFooter(nil, ft), seg.ByteSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(seg.ByteSize + store.FooterSize); err != nil {
		t.Fatal(err)
	}
}

// A restarted process finds a footer that never reached the disk: Seal
// (of a copy found sealed), Settle (of a copy found settled) and Confirm
// must make it durable before they say sealed, settled or confirmed.
// Fails without the fsyncs of invariant 10: after the power loss the
// copy has no footer, yet it was reported sealed and confirmed.
func TestPowerLossRestartThenCrash(t *testing.T) {
	const id = meta.SegmentID("restart")
	seg := segment(id, 0, 5)
	for _, op := range []string{"seal", "settle", "settle batch", "confirm"} {
		t.Run(op, func(t *testing.T) {
			dir, fsys := crashDir(t)
			db := open(t, dir, crashOpts(fsys))
			fill(t, db, id, 0, 5)
			writeFooterUnsynced(t, fsys, db.Path(id), seg)
			db.Close()
			db = open(t, dir, crashOpts(fsys)) // the restart: the page cache is kept
			switch op {
			case "seal":
				if _, err := db.Seal(id); err != nil {
					t.Fatal(err)
				}
			case "settle":
				if _, err := db.Settle(id, seg); err != nil {
					t.Fatal(err)
				}
			case "settle batch":
				errs := []error{nil}
				if err := db.SettleBatch(t.Context(), []meta.Segment{seg}, make([]store.SettleResult, 1), errs); err != nil || errs[0] != nil {
					t.Fatal(err, errs[0])
				}
			}
			confirmCrashVerify(t, db, dir, fsys, seg, op+" reported the copy sealed and it was confirmed")
		})
	}
}

// confirmCrashVerify confirms the copy of seg as it is, loses the power,
// reopens the store and checks that the copy (what) is whole and its
// confirmation true.
func confirmCrashVerify(t *testing.T, db *store.DB, dir string, fsys *crashfs.FS, seg meta.Segment, what string) {
	t.Helper()
	fi, err := db.Identity(seg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Confirm(seg.ID, fi); err != nil {
		t.Fatal(err)
	}
	db = reopen(t, db, dir, fsys.Crash(nil))
	if err := db.Verify(seg.ID, seg); err != nil {
		t.Fatalf("%s; after a power loss: %v", what, err)
	}
	checkConfirmations(t, db, map[meta.SegmentID]meta.Segment{seg.ID: seg})
}

// checkConfirmations checks that every confirmation names a copy that is
// there, at that identity, and whole against its segment in segs.
func checkConfirmations(t testing.TB, db *store.DB, segs map[meta.SegmentID]meta.Segment) {
	t.Helper()
	if err := db.LoadConfirmations(); err != nil {
		t.Fatal(err)
	}
	held := map[meta.SegmentID]bool{}
	for _, id := range db.List() {
		held[id] = true
	}
	for id, seg := range segs {
		_, cfi, ok := db.ProbeFacts(id)
		if !ok {
			continue
		}
		if !held[id] {
			t.Errorf("%s: confirmed %+v, but the store holds no copy", id, cfi)
			continue
		}
		fi, err := db.Identity(id)
		if err != nil {
			t.Errorf("%s: confirmed %+v: %v", id, cfi, err)
			continue
		}
		if fi != cfi {
			continue // a confirmation of another file is no confirmation of this one
		}
		if err := db.Verify(id, seg); err != nil {
			t.Errorf("%s: confirmed as %+v, and the file is that one, but: %v", id, fi, err)
		}
	}
}

// A fsync that fails with EIO marks the footer's page clean (Linux): a
// reopen finds the copy whole in the page cache, and a plain fsync would
// write nothing. Settle after the reopen must reach the disk. Fails
// without rewriting the footer before the fsync.
func TestPowerLossSyncEIOThenReopen(t *testing.T) {
	const id = meta.SegmentID("eio")
	seg := segment(id, 0, 5)
	dir, fsys := crashDir(t)
	db := open(t, dir, crashOpts(fsys))
	fill(t, db, id, 0, 5)
	fsys.SetSyncError(func(string) error { return syscall.EIO })
	if _, err := db.Seal(id); !errors.Is(err, store.ErrLatched) {
		t.Fatalf("Seal with a failing fsync: %v, want %v", err, store.ErrLatched)
	}
	fsys.SetSyncError(nil)
	db.Close()
	db = open(t, dir, crashOpts(fsys))
	if _, err := db.Settle(id, seg); err != nil {
		t.Fatal(err)
	}
	confirmCrashVerify(t, db, dir, fsys, seg, "settled and confirmed after a fsync EIO and a reopen")
}

// Delete removes the confirmation before the file: on a disk too full for
// the confirmation store it deletes nothing, and its retry (the disk
// freed) deletes both. Fails with the old order: the file went first,
// the retry answered ErrUnknownCopy while the confirmation remained.
func TestDeleteUnconfirmsFirst(t *testing.T) {
	const id = meta.SegmentID("del")
	seg := segment(id, 0, 5)
	dir, fsys := crashDir(t)
	db := open(t, dir, crashOpts(fsys))
	fill(t, db, id, 0, 5)
	if _, err := db.Seal(id); err != nil {
		t.Fatal(err)
	}
	fi, err := db.Identity(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Confirm(id, fi); err != nil {
		t.Fatal(err)
	}
	fsys.SetFree(0)
	if err := db.Delete(id); !errors.Is(err, store.ErrConfirmState) {
		t.Fatalf("Delete on a full disk: %v, want %v", err, store.ErrConfirmState)
	}
	if _, _, ok := db.ProbeFacts(id); !ok {
		t.Fatal("the failed Delete forgot the confirmation")
	}
	if err := db.Verify(id, seg); err != nil {
		t.Fatalf("the failed Delete left the confirmed copy so: %v", err)
	}
	after := fsys.Crash(nil) // a power loss now
	fsys.SetFree(-1)
	after.SetFree(-1)
	if err := db.Delete(id); err != nil {
		t.Fatalf("Delete retried with space: %v", err)
	}
	if _, _, ok := db.ProbeFacts(id); ok {
		t.Fatal("deleted, yet still confirmed")
	}
	db = reopen(t, db, dir, after)
	checkConfirmations(t, db, map[meta.SegmentID]meta.Segment{id: seg})
}

// Open creates the store directory and makes its entry durable in its
// parent. Fails without: the power loss takes the whole store.
func TestOpenSyncsNewDirectoryParents(t *testing.T) {
	base, fsys := crashDir(t)
	dir := filepath.Join(base, "a", "b")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	db := open(t, dir, crashOpts(fsys))
	fill(t, db, "kept", 0, 3)
	if _, err := db.Seal("kept"); err != nil {
		t.Fatal(err)
	}
	db = reopen(t, db, dir, fsys.Crash(nil))
	if err := db.Verify("kept", segment("kept", 0, 3)); err != nil {
		t.Fatalf("a sealed copy of a store Open created, after a power loss: %v", err)
	}
}

// The migration from the single-directory layout loses no copy at a power
// loss at any of its changes: for every n, the power goes at the n-th
// change of Open's migration, and the Open after it finds every copy once,
// byte for byte, in its shard and not under its old name (the renames lost with their unsynced
// directories are done again). Over store/crashfs, where a rename synced
// in one directory only leaves the file under both names.
func TestPowerLossDuringMigration(t *testing.T) {
	for n := int64(0); ; n++ {
		dir, fsys := crashDir(t)
		want := makeV1Crash(t, fsys, dir)
		fsys.ArmCrash(n, nil)
		db, err := store.Open(dir, crashOpts(fsys))
		if err != nil {
			t.Fatalf("power lost at change %d: the migration itself: %v", n, err)
		}
		db.Close()
		after := fsys.Crashed()
		if after == nil {
			t.Logf("a migration of %d copies makes %d changes; power lost at each", len(v1Copies), n)
			return
		}
		db = open(t, dir, crashOpts(after))
		var ids []meta.SegmentID
		for _, c := range v1Copies {
			ids = append(ids, c.id)
			got := readCrashFile(t, after, db.Path(c.id))
			if !bytes.Equal(got, want[c.id]) {
				t.Fatalf("power lost at change %d: copy %s: %d bytes, want its %d", n, c.id, len(got), len(want[c.id]))
			}
			if _, err := after.Stat(filepath.Join(dir, "copies", string(c.id)+".seg")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("power lost at change %d: copy %s keeps its old name: %v", n, c.id, err)
			}
		}
		slices.Sort(ids)
		if got := db.List(); !slices.Equal(got, ids) {
			t.Fatalf("power lost at change %d: List = %v, want %v", n, got, ids)
		}
		db.Close()
	}
}

// makeV1Crash is makeV1 on a crash FS, every file and directory synced.
func makeV1Crash(t *testing.T, fsys *crashfs.FS, dir string) map[meta.SegmentID][]byte {
	t.Helper()
	copies := filepath.Join(dir, "copies")
	if err := fsys.MkdirAll(copies, 0o755); err != nil {
		t.Fatal(err)
	}
	out := map[meta.SegmentID][]byte{}
	for _, c := range v1Copies {
		b, pos := frames(0, c.frames)
		switch {
		case c.sealed:
			b = store.AppendFooter(b, store.Footer{Length: uint64(c.frames), ByteSize: int64(len(b)), FramesCRC: crc32c(b)})
		case c.torn:
			b = b[:pos[c.frames-1]+5]
		}
		f, err := fsys.OpenFile(filepath.Join(copies, string(c.id)+".seg"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(b, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		out[c.id] = b
	}
	for _, d := range []string{copies, dir} {
		if err := fsys.SyncDir(d); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func readCrashFile(t *testing.T, fsys store.FS, path string) []byte {
	t.Helper()
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && len(b) > 0 {
		t.Fatal(err)
	}
	return b
}
