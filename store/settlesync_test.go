package store_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// traceFS is the OS file system with a trace of what is done to the
// handles of the files whose base name is name: "open h1", "datasync h1",
// "sync h1", "close h1" (h<n> numbers the handles in opening order).
type traceFS struct {
	store.FS
	name string
	mu   sync.Mutex
	n    int
	log  []string
}

func (fs *traceFS) note(format string, args ...any) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.log = append(fs.log, fmt.Sprintf(format, args...))
}

// take returns the trace so far and starts a new one.
func (fs *traceFS) take() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := fs.log
	fs.log = nil
	return out
}

func (fs *traceFS) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != fs.name {
		return f, err
	}
	fs.mu.Lock()
	fs.n++
	h := fmt.Sprintf("h%d", fs.n)
	fs.mu.Unlock()
	fs.note("open %s", h)
	return &traceFile{File: f, fs: fs, h: h}, nil
}

type traceFile struct {
	store.File
	fs *traceFS
	h  string
}

func (f *traceFile) Datasync() error { f.fs.note("datasync %s", f.h); return f.File.Datasync() }
func (f *traceFile) Sync() error     { f.fs.note("sync %s", f.h); return f.File.Sync() }
func (f *traceFile) Close() error    { f.fs.note("close %s", f.h); return f.File.Close() }

// The seed: "On a copy whose log is not yet sealed … when the log has an
// active segment, a data sync and a roll". Settle of the active copy
// syncs the data of the handle it appended through, once, before closing
// it (the roll); settling it again, with no active handle, syncs no data.
// Counted through the FS seam: a Settle that only set SyncedAndRolled
// would fail here.
func TestSettleOfActiveCopyDatasyncsBeforeTheRoll(t *testing.T) {
	const id = meta.SegmentID("active")
	fsys := &traceFS{FS: store.OSFS(), name: string(id) + ".seg"}
	db := open(t, t.TempDir(), store.Options{FS: fsys})
	if err := db.Create(id, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := db.Append(id, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	before := fsys.take()
	if len(before) == 0 || before[0] != "open h1" || slices.Contains(before, "close h1") {
		t.Fatalf("before Settle the trace is %q: want h1 opened for appends and still open", before)
	}
	res, err := db.Settle(id, segment(id, 0, 7))
	if err != nil || !res.SyncedAndRolled {
		t.Fatalf("Settle = %+v, %v", res, err)
	}
	got := fsys.take()
	count := func(ev string) int {
		n := 0
		for _, e := range got {
			if e == ev {
				n++
			}
		}
		return n
	}
	ds, cl := slices.Index(got, "datasync h1"), slices.Index(got, "close h1")
	if count("datasync h1") != 1 || ds < 0 || cl < ds {
		t.Fatalf("Settle of the active copy: trace %q: want one data sync of the appending handle h1 before it closes", got)
	}
	if _, err := db.Settle(id, segment(id, 0, 7)); err != nil {
		t.Fatal(err)
	}
	again := fsys.take()
	for _, e := range again {
		if len(e) > 8 && e[:8] == "datasync" {
			t.Fatalf("settling a settled copy synced its data: trace %q", again)
		}
	}
}
