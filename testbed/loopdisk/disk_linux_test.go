//go:build linux

package loopdisk

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFaultDisk mounts a loop ext4, fills it, makes it read-only under an
// open file, recovers it (unmount, e2fsck, mount), and checks that Close
// leaves no mount (/proc/mounts) and no loop device (losetup -a).
func TestFaultDisk(t *testing.T) {
	if why := Unavailable(); why != "" {
		t.Skip(why)
	}
	root := t.TempDir()
	img, dir := filepath.Join(root, "copies.img"), filepath.Join(root, "data", "copies")
	if _, err := Create(img, dir, 32<<20+512); err == nil || !strings.Contains(err.Error(), "whole number of MiB") {
		t.Fatalf("Create of 32 MiB + 512 B: %v, want a refusal naming the size", err)
	}
	if _, err := os.Stat(img); !errors.Is(err, os.ErrNotExist) || strings.Contains(losetupAll(t), img) {
		t.Fatalf("a refused Create left %s behind (stat: %v)", img, err)
	}
	l, err := Create(img, dir, 32<<20)
	if err != nil {
		if errors.Is(err, ErrNoDevice) {
			t.Skipf("no loop device here: %v", err)
		}
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			l.Close()
		}
	})
	if !l.Mounted() || !mountsHold(t, dir) {
		t.Fatalf("%s not mounted after Create", dir)
	}
	if !strings.Contains(losetupAll(t), img) {
		t.Fatalf("losetup -a does not list %s", img)
	}

	// A synced copy on the disk survives what follows (an unsynced one
	// would not: the ext4 error aborts the journal).
	copyPath := filepath.Join(dir, "s-00001.seg")
	want := []byte("frames of a copy")
	if err := os.WriteFile(copyPath, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syncFile(copyPath); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(dir); err != nil {
		t.Fatal(err)
	}

	// Fill: less than leave + 64 KiB free, and a write of 1 MiB fails ENOSPC.
	const leave = 16 << 10
	n, err := l.Fill(filepath.Join(dir, "filler"), leave)
	if err != nil {
		t.Fatal(err)
	}
	free, err := l.Free()
	if err != nil {
		t.Fatal(err)
	}
	if n < 16<<20 || free >= leave+64<<10 {
		t.Fatalf("Fill allocated %d bytes and left %d free; want most of 32 MiB allocated and under %d free", n, free, leave+64<<10)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 1<<20), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 1 MiB to the full disk: %v, want ENOSPC", err)
	}
	os.Remove(big)
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	if free, _ := l.Free(); free < 16<<20 {
		t.Fatalf("after removing the filler %d bytes free, want most of 32 MiB", free)
	}

	// Read-only under a file open for writing (a plain remount is EBUSY).
	open, err := os.OpenFile(filepath.Join(dir, "active.seg"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	how, err := l.GoReadOnly()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read-only by %s", how)
	if _, err := open.Write([]byte("x")); err == nil {
		if err = open.Sync(); err == nil {
			t.Fatalf("a write and sync on the read-only file system succeeded")
		}
	}
	open.Close()
	if err := os.WriteFile(filepath.Join(dir, "new.seg"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("creating a file on the read-only file system: %v, want EROFS", err)
	}
	if got, err := os.ReadFile(copyPath); err != nil || string(got) != string(want) {
		t.Fatalf("the copy on the read-only disk reads %q, %v; want %q", got, err, want)
	}

	// The operator's recovery: unmount, e2fsck -y, mount; writable again.
	if err := l.Unmount(); err != nil {
		t.Fatal(err)
	}
	if mountsHold(t, dir) {
		t.Fatalf("%s still in /proc/mounts after Unmount", dir)
	}
	if out, err := l.Fsck(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := l.Mount(); err != nil {
		t.Fatal(err)
	}
	if ro, err := l.ReadOnly(); err != nil || ro {
		t.Fatalf("after e2fsck and mount: read-only %v, %v", ro, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "new.seg"), []byte("x"), 0o644); err != nil {
		t.Fatalf("writing after the recovery: %v", err)
	}
	if got, err := os.ReadFile(copyPath); err != nil || string(got) != string(want) {
		t.Fatalf("the copy after the recovery reads %q, %v; want %q", got, err, want)
	}

	// Close: no mount, no loop device, no image.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if mountsHold(t, dir) {
		t.Fatalf("%s still in /proc/mounts after Close", dir)
	}
	if all := losetupAll(t); strings.Contains(all, img) || strings.Contains(all, l.Dev+":") {
		t.Fatalf("losetup -a still lists the disk's device after Close:\n%s", all)
	}
	if _, err := os.Stat(img); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("image %s after Close: %v, want it removed", img, err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func mountsHold(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && unescapeMount(f[1]) == dir {
			return true
		}
	}
	return false
}

func losetupAll(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("losetup", "-a").CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -a: %v: %s", err, out)
	}
	return string(out)
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/a":             "/tmp/a",
		`/tmp/a\040b`:        "/tmp/a b",
		`/tmp/tab\011x\134y`: "/tmp/tab\tx\\y",
		`/tmp/odd\04`:        `/tmp/odd\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// TestIsMountPoint: the root is a mount point, a fresh temporary
// directory is not.
func TestIsMountPoint(t *testing.T) {
	if ok, err := IsMountPoint("/"); err != nil || !ok {
		t.Fatalf("IsMountPoint(/) = %v, %v; want true", ok, err)
	}
	if ok, err := IsMountPoint(t.TempDir()); err != nil || ok {
		t.Fatalf("IsMountPoint(a new temporary directory) = %v, %v; want false", ok, err)
	}
}
