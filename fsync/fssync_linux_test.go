//go:build linux

package fsync

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
)

// fsSyncer returns a syscall-engine Syncer whose directory batches of at
// least min directories use syncfs, with the page cache reported clean
// unless dirty says otherwise. It skips where the temporary directory is
// not on ext4 or XFS.
func fsSyncer(t *testing.T, min int) *Syncer {
	t.Helper()
	cfg := DefaultConfig()
	cfg.FilesystemSyncMin = min
	s := newSyncer(cfg, NewSyscall(), "test")
	t.Cleanup(func() { s.Close() })
	if s.fsSyncOff != "" {
		t.Skipf("filesystem syncs off: %s", s.fsSyncOff)
	}
	if !journaled(t.TempDir()) {
		t.Skip("the temporary directory is not on ext4 or XFS (TMPDIR on tmpfs?): syncfs is not used there")
	}
	s.dirty = func() (int64, error) { return 0, nil }
	return s
}

func dirRequests(d []string) []Request {
	reqs := make([]Request, len(d))
	for i := range d {
		reqs[i] = Request{Path: d[i], Dir: true}
	}
	return reqs
}

func TestFilesystemSyncCoversADirectoryBatch(t *testing.T) {
	s := fsSyncer(t, 16)
	d := dirs(t, 20)
	file := filepath.Join(d[0], "new.log")
	reqs := append(dirRequests(d),
		Request{Path: d[3], Dir: true}, // duplicate
		Request{Path: filepath.Join(d[1], "gone"), Dir: true},
		Request{Path: file, Dir: true}, // not a directory
		Request{Path: file, DataOnly: true},
	)
	errs := make([]error, len(reqs))
	if err := s.Sync(context.Background(), reqs, errs); err != nil {
		t.Fatal(err)
	}
	for i := range 21 {
		if errs[i] != nil {
			t.Fatalf("%s: %v", reqs[i].Path, errs[i])
		}
	}
	if !errors.Is(errs[21], syscall.ENOENT) || !errors.Is(errs[22], syscall.ENOTDIR) || errs[23] != nil {
		t.Fatalf("missing dir %v (want ENOENT), file as dir %v (want ENOTDIR), file %v (want nil)", errs[21], errs[22], errs[23])
	}
	st := s.Stats()
	if st.FilesystemSyncs != 1 || st.FilesystemSynced != 20 || st.Syncs != 1 {
		t.Fatalf("stats %+v: want one syncfs for the 20 directories and one fsync for the file", st)
	}
}

func TestFilesystemSyncBelowThresholdOrDirty(t *testing.T) {
	s := fsSyncer(t, 16)
	d := dirs(t, 16)
	errs := make([]error, 16)
	if err := s.Sync(context.Background(), dirRequests(d[:15]), errs); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.FilesystemSyncs != 0 || st.Syncs != 15 {
		t.Fatalf("15 directories, threshold 16: stats %+v, want 15 fsyncs", st)
	}
	for _, dirty := range []func() (int64, error){
		func() (int64, error) { return 1 << 40, nil },
		func() (int64, error) { return 0, errors.New("no meminfo") },
	} {
		s.dirty = dirty
		before := s.Stats()
		if err := s.Sync(context.Background(), dirRequests(d), errs); err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("%s: %v", d[i], e)
			}
		}
		if st := s.Stats(); st.FilesystemSyncs != before.FilesystemSyncs || st.Syncs != before.Syncs+16 {
			t.Fatalf("dirty page cache (or unknown): stats %+v after %+v, want 16 more fsyncs and no syncfs", st, before)
		}
	}
}

func TestKernelVersionAndDirtyBytes(t *testing.T) {
	for rel, want := range map[string][2]int{"6.18.44-fc-v1098": {6, 18}, "5.8.0": {5, 8}, "4.19": {4, 19}, "5.10.0-rc1+": {5, 10}} {
		maj, min, ok := kernelVersion(rel)
		if !ok || maj != want[0] || min != want[1] {
			t.Errorf("kernelVersion(%q) = %d, %d, %v", rel, maj, min, ok)
		}
	}
	for _, bad := range []string{"", "x.y", "6", "6.", ".5"} {
		if _, _, ok := kernelVersion(bad); ok {
			t.Errorf("kernelVersion(%q) ok", bad)
		}
	}
	n, err := dirtyBytes()
	if err != nil || n < 0 {
		t.Fatalf("dirtyBytes = %d, %v", n, err)
	}
}
