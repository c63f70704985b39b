package store_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/loopdisk"
)

// The fault tests run the store on a small ext4 file system on a loop
// device (testbed/loopdisk) that each test makes, fills and breaks. They
// need root and losetup, mkfs.ext4, mount and umount.

type ext4 struct {
	*loopdisk.Disk
}

// mkExt4 makes an ext4 image of sizeMB MiB, attaches it to a loop device and
// mounts it with errors=remount-ro. Cleanup unmounts and detaches it even
// when the test fails.
func mkExt4(t *testing.T, sizeMB int) *ext4 {
	t.Helper()
	if why := loopdisk.Unavailable(); why != "" {
		t.Skipf("fault test: %s", why)
	}
	tmp := t.TempDir()
	d, err := loopdisk.Create(filepath.Join(tmp, "disk.img"), filepath.Join(tmp, "mnt"), int64(sizeMB)<<20)
	if errors.Is(err, loopdisk.ErrNoDevice) {
		t.Skipf("no loop device available: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("closing the loop disk: %v", err)
		}
	})
	return &ext4{d}
}

// remount unmounts, runs e2fsck -f -y and mounts again, so that what the
// test reads next comes from the disk, not the page cache.
func (e *ext4) remount(t *testing.T) {
	t.Helper()
	if err := e.Unmount(); err != nil {
		t.Fatal(err)
	}
	if out, err := e.Fsck(); err != nil {
		t.Logf("%v\n%s", err, out)
	}
	if err := e.Mount(); err != nil {
		t.Fatal(err)
	}
}

// goReadOnly turns the mounted file system read-only under open files, as
// a real disk error does with errors=remount-ro (loopdisk.Disk.GoReadOnly).
func (e *ext4) goReadOnly(t *testing.T) (how string) {
	t.Helper()
	how, err := e.GoReadOnly()
	if err != nil {
		t.Skipf("cannot make the file system read-only: %v", err)
	}
	return how
}

// fillDisk writes a filler file until the file system is full.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 64 << 10, 4096, 512, 1} {
		b := make([]byte, chunk)
		for {
			if _, err := f.Write(b); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("filling the disk: %v", err)
				}
				break
			}
		}
	}
	f.Sync()
	return path
}

// checkFrames asserts that the copy's file on disk starts with the frames
// of the payloads [0, n) from offset 0, and returns its durable end.
func checkAcked(t *testing.T, db *store.DB, id meta.SegmentID, n int, pay func(int) []byte) store.End {
	t.Helper()
	end, err := db.DurableEnd(id)
	if err != nil {
		t.Fatalf("DurableEnd after the fault: %v", err)
	}
	if end.NextOffset < uint64(n) {
		t.Fatalf("acknowledged frame lost: durable end %+v, %d frames were acknowledged", end, n)
	}
	var want []byte
	for i := 0; i < n; i++ {
		want = store.AppendFrame(want, uint64(i), pay(i))
	}
	got := make([]byte, len(want))
	f, err := os.Open(db.Path(id))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatalf("reading the acknowledged frames: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("acknowledged frames differ on disk")
	}
	return end
}

func bigPayload(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 64<<10-store.FrameHeaderSize) }

func TestFaultENOSPCDuringAppend(t *testing.T) {
	for _, pre := range []int64{0, 1 << 20} {
		name := "no-preallocation"
		if pre > 0 {
			name = "preallocation"
		}
		t.Run(name, func(t *testing.T) {
			e := mkExt4(t, 16)
			dir := filepath.Join(e.Dir, "db")
			db := open(t, dir, store.Options{Preallocate: pre})
			const id = meta.SegmentID("full")
			if err := db.Create(id, 0); err != nil {
				t.Fatal(err)
			}
			acked := 0
			var ferr error
			for i := 0; i < 1000 && ferr == nil; i++ {
				if _, ferr = db.Append(id, bigPayload(i)); ferr != nil {
					break
				}
				if i%4 == 3 {
					if ferr = db.Sync(id); ferr == nil {
						acked = i + 1
					}
				}
			}
			if ferr == nil {
				t.Fatal("the disk never filled up")
			}
			t.Logf("disk full after %d acknowledged frames: %v", acked, ferr)
			wantIs(t, "the failing request", ferr, syscall.ENOSPC)
			wantIs(t, "the failing request", ferr, store.ErrLatched)
			wantIs(t, "LatchErr", db.LatchErr(id), syscall.ENOSPC)
			_, err := db.Append(id, []byte("x"))
			wantIs(t, "Append after the latch", err, store.ErrLatched)
			wantIs(t, "Sync after the latch", db.Sync(id), store.ErrLatched)
			if acked == 0 {
				t.Fatal("no frame was acknowledged before the disk filled")
			}
			db.Close()
			e.remount(t)
			db = open(t, dir, store.Options{Preallocate: pre})
			if err := db.LatchErr(id); err != nil {
				t.Fatalf("latched after restart: %v", err)
			}
			end := checkAcked(t, db, id, acked, bigPayload)
			t.Logf("after restart: %+v", end)
		})
	}
}

func TestFaultENOSPCDuringSettle(t *testing.T) {
	e := mkExt4(t, 16)
	dir := filepath.Join(e.Dir, "db")
	db := open(t, dir, store.Options{})
	const id = meta.SegmentID("settle")
	if err := db.Create(id, 0); err != nil {
		t.Fatal(err)
	}
	// Frames of exactly one block each: the footer needs a new block.
	pay := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 4096-store.FrameHeaderSize) }
	const n = 100
	var frames []byte
	for i := 0; i < n; i++ {
		if _, err := db.Append(id, pay(i)); err != nil {
			t.Fatal(err)
		}
		frames = store.AppendFrame(frames, uint64(i), pay(i))
	}
	if err := db.Sync(id); err != nil {
		t.Fatal(err)
	}
	seg := meta.Segment{ID: id, Length: n, ByteSize: int64(len(frames)), Sealed: true, Checksum: meta.CRC32C(crc32c(frames))}
	filler := fillDisk(t, e.Dir)
	res, err := db.Settle(id, seg)
	if err == nil {
		t.Fatalf("Settle on a full disk succeeded: %+v", res)
	}
	t.Logf("Settle on a full disk: %v", err)
	wantIs(t, "Settle", err, syscall.ENOSPC)
	wantIs(t, "Settle", err, store.ErrLatched)
	_, err = db.Settle(id, seg)
	wantIs(t, "Settle again", err, store.ErrLatched)
	wantIs(t, "Verify", db.Verify(id, seg), store.ErrLatched)
	db.Close()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e.remount(t)
	db = open(t, dir, store.Options{})
	checkAcked(t, db, id, n, pay)
	res, err = db.Settle(id, seg)
	if err != nil || !res.FooterWritten {
		t.Fatalf("Settle after restart with space: %+v, %v", res, err)
	}
	if err := db.Verify(id, seg); err != nil {
		t.Fatal(err)
	}
}

func TestFaultReadOnlyUnderLiveCopy(t *testing.T) {
	for _, active := range []bool{false, true} {
		name := "idle-copy"
		if active {
			name = "active-copy"
		}
		t.Run(name, func(t *testing.T) {
			e := mkExt4(t, 16)
			dir := filepath.Join(e.Dir, "db")
			// Pebble keeps its WAL open for writing, which alone would make
			// `mount -o remount,ro` busy: its confirmations live elsewhere.
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(t.TempDir(), filepath.Join(dir, "confirm")); err != nil {
				t.Fatal(err)
			}
			db := open(t, dir, store.Options{Preallocate: 256 << 10})
			const id = meta.SegmentID("live")
			fill(t, db, id, 0, 50)
			acked := 50
			if !active {
				// A follower's unsealed copy between requests: no open file.
				db.Close()
				db = open(t, dir, store.Options{Preallocate: 256 << 10})
				if _, err := db.DurableEnd(id); err != nil {
					t.Fatal(err)
				}
			} else {
				// Written but not acknowledged.
				if _, err := db.Append(id, payload(50)); err != nil {
					t.Fatal(err)
				}
			}
			how := e.goReadOnly(t)
			t.Logf("read-only by %s", how)
			var err error
			if active {
				if _, err = db.Append(id, payload(51)); err == nil {
					err = db.Sync(id)
				}
			} else {
				_, err = db.Append(id, payload(50))
			}
			if err == nil {
				t.Fatal("the store wrote to a read-only file system")
			}
			t.Logf("first request on the read-only file system: %v", err)
			wantIs(t, "request", err, store.ErrLatched)
			wantIs(t, "request", err, syscall.EROFS)
			for op, err := range map[string]error{
				"sync": db.Sync(id), "verify": db.Verify(id, segment(id, 0, 50)),
				"latch": db.LatchErr(id), "truncate": db.Truncate(id, 0),
			} {
				wantIs(t, op+" after the latch", err, store.ErrLatched)
			}
			_, err = db.DurableEnd(id)
			wantIs(t, "durable end after the latch", err, store.ErrLatched)
			db.Close()
			e.remount(t)
			db = open(t, dir, store.Options{})
			checkAcked(t, db, id, acked, payload)
			if _, err := db.Settle(id, segment(id, 0, acked)); err != nil {
				t.Fatalf("Settle after the restart: %v", err)
			}
		})
	}
}
