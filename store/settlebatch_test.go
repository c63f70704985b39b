package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// A settle of a copy this process sealed (or settled), which a stat finds
// unchanged, opens nothing; settling it to another segment reads it; one
// that was written to since (its bytes now run past the sealed size) is
// opened, read and cut as before.
func TestSettleOfUnchangedCopyOnlyStats(t *testing.T) {
	const id = meta.SegmentID("marked")
	fsys := &traceFS{FS: store.OSFS(), name: string(id) + ".seg"}
	db := open(t, t.TempDir(), store.Options{FS: fsys})
	fill(t, db, id, 0, 7)
	if _, err := db.Seal(id); err != nil {
		t.Fatal(err)
	}
	seg := segment(id, 0, 7)
	fsys.take()
	res, err := db.Settle(id, seg)
	if err != nil || res.BytesCut != 0 || res.FooterWritten || res.End.Bytes != seg.ByteSize {
		t.Fatalf("Settle of a settled copy = %+v, %v", res, err)
	}
	if got := fsys.take(); len(got) != 0 {
		t.Fatalf("Settle of an unchanged settled copy touched its file: trace %q", got)
	}
	// Another segment (a different checksum) is not answered from the mark.
	other := seg
	other.Checksum = meta.CRC32C(12345)
	if _, err := db.Settle(id, other); !errors.Is(err, store.ErrSealConflict) {
		t.Fatalf("Settle to a segment with another checksum = %v, want ErrSealConflict (read from the copy's footer)", err)
	}
	if got := fsys.take(); len(got) == 0 || got[0][:5] != "open " {
		t.Fatalf("Settle to another segment did not read the copy: trace %q", got)
	}
	f, err := os.OpenFile(db.Path(id), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("overrun!!!")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res, err = db.Settle(id, seg)
	if err != nil || res.BytesCut != 10 {
		t.Fatalf("Settle after 10 bytes were appended behind the store's back = %+v, %v: want 10 bytes cut", res, err)
	}
}

// countingSyncer records the SyncDirs calls and fails the directories in
// fail; SyncDir (the creates') counts its calls while batch is set. While
// hang is set, SyncDirs answers nothing before its caller stops waiting
// and returns the context's error, as fsync.Syncer does.
type countingSyncer struct {
	mu     sync.Mutex
	calls  [][]string
	fail   map[string]error
	batch  bool
	hang   bool
	single int
}

func (s *countingSyncer) SyncDir(ctx context.Context, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.batch {
		s.single++
	}
	return nil
}

func (s *countingSyncer) SyncDirs(ctx context.Context, dirs []string, errs []error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hang {
		<-ctx.Done()
		return fmt.Errorf("fsync: waiting for %d syncs: %w", len(dirs), ctx.Err())
	}
	s.calls = append(s.calls, slices.Clone(dirs))
	for i, d := range dirs {
		errs[i] = s.fail[d]
	}
	return nil
}

// SettleBatch syncs every distinct shard directory of the batch in one
// SyncDirs call; a copy whose shard's sync failed is latched, the others
// are settled and usable.
func TestSettleBatchSyncsShardsOnceAndLatchesOnFailure(t *testing.T) {
	syncer := &countingSyncer{}
	dir := t.TempDir()
	db := open(t, dir, store.Options{DirSyncer: syncer})
	var segs []meta.Segment
	shards := map[string]bool{}
	for i := range 12 {
		id := meta.SegmentID(fmt.Sprintf("b-%02d", i))
		fill(t, db, id, 0, 7)
		segs = append(segs, segment(id, 0, 7))
		shards[filepath.Dir(db.Path(id))] = true
	}
	bad := filepath.Dir(db.Path(segs[0].ID))
	syncer.fail = map[string]error{bad: errors.New("injected EIO")}
	syncer.batch = true
	results := make([]store.SettleResult, len(segs))
	errs := make([]error, len(segs))
	if err := db.SettleBatch(context.Background(), segs, results, errs); err != nil {
		t.Fatal(err)
	}
	if len(syncer.calls) != 1 || len(syncer.calls[0]) != len(shards) || syncer.single != 0 {
		t.Fatalf("SyncDirs calls %q and %d SyncDir calls: want one SyncDirs with the %d distinct shard directories", syncer.calls, syncer.single, len(shards))
	}
	for i, s := range segs {
		inBad := filepath.Dir(db.Path(s.ID)) == bad
		switch {
		case inBad && !errors.Is(errs[i], store.ErrLatched):
			t.Errorf("%s (shard sync failed): err %v, want ErrLatched", s.ID, errs[i])
		case !inBad && (errs[i] != nil || results[i].End.Bytes != s.ByteSize):
			t.Errorf("%s: %+v, %v", s.ID, results[i], errs[i])
		}
		if inBad != (db.LatchErr(s.ID) != nil) {
			t.Errorf("%s: latched %v, want %v", s.ID, db.LatchErr(s.ID), inBad)
		}
	}
	if err := db.SettleBatch(context.Background(), segs, results[:1], errs); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("SettleBatch with a short results slice = %v, want ErrInvalid", err)
	}
}

// A settle batch whose directory syncs its caller stopped waiting for (the
// request was cancelled) latches no copy: it returns the context's error,
// and the next batch settles the same copies and syncs their directories.
func TestSettleBatchLatchesNothingWhenItsSyncsGoUnanswered(t *testing.T) {
	syncer := &countingSyncer{hang: true}
	db := open(t, t.TempDir(), store.Options{DirSyncer: syncer})
	var segs []meta.Segment
	for i := range 4 {
		id := meta.SegmentID(fmt.Sprintf("u-%02d", i))
		fill(t, db, id, 0, 5)
		segs = append(segs, segment(id, 0, 5))
	}
	results := make([]store.SettleResult, len(segs))
	errs := make([]error, len(segs))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := db.SettleBatch(ctx, segs, results, errs); !errors.Is(err, context.Canceled) {
		t.Fatalf("SettleBatch with its syncs unanswered = %v, want context.Canceled", err)
	}
	for _, s := range segs {
		if err := db.LatchErr(s.ID); err != nil {
			t.Fatalf("%s latched by a cancelled settle: %v", s.ID, err)
		}
	}
	// Its directory entry was never made durable: a seal syncs it.
	syncer.hang, syncer.batch = false, true
	if _, err := db.Seal(segs[0].ID); err != nil {
		t.Fatal(err)
	}
	if syncer.single != 1 {
		t.Fatalf("a seal after the cancelled settle synced %d directories, want 1 (the settle's sync went unanswered)", syncer.single)
	}
	if err := db.SettleBatch(context.Background(), segs, results, errs); err != nil {
		t.Fatal(err)
	}
	for i, s := range segs {
		if errs[i] != nil || results[i].End.Bytes != s.ByteSize {
			t.Fatalf("%s settled again: %+v, %v", s.ID, results[i], errs[i])
		}
	}
	if len(syncer.calls) != 1 {
		t.Fatalf("the second settle made %d SyncDirs calls, want 1 (the directories synced again)", len(syncer.calls))
	}
}

// ConfirmBatch confirms the copies it can take with one write and fails
// the others alone: an unknown copy, a segment named twice.
func TestConfirmBatch(t *testing.T) {
	db := open(t, t.TempDir(), store.Options{})
	var fis []store.FileIdentity
	for _, id := range []meta.SegmentID{"a", "b"} {
		fill(t, db, id, 0, 3)
		if _, err := db.Seal(id); err != nil {
			t.Fatal(err)
		}
		fi, err := db.Identity(id)
		if err != nil {
			t.Fatal(err)
		}
		fis = append(fis, fi)
	}
	ids := []meta.SegmentID{"b", "a", "nope", "a"}
	in := []store.FileIdentity{fis[1], fis[0], fis[0], fis[0]}
	errs := make([]error, len(ids))
	if err := db.ConfirmBatch(ids, in, errs); err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || !errors.Is(errs[2], store.ErrUnknownCopy) || (errs[1] == nil) == (errs[3] == nil) {
		t.Fatalf("errors %v: want b and one a confirmed, nope unknown, the other a refused as named twice", errs)
	}
	for i, id := range []meta.SegmentID{"a", "b"} {
		if ok, err := db.Confirmed(id, fis[i]); !ok || err != nil {
			t.Errorf("Confirmed(%s) = %v, %v after the batch", id, ok, err)
		}
	}
	if err := db.ConfirmBatch(ids, in[:1], errs); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("ConfirmBatch with one identity for four ids = %v, want ErrInvalid", err)
	}
}
