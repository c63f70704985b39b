package catchup

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/loopdisk"
)

// loopExt4 formats a size-byte image as ext4, loop-mounts it
// (testbed/loopdisk) and returns the disk. Unmount and detach run at
// cleanup, even on failure.
func loopExt4(t *testing.T, size int64) *loopdisk.Disk {
	t.Helper()
	if why := loopdisk.Unavailable(); why != "" {
		t.Skipf("cannot loop-mount an ext4 image: %s", why)
	}
	dir := t.TempDir()
	d, err := loopdisk.Create(filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt"), size)
	if errors.Is(err, loopdisk.ErrNoDevice) {
		t.Skipf("losetup refused (no loop devices in this container?): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("closing the loop disk: %v", err)
		}
	})
	return d
}

// A target whose disk fills up mid-transfer reports ENOSPC and latches its
// copy; after a restart the copy is at its last valid frame, and resumes
// from there once space is freed.
func TestFaultTargetDiskFull(t *testing.T) {
	disk := loopExt4(t, 48<<20)
	mnt := disk.Dir
	fx := newStoreFixture(t, store.Options{}, filepath.Join(mnt, "broker"))
	seg, bounds := sealed(t, fx.src, "seg-full", 0, 400, 60000, 8) // ~12 MiB

	// Leave about 4 MiB free.
	filler := filepath.Join(mnt, "filler")
	if _, err := disk.Fill(filler, 4<<20); err != nil {
		t.Fatal(err)
	}

	res, err := fx.fetch(t, fx.addr, seg)
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
	res, err = fx.fetch(t, fx.addr, seg)
	if err != nil {
		t.Fatalf("fetch after freeing space: %v", err)
	}
	if res.From != end.Bytes {
		t.Fatalf("resumed at %d, want the durable end %d", res.From, end.Bytes)
	}
	fx.checkSame(t, seg)
}
