package catchup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/store"
	"golang.org/x/sys/unix"
)

// loopExt4 formats a size-byte image as ext4, loop-mounts it and returns
// the mount point. Unmount and detach run at cleanup, even on failure.
func loopExt4(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to loop-mount an ext4 image")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: cannot loop-mount an ext4 image", tool)
		}
	}
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	f.Close()
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("losetup refused (no loop devices in this container?): %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	run("mkfs.ext4", "-q", "-F", "-m", "0", dev)
	run("mount", "-t", "ext4", dev, mnt)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			exec.Command("umount", "-l", mnt).Run()
		}
	})
	return mnt
}

// A target whose disk fills up mid-transfer reports ENOSPC and latches its
// copy; after a restart the copy is at its last valid frame, and resumes
// from there once space is freed.
func TestFaultTargetDiskFull(t *testing.T) {
	mnt := loopExt4(t, 48<<20)
	fx := newStoreFixture(t, store.Options{}, filepath.Join(mnt, "broker"))
	seg, bounds := sealed(t, fx.src, "seg-full", 0, 400, 60000, 8) // ~12 MiB

	// Leave about 4 MiB free.
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	filler := filepath.Join(mnt, "filler")
	ff, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(ff.Fd()), 0, 0, free-4<<20); err != nil {
		t.Fatal(err)
	}
	ff.Close()

	res, err := fx.fetch(fx.addr, seg)
	if !errors.Is(err, ErrTarget) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fetch onto a full disk: %v, want %v wrapping ENOSPC", err, ErrTarget)
	}
	// The failed write latched the copy, whichever path wrote it (splice
	// or WriteAt): heal replaces a latched copy elsewhere instead of
	// retrying the full disk forever. A restart (a new Open) clears it.
	if lerr := fx.dst.LatchErr(seg.ID); !errors.Is(lerr, store.ErrLatched) || !errors.Is(lerr, syscall.ENOSPC) {
		t.Fatalf("after ENOSPC (fetch: %v) the copy's latch is %v, want %v wrapping ENOSPC", err, lerr, store.ErrLatched)
	}
	if err := fx.dst.Close(); err != nil {
		t.Fatal(err)
	}
	fx.dst = openDB(t, filepath.Join(mnt, "broker"), store.Options{})
	end, err := fx.dst.DurableEnd(seg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if end.Bytes <= 0 || end.Bytes >= seg.ByteSize || end.FileSize != end.Bytes || floorBoundary(bounds, end.Bytes) != end.Bytes {
		t.Fatalf("after ENOSPC (received %d): target at %+v, want a frame boundary inside the copy", res.Received, end)
	}
	t.Logf("ENOSPC after %d bytes; copy left at its frame boundary %d", res.Received, end.Bytes)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	res, err = fx.fetch(fx.addr, seg)
	if err != nil {
		t.Fatalf("fetch after freeing space: %v", err)
	}
	if res.From != end.Bytes {
		t.Fatalf("resumed at %d, want the durable end %d", res.From, end.Bytes)
	}
	fx.checkSame(t, seg)
}
