package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// TestFaultLoopDisk mounts a loop ext4, fills it, makes it read-only under an
// open file, recovers it (unmount, e2fsck, mount), and checks that Close
// leaves no mount (/proc/mounts) and no loop device (losetup -a).
func TestFaultLoopDisk(t *testing.T) {
	if why := loopUnavailable(); why != "" {
		t.Skip(why)
	}
	root := t.TempDir()
	img, dir := filepath.Join(root, "copies.img"), filepath.Join(root, "data", "copies")
	if _, err := mountLoop(img, dir, 32<<20+512); err == nil || !strings.Contains(err.Error(), "whole number of MiB") {
		t.Fatalf("mountLoop of 32 MiB + 512 B: %v, want a refusal naming the size", err)
	}
	if _, err := os.Stat(img); !errors.Is(err, os.ErrNotExist) || strings.Contains(losetupAll(t), img) {
		t.Fatalf("a refused mountLoop left %s behind (stat: %v)", img, err)
	}
	l, err := mountLoop(img, dir, 32<<20)
	if err != nil {
		if strings.Contains(err.Error(), "losetup") {
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
		t.Fatalf("%s not mounted after mountLoop", dir)
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
		t.Fatalf("losetup -a still lists the demo's device after Close:\n%s", all)
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

// TestFaultClusterCopiesDisk: the cluster mounts a broker's copies disk (before
// start, or under existing copies by moving them), and Stop unmounts and
// detaches it.
func TestFaultClusterCopiesDisk(t *testing.T) {
	if why := loopUnavailable(); why != "" {
		t.Skip(why)
	}
	c, err := newCluster(clusterConfig{Root: t.TempDir(), Brokers: 2, RF: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	b1, b2 := c.brokers[0], c.brokers[1]

	// Before start: an empty copies directory gets the disk.
	if err := c.mountCopiesDisk(b1, 16<<20); err != nil {
		if strings.Contains(err.Error(), "losetup") {
			t.Skipf("no loop device here: %v", err)
		}
		t.Fatal(err)
	}
	dir1 := filepath.Join(b1.Dir, "copies")
	if !mountsHold(t, dir1) || c.loopBroker != b1 {
		t.Fatalf("%s not mounted (loop broker %v)", dir1, c.loopBroker)
	}
	c.Stop()
	if mountsHold(t, dir1) || strings.Contains(losetupAll(t), b1.copiesImage()) || c.loop != nil || c.loopCloseErr != nil {
		t.Fatalf("after Stop: mounted %v, losetup -a:\n%s\nclose error %v", mountsHold(t, dir1), losetupAll(t), c.loopCloseErr)
	}

	// Existing copies are moved onto a new disk; the old files stay hidden
	// under the mount point.
	dir2 := filepath.Join(b2.Dir, "copies")
	if err := os.MkdirAll(dir2, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s-00001.seg", "s-00002.seg"} {
		if err := os.WriteFile(filepath.Join(dir2, name), []byte("copy "+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, n, err := c.moveCopiesToDisk(b2, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if files != 2 || n != int64(2*len("copy s-00001.seg")) || !mountsHold(t, dir2) {
		t.Fatalf("moved %d files, %d bytes, mounted %v; want 2 files, both bytes, mounted", files, n, mountsHold(t, dir2))
	}
	if got, err := os.ReadFile(filepath.Join(dir2, "s-00002.seg")); err != nil || string(got) != "copy s-00002.seg" {
		t.Fatalf("moved copy reads %q, %v", got, err)
	}
	var st1, st2 syscall.Stat_t
	if err := syscall.Stat(dir2, &st1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(b2.Dir, &st2); err != nil {
		t.Fatal(err)
	}
	if st1.Dev == st2.Dev {
		t.Fatalf("%s is on the data directory's device: the move did not mount over it", dir2)
	}
	c.Stop()
	if mountsHold(t, dir2) || strings.Contains(losetupAll(t), b2.copiesImage()) {
		t.Fatalf("after Stop: %s mounted or its image attached:\n%s", dir2, losetupAll(t))
	}
	if got, err := os.ReadFile(filepath.Join(dir2, "s-00001.seg")); err != nil || string(got) != "copy s-00001.seg" {
		t.Fatalf("after unmounting, the original copy reads %q, %v", got, err)
	}
}

// TestFaultClusterStartsOnCopiesDisk starts real brokers with broker 1's copies
// on a loop disk mounted before it starts (lost+found and all): the store
// opens it, copies land on it, and Stop leaves no mount or loop device.
func TestFaultClusterStartsOnCopiesDisk(t *testing.T) {
	if why := loopUnavailable(); why != "" {
		t.Skip(why)
	}
	malachid, _ := binaries(t)
	c, err := newCluster(clusterConfig{Bin: malachid, Root: t.TempDir(), Brokers: 3, RF: 3,
		Tick: 200 * time.Millisecond, Grace: time.Second, RaftTimeout: time.Second, LoopBroker: 1, LoopBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if c.loopSkip != "" {
		t.Skipf("no loop disk: %s", c.loopSkip)
	}
	b1 := c.broker(1)
	dir := filepath.Join(b1.Dir, "copies")
	if !mountsHold(t, dir) {
		t.Fatalf("%s not mounted after Start", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "lost+found")); err != nil {
		t.Fatalf("lost+found: %v (the test wants the store to face it)", err)
	}
	ctx := context.Background()
	leader, err := c.WaitReady(ctx, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Load one segment at a time until one is placed on broker 1 (the
	// leader places only on brokers it heard from lately).
	lc := c.broker(leader).client
	var on1 meta.SegmentID
	for i, deadline := 0, time.Now().Add(30*time.Second); on1 == "" && time.Now().Before(deadline); i++ {
		if _, err := lc.Load(ctx, loadRequest{Segments: 1, RecordsPerSegment: 4, RecordSize: 100, Prefix: "t", First: i, Concurrency: 1}); err != nil {
			t.Logf("load t-%05d: %v", i, err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		snap, err := lc.Metadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range snap.Segments {
			if s.Sealed && s.HasReplica(1) {
				on1 = s.ID
			}
		}
	}
	if on1 == "" {
		t.Fatal("no segment was placed on broker 1 within 30s")
	}
	if fi, err := os.Stat(b1.copyPath(on1)); err != nil || fi.Size() == 0 {
		t.Fatalf("copy %s on broker 1's loop disk: %v", on1, err)
	}
	copies, err := b1.client.Copies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range copies {
		if !strings.HasPrefix(string(cp.ID), "t-") {
			t.Errorf("broker 1 lists a copy %q that is not a segment it holds (lost+found?)", cp.ID)
		}
	}
	if len(copies) == 0 {
		t.Errorf("broker 1 lists no copies, want %s", on1)
	}
	if err := c.unexpectedExit(); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	if mountsHold(t, dir) || strings.Contains(losetupAll(t), b1.copiesImage()) || c.loopCloseErr != nil {
		t.Fatalf("after Stop: mounted %v, close error %v, losetup -a:\n%s", mountsHold(t, dir), c.loopCloseErr, losetupAll(t))
	}
}
