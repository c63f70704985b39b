package harness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/store"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/loopdisk"
)

// mountsHold reports whether /proc/self/mounts lists dir as a mount point.
func mountsHold(t *testing.T, dir string) bool {
	t.Helper()
	ok, err := loopdisk.IsMountPoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func losetupAll(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("losetup", "-a").CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -a: %v: %s", err, out)
	}
	return string(out)
}

// TestFaultClusterCopiesDisk: the cluster mounts a broker's copies disk (before
// start, or under existing copies by moving them), and Stop unmounts and
// detaches it.
func TestFaultClusterCopiesDisk(t *testing.T) {
	if why := loopdisk.Unavailable(); why != "" {
		t.Skip(why)
	}
	c, err := New(Config{Root: t.TempDir(), Brokers: 2, RF: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	b1, b2 := c.Brokers()[0], c.Brokers()[1]

	// Before start: an empty copies directory gets the disk.
	if err := c.MountCopiesDisk(b1, 16<<20); err != nil {
		if strings.Contains(err.Error(), "losetup") {
			t.Skipf("no loop device here: %v", err)
		}
		t.Fatal(err)
	}
	dir1 := b1.CopiesDir()
	if !mountsHold(t, dir1) || c.loopBroker != b1 {
		t.Fatalf("%s not mounted (loop broker %v)", dir1, c.loopBroker)
	}
	c.Stop()
	if mountsHold(t, dir1) || strings.Contains(losetupAll(t), b1.CopiesImage()) || c.loop != nil || c.LoopCloseErr() != nil {
		t.Fatalf("after Stop: mounted %v, losetup -a:\n%s\nclose error %v", mountsHold(t, dir1), losetupAll(t), c.LoopCloseErr())
	}

	// Existing copies are moved onto a new disk; the old files stay hidden
	// under the mount point.
	dir2 := b2.CopiesDir()
	if err := os.MkdirAll(dir2, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s-00001.seg", "s-00002.seg"} {
		p := store.CopyPath(b2.Dir, meta.SegmentID(strings.TrimSuffix(name, ".seg")))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("copy "+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, n, err := c.MoveCopiesToDisk(b2, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if files != 2 || n != int64(2*len("copy s-00001.seg")) || !mountsHold(t, dir2) {
		t.Fatalf("moved %d files, %d bytes, mounted %v; want 2 files, both bytes, mounted", files, n, mountsHold(t, dir2))
	}
	if got, err := os.ReadFile(store.CopyPath(b2.Dir, "s-00002")); err != nil || string(got) != "copy s-00002.seg" {
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
	if mountsHold(t, dir2) || strings.Contains(losetupAll(t), b2.CopiesImage()) {
		t.Fatalf("after Stop: %s mounted or its image attached:\n%s", dir2, losetupAll(t))
	}
	if got, err := os.ReadFile(store.CopyPath(b2.Dir, "s-00001")); err != nil || string(got) != "copy s-00001.seg" {
		t.Fatalf("after unmounting, the original copy reads %q, %v", got, err)
	}
}

// TestFaultClusterStartsOnCopiesDisk starts real brokers with broker 1's copies
// on a loop disk mounted before it starts (lost+found and all): the store
// opens it, copies land on it, and Stop leaves no mount or loop device.
func TestFaultClusterStartsOnCopiesDisk(t *testing.T) {
	if why := loopdisk.Unavailable(); why != "" {
		t.Skip(why)
	}
	malachid := malachidBinary(t)
	c, err := New(Config{Bin: malachid, Root: t.TempDir(), Brokers: 3, RF: 3,
		Tick: 200 * time.Millisecond, Grace: time.Second, Raft: DemoRaft(time.Second), LoopBroker: 1, LoopBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if c.LoopSkip() != "" {
		t.Skipf("no loop disk: %s", c.LoopSkip())
	}
	b1 := c.Broker(1)
	dir := b1.CopiesDir()
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
	lc := c.Broker(leader).Client
	var on1 meta.SegmentID
	for i, deadline := 0, time.Now().Add(30*time.Second); on1 == "" && time.Now().Before(deadline); i++ {
		if _, err := lc.Load(ctx, admin.LoadRequest{Segments: 1, RecordsPerSegment: 4, RecordSize: 100, Prefix: "t", First: i, Concurrency: 1}); err != nil {
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
	if fi, err := os.Stat(mustCopyPath(t, b1, on1)); err != nil || fi.Size() == 0 {
		t.Fatalf("copy %s on broker 1's loop disk: %v", on1, err)
	}
	copies, err := b1.Client.Copies(ctx)
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
	if err := c.UnexpectedExit(); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	if mountsHold(t, dir) || strings.Contains(losetupAll(t), b1.CopiesImage()) || c.LoopCloseErr() != nil {
		t.Fatalf("after Stop: mounted %v, close error %v, losetup -a:\n%s", mountsHold(t, dir), c.LoopCloseErr(), losetupAll(t))
	}
}
