//go:build linux

package fsync

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/malachi-log/malachi/testbed/loopdisk"
)

// fsShutdown is FS_IOC_SHUTDOWN (_IOR('X', 125, __u32)) and its flag
// FS_GOING_FLAGS_NOLOGFLUSH: the file system fails every later fsync with
// EIO, as xfstests' godown does.
const (
	fsShutdown        = 0x8004587d
	fsGoingNoLogFlush = 2
)

// loopExt4 mounts a new 64 MiB ext4 on a loop device (testbed/loopdisk)
// under a temporary directory and returns the mount point; cleanup
// unmounts and detaches. Root only: it skips otherwise.
func loopExt4(t *testing.T) string {
	t.Helper()
	if why := loopdisk.Unavailable(); why != "" {
		t.Skip(why)
	}
	base := t.TempDir()
	d, err := loopdisk.Create(filepath.Join(base, "disk.img"), filepath.Join(base, "mnt"), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("closing the loop disk: %v", err)
		}
	})
	return d.Dir
}

// shutdown makes every later sync of the filesystem at mnt fail with EIO
// (FS_IOC_SHUTDOWN); it reports false when the kernel refuses.
func shutdown(t *testing.T, mnt string) bool {
	t.Helper()
	m, err := os.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	flag := uint32(fsGoingNoLogFlush)
	_, _, en := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), fsShutdown, uintptr(unsafe.Pointer(&flag)))
	if en != 0 {
		t.Logf("FS_IOC_SHUTDOWN: %v", en)
	}
	return en == 0
}

// TestFsyncErrorReachesEveryCaller mounts ext4 on a loop device, opens a
// batch of dirty directories, shuts the file system down while the batch
// waits at the engine, and checks that every caller gets EIO wrapped with
// its path, from both engines. Root only.
func TestFsyncErrorReachesEveryCaller(t *testing.T) {
	for _, k := range []Kind{KindURing, KindSyscall} {
		t.Run("engine="+k.String(), func(t *testing.T) {
			mnt := loopExt4(t)
			cfg := DefaultConfig()
			cfg.FilesystemSyncMin = 0 // the engines' own fsyncs are under test
			g := &gated{Engine: engine(t, k, cfg.RingEntries), entered: make(chan int, 4), release: make(chan struct{}, 4)}
			s := newSyncer(cfg, g, "test")
			defer s.Close()
			dirs := make([]string, 8)
			reqs := make([]Request, 0, 16)
			for i := range dirs {
				dirs[i] = filepath.Join(mnt, "d"+strconv.Itoa(i))
				if err := os.Mkdir(dirs[i], 0o755); err != nil {
					t.Fatal(err)
				}
				reqs = append(reqs, Request{Path: dirs[i], Dir: true}, Request{Path: dirs[i], Dir: true})
			}
			errs := make([]error, len(reqs))
			g.release <- struct{}{}
			if err := s.Sync(context.Background(), reqs, errs); err != nil {
				t.Fatal(err)
			}
			<-g.entered
			for i, e := range errs {
				if e != nil {
					t.Fatalf("healthy file system: %s: %v", reqs[i].Path, e)
				}
			}
			for _, d := range dirs {
				if err := os.WriteFile(filepath.Join(d, "new.log"), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- s.Sync(context.Background(), reqs, errs) }()
			if n := <-g.entered; n != 8 {
				t.Fatalf("batch holds %d fsyncs, want 8 (16 requests, 8 distinct)", n)
			}
			if !shutdown(t, mnt) {
				g.release <- struct{}{}
				<-done
				t.Skip("the kernel refused FS_IOC_SHUTDOWN")
			}
			g.release <- struct{}{}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			for i, e := range errs {
				if !errors.Is(e, syscall.EIO) {
					t.Fatalf("after shutdown: %s: %v, want EIO", reqs[i].Path, e)
				}
				if !strings.Contains(e.Error(), reqs[i].Path) {
					t.Fatalf("error %q does not name %s", e, reqs[i].Path)
				}
			}
			t.Logf("after shutdown: %v", errs[0])
			if st := s.Stats(); st.Syncs != 16 || st.Requests != 32 {
				t.Fatalf("stats %+v, want 16 fsyncs for 32 requests", st)
			}
		})
	}
}

// TestFilesystemSyncErrorReachesEveryCaller: a batch of 20 directories on
// one ext4 is answered by one syncfs; after the filesystem is shut down,
// every caller gets EIO wrapped with its own path.
func TestFilesystemSyncErrorReachesEveryCaller(t *testing.T) {
	mnt := loopExt4(t)
	cfg := DefaultConfig()
	cfg.Engine = KindSyscall
	s := newSyncer(cfg, NewSyscall(), "test")
	defer s.Close()
	if s.fsSyncOff != "" {
		t.Skipf("filesystem syncs off: %s", s.fsSyncOff)
	}
	s.dirty = func() (int64, error) { return 0, nil } // the machine's page cache is not under test
	reqs := make([]Request, 20)
	for i := range reqs {
		d := filepath.Join(mnt, "d"+strconv.Itoa(i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		reqs[i] = Request{Path: d, Dir: true}
	}
	errs := make([]error, len(reqs))
	if err := s.Sync(context.Background(), reqs, errs); err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("healthy file system: %s: %v", reqs[i].Path, e)
		}
	}
	for _, r := range reqs {
		if err := os.WriteFile(filepath.Join(r.Path, "new.log"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !shutdown(t, mnt) {
		t.Skip("the kernel refused FS_IOC_SHUTDOWN")
	}
	if err := s.Sync(context.Background(), reqs, errs); err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if !errors.Is(e, syscall.EIO) || !strings.Contains(e.Error(), reqs[i].Path) {
			t.Fatalf("after shutdown: %s: %v, want EIO naming the path", reqs[i].Path, e)
		}
	}
	t.Logf("after shutdown: %v", errs[0])
	if st := s.Stats(); st.FilesystemSyncs != 2 || st.FilesystemSynced != 40 || st.Syncs != 0 {
		t.Fatalf("stats %+v, want 2 filesystem syncs covering 40 directories and no fsync", st)
	}
}
