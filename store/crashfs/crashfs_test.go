package crashfs_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/store/crashfs"
)

func write(t *testing.T, f *crashfs.FS, name, data string, sync bool) {
	t.Helper()
	h, err := f.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.WriteAt([]byte(data), 0); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

// read returns name's bytes, or "<gone>".
func read(t *testing.T, f *crashfs.FS, name string) string {
	t.Helper()
	h, err := f.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "<gone>"
	}
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	b := make([]byte, 64)
	n, err := h.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return string(b[:n])
}

// What a crash keeps (the package doc's invariants 1-3), one case each.
func TestCrashKeepsOnlyWhatWasSynced(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(t *testing.T, f *crashfs.FS)
		want map[string]string
	}{
		{"file synced, directory not", func(t *testing.T, f *crashfs.FS) { write(t, f, "/r/a", "x", true) },
			map[string]string{"/r/a": "<gone>"}},
		{"directory synced, file not", func(t *testing.T, f *crashfs.FS) {
			write(t, f, "/r/a", "x", false)
			f.SyncDir("/r")
		}, map[string]string{"/r/a": ""}},
		{"both synced, then overwritten", func(t *testing.T, f *crashfs.FS) {
			write(t, f, "/r/a", "old", true)
			f.SyncDir("/r")
			write(t, f, "/r/a", "new", false)
		}, map[string]string{"/r/a": "old"}},
		{"removed without a directory sync", func(t *testing.T, f *crashfs.FS) {
			write(t, f, "/r/a", "x", true)
			f.SyncDir("/r")
			f.Remove("/r/a")
		}, map[string]string{"/r/a": "x"}},
		{"renamed across directories, the new one synced only", func(t *testing.T, f *crashfs.FS) {
			f.MkdirAll("/r/d", 0o755)
			write(t, f, "/r/a", "x", true)
			f.SyncDir("/r")
			f.Rename("/r/a", "/r/d/b")
			f.SyncDir("/r/d")
		}, map[string]string{"/r/a": "x", "/r/d/b": "x"}},
		{"mkdir without syncing its parent", func(t *testing.T, f *crashfs.FS) {
			f.MkdirAll("/r/d", 0o755)
			write(t, f, "/r/d/a", "x", true)
			f.SyncDir("/r/d")
		}, map[string]string{"/r/d/a": "<gone>"}},
		{"fsync EIO, then a successful fsync", func(t *testing.T, f *crashfs.FS) {
			write(t, f, "/r/a", "aaaa", true)
			f.SyncDir("/r")
			f.SetSyncError(func(string) error { return syscall.EIO })
			h, _ := f.OpenFile("/r/a", os.O_RDWR, 0)
			h.WriteAt([]byte("bbbb"), 0)
			if err := h.Sync(); !errors.Is(err, syscall.EIO) {
				t.Fatalf("sync: %v, want EIO", err)
			}
			f.SetSyncError(nil)
			h.WriteAt([]byte("c"), 3) // written again: this byte reaches the disk
			h.Sync()
			h.Close()
			if got := read(t, f, "/r/a"); got != "bbbc" {
				t.Fatalf("the page cache reads %q, want bbbc", got)
			}
		}, map[string]string{"/r/a": "aaac"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := crashfs.New("/r")
			c.do(t, f)
			after := f.Crash(nil)
			for name, want := range c.want {
				if got := read(t, after, name); got != want {
					t.Errorf("%s after the crash: %q, want %q", name, got, want)
				}
			}
		})
	}
}

// With an rng a file not synced is kept, lost or torn: a torn file is a
// prefix of what it held over what was synced.
func TestCrashWithRNGTearsUnsyncedBytes(t *testing.T) {
	seen := map[string]bool{}
	for seed := range uint64(200) {
		f := crashfs.New("/r")
		write(t, f, "/r/a", "00000000", true)
		f.SyncDir("/r")
		write(t, f, "/r/a", "11111111", false)
		got := read(t, f.Crash(rand.New(rand.NewPCG(seed, 1))), "/r/a")
		i := bytes.IndexByte([]byte(got+"0"), '0')
		if len(got) != 8 || got[:i] != "11111111"[:i] || got[i:] != "00000000"[i:] {
			t.Fatalf("seed %d: %q is neither what was synced, nor what is there, nor a prefix of one over the other", seed, got)
		}
		seen[got] = true
	}
	if !seen["00000000"] || !seen["11111111"] || len(seen) < 4 {
		t.Fatalf("outcomes over 200 seeds: %v: want kept, lost and torn ones", seen)
	}
}

// ArmCrash captures the state at the n-th change while the FS goes on.
func TestArmCrashCapturesTheNthChange(t *testing.T) {
	f := crashfs.New("/r")
	f.ArmCrash(2, nil)
	write(t, f, "/r/a", "x", true) // change 0: create, 1: write, 2: sync
	f.SyncDir("/r")
	after := f.Crashed()
	if after == nil || f.Steps() != 4 {
		t.Fatalf("Crashed %v after %d changes", after, f.Steps())
	}
	if got := read(t, after, "/r/a"); got != "<gone>" {
		t.Fatalf("the power went before the sync: %q", got)
	}
	if got := read(t, f, "/r/a"); got != "x" {
		t.Fatalf("the FS went on: %q", got)
	}
}
