package errorfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/store/errorfs"
)

func TestOnIndexFailsOnlyTheNthMatchingOp(t *testing.T) {
	dir := t.TempDir()
	inj := errorfs.OnIndex(2, syscall.ENOSPC, errorfs.Ops(errorfs.Write), errorfs.PathMatch("*.seg"))
	fsys := errorfs.Wrap(store.OSFS(), inj)
	seg, err := fsys.OpenFile(filepath.Join(dir, "a.seg"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	other, err := fsys.OpenFile(filepath.Join(dir, "b.log"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for i := 0; i < 5; i++ {
		if _, err := other.WriteAt([]byte("x"), int64(i)); err != nil {
			t.Fatalf("write to an unmatched path: %v", err)
		}
	}
	for i := 0; i < 5; i++ {
		_, err := seg.WriteAt([]byte("y"), int64(i))
		if i == 2 {
			var pe *os.PathError
			if !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &pe) || pe.Op != "write" {
				t.Fatalf("write #2: %v, want an *os.PathError wrapping ENOSPC", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("write #%d: %v", i, err)
		}
	}
	if inj.Seen() != 5 || inj.Injected() != 1 {
		t.Fatalf("seen %d injected %d", inj.Seen(), inj.Injected())
	}
	// The failed write had no effect.
	b, _ := os.ReadFile(filepath.Join(dir, "a.seg"))
	if string(b) != "yy\x00yy" {
		t.Fatalf("file holds %q", b)
	}
	if err := seg.Sync(); err != nil {
		t.Fatalf("sync is not selected: %v", err)
	}
}

func TestFromIndexIsSticky(t *testing.T) {
	dir := t.TempDir()
	inj := errorfs.FromIndex(1, nil, errorfs.Ops(errorfs.Sync, errorfs.Truncate))
	fsys := errorfs.Wrap(store.OSFS(), inj)
	f, err := fsys.OpenFile(filepath.Join(dir, "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, op := range []func() error{f.Datasync, func() error { return f.Truncate(10) }, f.Sync} {
		if err := op(); !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("op after the index: %v, want ErrInjected", err)
		}
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != 0 {
		t.Fatalf("the failed truncate changed the file: %v %v", fi, err)
	}
	fsys.SetInjector(nil)
	if err := f.Truncate(10); err != nil {
		t.Fatalf("after SetInjector(nil): %v", err)
	}
	if a, ok := f.(store.Allocator); !ok {
		t.Fatal("errorfs file is not an Allocator")
	} else if err := a.Allocate(0, 4096); err != nil {
		t.Fatal(err)
	}
	if fi, _ := f.Stat(); fi.Size() != 4096 {
		t.Fatalf("Allocate grew the file to %d, want 4096", fi.Size())
	}
}

func TestDirOps(t *testing.T) {
	dir := t.TempDir()
	fsys := errorfs.Wrap(store.OSFS(), errorfs.Always(syscall.EIO, errorfs.Ops(errorfs.SyncDir, errorfs.Open)))
	if err := fsys.SyncDir(dir); !errors.Is(err, syscall.EIO) {
		t.Fatalf("SyncDir: %v", err)
	}
	if _, err := fsys.OpenFile(filepath.Join(dir, "x"), os.O_CREATE|os.O_RDWR, 0o644); !errors.Is(err, syscall.EIO) {
		t.Fatalf("OpenFile: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatalf("a failed open created the file: %v", err)
	}
	if err := fsys.MkdirAll(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if ents, err := fsys.ReadDir(dir); err != nil || len(ents) != 1 {
		t.Fatalf("ReadDir = %v, %v", ents, err)
	}
}
