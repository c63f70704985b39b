package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/store/errorfs"
)

// shardDir is the shard directory the store of dir keeps the copy of id in.
func shardDir(dir string, id meta.SegmentID) string {
	return filepath.Join(dir, "copies", store.ShardName(store.Shard(id)))
}

// dirSyncs records the directories synced through the FS seam.
type dirSyncs struct {
	mu    sync.Mutex
	paths []string
}

func (d *dirSyncs) MaybeError(op errorfs.Op) error {
	if op.Kind == errorfs.SyncDir {
		d.mu.Lock()
		d.paths = append(d.paths, op.Path)
		d.mu.Unlock()
	}
	return nil
}

func (d *dirSyncs) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.paths
	d.paths = nil
	return p
}

func TestShardIsFNV1aLow8Bits(t *testing.T) {
	// FNV-1a 32 of "a" is 0xe40c292c, of "" the offset basis 0x811c9dc5
	// (published test vectors); the shard is the low byte.
	for id, want := range map[meta.SegmentID]int{"a": 0x2c, "": 0xc5} {
		if got := store.Shard(id); got != want {
			t.Errorf("Shard(%q) = %#x, want %#x", id, got, want)
		}
	}
	if got := store.CopyPath("/d", "a"); got != "/d/copies/2c/a.seg" {
		t.Errorf("CopyPath = %s", got)
	}
}

// TestDirSyncsHitTheCopysShard counts directory syncs through the FS seam:
// Create, Seal, Settle and Delete each sync exactly the copy's own shard
// directory, once; with a DirSyncer, the same directory goes to it.
func TestDirSyncsHitTheCopysShard(t *testing.T) {
	dir := t.TempDir()
	rec := &dirSyncs{}
	db := open(t, dir, store.Options{FS: errorfs.Wrap(store.OSFS(), rec)})
	rec.take()
	ids := []meta.SegmentID{"a", "b", "seg-00017", "zz"}
	for _, id := range ids {
		want := []string{shardDir(dir, id)}
		if err := db.Create(id, 0); err != nil {
			t.Fatal(err)
		}
		if got := rec.take(); !equal(got, want) {
			t.Fatalf("Create(%s) synced %v, want %v", id, got, want)
		}
		for i := range 3 {
			if _, err := db.Append(id, payload(i)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Seal(id); err != nil {
			t.Fatal(err)
		}
		if got := rec.take(); !equal(got, want) {
			t.Fatalf("Seal(%s) synced %v, want %v", id, got, want)
		}
		if _, err := db.Settle(id, segment(id, 0, 3)); err != nil {
			t.Fatal(err)
		}
		if got := rec.take(); !equal(got, want) {
			t.Fatalf("Settle(%s) synced %v, want %v", id, got, want)
		}
	}
	if err := db.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.take(), []string{shardDir(dir, "a")}; !equal(got, want) {
		t.Fatalf("Delete(a) synced %v, want %v", got, want)
	}

	cs := &pathSyncer{}
	db2 := open(t, t.TempDir(), store.Options{DirSyncer: cs})
	fill(t, db2, "x", 0, 2)
	if _, err := db2.Settle("x", segment("x", 0, 2)); err != nil {
		t.Fatal(err)
	}
	want := filepath.Dir(db2.Path("x"))
	if got := cs.take(); !equal(got, []string{want, want}) {
		t.Fatalf("Create+Settle through the DirSyncer synced %v, want %s twice", got, want)
	}
}

type pathSyncer struct{ dirSyncs }

func (p *pathSyncer) SyncDir(_ context.Context, path string) error {
	p.MaybeError(errorfs.Op{Kind: errorfs.SyncDir, Path: path})
	return store.OSFS().SyncDir(path)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type nopSyncer struct{}

func (nopSyncer) SyncDir(context.Context, string) error { return nil }

// TestShardSpread: 12,800 copies named as the admin API names them leave no
// directory with more than twice the mean (copies/256) entries.
func TestShardSpread(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 12,800 files")
	}
	dir := t.TempDir()
	db := open(t, dir, store.Options{DirSyncer: nopSyncer{}})
	const n = 12800
	for i := range n {
		if err := db.Create(meta.SegmentID(fmt.Sprintf("seg-%05d", i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	limit := n / store.Shards * 2
	top, err := os.ReadDir(filepath.Join(dir, "copies"))
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != store.Shards {
		t.Fatalf("copies/ holds %d entries, want the %d shards", len(top), store.Shards)
	}
	total, most := 0, 0
	for _, e := range top {
		ents, err := os.ReadDir(filepath.Join(dir, "copies", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		total += len(ents)
		most = max(most, len(ents))
		if len(ents) > limit {
			t.Errorf("shard %s holds %d entries, more than %d", e.Name(), len(ents), limit)
		}
	}
	if total != n {
		t.Fatalf("shards hold %d files, want %d", total, n)
	}
	t.Logf("%d copies: largest shard %d entries (mean %d)", n, most, n/store.Shards)
	db = open(t, dir, store.Options{})
	if got := len(db.List()); got != n {
		t.Fatalf("reopened store lists %d copies, want %d", got, n)
	}
}

// v1Copy is one copy of the old-layout fixture and what it must read as.
type v1Copy struct {
	id     meta.SegmentID
	frames int
	sealed bool
	torn   bool // a partial backfill: cut inside a frame
}

var v1Copies = []v1Copy{
	{id: "s1", frames: 5, sealed: true},
	{id: "s2", frames: 9, sealed: true},
	{id: "seg-00042", frames: 3, sealed: true},
	{id: "active", frames: 4},
	{id: "partial", frames: 7, torn: true},
	{id: "empty"},
}

// makeV1 writes a store of the single-directory layout (format 1: no
// FORMAT file, every copy in copies/<id>.seg) holding v1Copies, plus two
// files the store never owned: a temporary file and a name that is no
// segment id. It returns the copies' bytes.
func makeV1(t testing.TB, dir string) map[meta.SegmentID][]byte {
	t.Helper()
	out := map[meta.SegmentID][]byte{}
	for _, c := range v1Copies {
		b, pos := frames(0, c.frames)
		switch {
		case c.sealed:
			ft := store.Footer{StartOffset: 0, Length: uint64(c.frames), ByteSize: int64(len(b)), FramesCRC: crc32c(b)}
			b = store.AppendFooter(b, ft)
		case c.torn:
			b = b[:pos[c.frames-1]+5]
		}
		writeFile(t, filepath.Join(dir, "copies", string(c.id)+".seg"), b)
		out[c.id] = b
	}
	writeFile(t, filepath.Join(dir, "copies", "s1.seg.tmp"), []byte("not a copy"))
	writeFile(t, filepath.Join(dir, "copies", ".hidden.seg"), []byte("no segment id"))
	return out
}

// checkMigrated opens dir and checks that it holds exactly v1Copies, each
// once, byte for byte, in its shard, that nothing of them is left in
// copies/, and that the foreign files are untouched.
func checkMigrated(t *testing.T, dir string, want map[meta.SegmentID][]byte) {
	t.Helper()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db.Close()
	var ids []string
	for _, id := range db.List() {
		ids = append(ids, string(id))
	}
	if got := strings.Join(ids, ","); got != "active,empty,partial,s1,s2,seg-00042" {
		t.Fatalf("List = %s", got)
	}
	for _, c := range v1Copies {
		b, err := os.ReadFile(db.Path(c.id))
		if err != nil || !bytes.Equal(b, want[c.id]) {
			t.Fatalf("copy %s at %s: %d bytes, err %v; want its %d bytes", c.id, db.Path(c.id), len(b), err, len(want[c.id]))
		}
		if _, err := os.Stat(filepath.Join(dir, "copies", string(c.id)+".seg")); !os.IsNotExist(err) {
			t.Fatalf("copy %s still has its old name: %v", c.id, err)
		}
		if c.sealed {
			if err := db.Verify(c.id, segment(c.id, 0, c.frames)); err != nil {
				t.Fatalf("Verify(%s): %v", c.id, err)
			}
		}
	}
	end, err := db.DurableEnd("partial")
	if _, pos := frames(0, 7); err != nil || end.Frames != 6 || end.Bytes != pos[6] {
		t.Fatalf("partial copy: durable end %+v, %v; want 6 frames", end, err)
	}
	if _, err := db.Append("active", payload(4)); err != nil {
		t.Fatalf("Append to the migrated active copy: %v", err)
	}
	for _, f := range []string{"s1.seg.tmp", ".hidden.seg"} {
		if _, err := os.Stat(filepath.Join(dir, "copies", f)); err != nil {
			t.Fatalf("foreign file %s: %v", f, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "FORMAT"))
	if err != nil || string(b) != "malachi store format 2\n" {
		t.Fatalf("FORMAT: %q, %v", b, err)
	}
}

func TestMigrateSingleDirectoryLayout(t *testing.T) {
	dir := t.TempDir()
	want := makeV1(t, dir)
	// A confirmation is keyed by inode: the migration's renames keep it.
	db := open(t, dir, store.Options{})
	fi, err := db.Identity("s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Confirm("s1", fi); err != nil {
		t.Fatal(err)
	}
	db.Close()
	checkMigrated(t, dir, want)
	db = open(t, dir, store.Options{})
	if ok, err := db.Confirmed("s1", fi); !ok || err != nil {
		t.Fatalf("confirmation lost across the migration: %v %v", ok, err)
	}
}

// TestMigrateCrashAtEveryStep stops the migration at each of its steps
// (an error injected into the k-th operation that changes the disk, and
// at the first and last of the shard creations; nothing after it runs, as
// in a crash) and checks that the next Open completes it and loses
// nothing.
func TestMigrateCrashAtEveryStep(t *testing.T) {
	mutating := errorfs.Ops(errorfs.MkdirAll, errorfs.Rename, errorfs.Remove, errorfs.SyncDir,
		errorfs.Open, errorfs.Write, errorfs.Sync, errorfs.Close)
	// A dry run lists the steps.
	var kinds []errorfs.Kind
	dry := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if mutating(op) {
			kinds = append(kinds, op.Kind)
		}
		return nil
	})
	dir := t.TempDir()
	makeV1(t, dir)
	db, err := store.Open(dir, store.Options{FS: errorfs.Wrap(store.OSFS(), dry)})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	counts := map[errorfs.Kind]int{}
	for _, k := range kinds {
		counts[k]++
	}
	t.Logf("a migration of %d copies takes %d steps: %v", len(v1Copies), len(kinds), counts)
	if counts[errorfs.Rename] != len(v1Copies)+1 {
		t.Fatalf("%d renames, want one per copy and FORMAT's", counts[errorfs.Rename])
	}
	crashes := 0
	for k, kind := range kinds {
		if kind == errorfs.MkdirAll && k > 1 && k < store.Shards {
			continue // the shard creations in the middle are alike
		}
		crashes++
		dir := t.TempDir()
		want := makeV1(t, dir)
		inj := errorfs.OnIndex(k, syscall.EIO, mutating)
		_, err := store.Open(dir, store.Options{FS: errorfs.Wrap(store.OSFS(), inj)})
		if err == nil {
			t.Fatalf("step %d (%v): Open succeeded through the injected error", k, kind)
		}
		checkMigrated(t, dir, want)
	}
	t.Logf("%d crash points checked", crashes)
}

// TestMigrateOneFileTwoNames: a rename cut between its link and its unlink
// leaves a copy under both names; it is one copy, and the old name goes.
func TestMigrateOneFileTwoNames(t *testing.T) {
	dir := t.TempDir()
	want := makeV1(t, dir)
	old := filepath.Join(dir, "copies", "s2.seg")
	if err := os.MkdirAll(shardDir(dir, "s2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(old, store.CopyPath(dir, "s2")); err != nil {
		t.Fatal(err)
	}
	checkMigrated(t, dir, want)
}

func TestRefuseNewerFormat(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	fill(t, db, "a", 0, 2)
	db.Close()
	writeFile(t, filepath.Join(dir, "FORMAT"), []byte("malachi store format 3\n"))
	_, err := store.Open(dir, store.Options{})
	wantIs(t, "Open of a newer format", err, store.ErrFormat)
	if msg := err.Error(); !strings.Contains(msg, "format 3") || !strings.Contains(msg, "format 2") {
		t.Fatalf("refusal %q does not name both versions", msg)
	}
	if _, err := os.Stat(copyPath(dir, "a")); err != nil {
		t.Fatalf("refused store changed: %v", err)
	}
	for _, bad := range []string{"", "malachi store format x\n", "something else\n"} {
		writeFile(t, filepath.Join(dir, "FORMAT"), []byte(bad))
		_, err := store.Open(dir, store.Options{})
		wantIs(t, fmt.Sprintf("Open with FORMAT %q", bad), err, store.ErrFormat)
	}
}

// TestStatDirs stats copies relative to the descriptors OpenStatDirs
// opens, checks ProbeFacts, that neither Target nor ProbeFacts allocates,
// that a missing shard directory answers "no such file", that a directory
// mounted (here: renamed) over a shard after Open is the one the next
// batch sees, and that a closed DB opens nothing.
func TestStatDirs(t *testing.T) {
	dir := t.TempDir()
	fsys := errorfs.Wrap(store.OSFS(), nil)
	db := open(t, dir, store.Options{FS: fsys})
	for _, id := range []meta.SegmentID{"a", "b", "c"} {
		fill(t, db, id, 0, 3)
		if _, err := db.Settle(id, segment(id, 0, 3)); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := db.Identity("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Confirm("a", fi); err != nil {
		t.Fatal(err)
	}
	fsys.SetInjector(errorfs.Always(syscall.EIO, errorfs.Ops(errorfs.Read), errorfs.PathMatch("b.seg")))
	wantIs(t, "Verify b", db.Verify("b", segment("b", 0, 3)), store.ErrLatched)
	var d store.StatDirs
	if fd, _, _ := d.Target("a"); fd != -1 {
		t.Fatalf("Target of an unopened StatDirs: %d, want -1", fd)
	}
	if err := db.OpenStatDirs(&d); err != nil {
		t.Fatal(err)
	}
	for _, id := range []meta.SegmentID{"a", "b", "c"} {
		fd, name, suffix := d.Target(id)
		got, err := statAt(fd, name+suffix)
		if err != nil {
			t.Fatalf("stat of %s at its shard's descriptor: %v", id, err)
		}
		if want, _ := db.Identity(id); id != "b" && got != want {
			t.Fatalf("stat of %s at its shard's descriptor: %+v, Identity %+v", id, got, want)
		}
		latch, conf, ok := db.ProbeFacts(id)
		switch id {
		case "a":
			if latch != nil || !ok || conf != fi {
				t.Fatalf("ProbeFacts(a) = %v %+v %v, want confirmed %+v", latch, conf, ok, fi)
			}
		case "b":
			if !errors.Is(latch, store.ErrLatched) || !errors.Is(latch, syscall.EIO) || ok {
				t.Fatalf("ProbeFacts(b) = %v %+v %v, want the EIO latch", latch, conf, ok)
			}
		case "c":
			if latch != nil || ok {
				t.Fatalf("ProbeFacts(c) = %v %+v %v, want nothing", latch, conf, ok)
			}
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, id := range []meta.SegmentID{"a", "b", "c", "unknown"} {
			d.Target(id)
			db.ProbeFacts(id)
		}
	})
	if allocs != 0 {
		t.Fatalf("Target+ProbeFacts allocate %v times per run, want 0", allocs)
	}
	d.Close()
	if allocs := testing.AllocsPerRun(20, func() {
		if err := db.OpenStatDirs(&d); err != nil {
			t.Fatal(err)
		}
		d.Close()
	}); allocs != 0 {
		t.Fatalf("OpenStatDirs+Close of %d directories allocate %v times, want 0", store.Shards+1, allocs)
	}
	if err := db.OpenStatDirs(&d); err != nil {
		t.Fatal(err)
	}
	if err := db.Delete("b"); err != nil {
		t.Fatal(err)
	}
	if latch, _, _ := db.ProbeFacts("b"); latch != nil {
		t.Fatalf("ProbeFacts of a deleted latched copy: %v, want no latch", latch)
	}
	d.Close()
	// Replace a's shard by an empty directory, as a disk mounted over it
	// would: the next batch sees the new, empty one.
	shard := filepath.Dir(db.Path("a"))
	if err := os.Rename(shard, shard+".old"); err != nil {
		t.Fatal(err)
	}
	for _, missing := range []bool{true, false} {
		if !missing {
			if err := os.Mkdir(shard, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.OpenStatDirs(&d); err != nil {
			t.Fatal(err)
		}
		fd, name, suffix := d.Target("a")
		if _, err := statAt(fd, name+suffix); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("stat of a with its shard directory replaced (missing %v): %v, want ENOENT", missing, err)
		}
		d.Close()
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	wantIs(t, "OpenStatDirs after Close", db.OpenStatDirs(&d), store.ErrClosed)
	if fd, _, _ := d.Target("a"); fd != -1 {
		t.Fatalf("Target after a failed OpenStatDirs: %d, want -1", fd)
	}
}

// TestLoadConfirmations: ProbeFacts answers confirmations only once they
// are loaded, and then from memory.
func TestLoadConfirmations(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, store.Options{})
	fill(t, db, "a", 0, 3)
	fi, err := db.Identity("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Confirm("a", fi); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = open(t, dir, store.Options{})
	if _, _, ok := db.ProbeFacts("a"); ok {
		t.Fatal("ProbeFacts answered confirmed before the confirmations were loaded")
	}
	if err := db.LoadConfirmations(); err != nil {
		t.Fatal(err)
	}
	if _, got, ok := db.ProbeFacts("a"); !ok || got != fi {
		t.Fatalf("ProbeFacts(a) after LoadConfirmations: %+v %v, want %+v", got, ok, fi)
	}
}
