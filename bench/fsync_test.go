package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/fsync"
)

// syncDirsFixture returns n directories on the repository's disk.
func syncDirsFixture(b *testing.B, n int) []string {
	root := filepath.Join(benchRoot(b), "syncdirs-"+strconv.Itoa(n))
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = filepath.Join(root, strconv.Itoa(i))
		if err := os.MkdirAll(dirs[i], 0o755); err != nil {
			b.Fatal(err)
		}
	}
	return dirs
}

// BenchmarkSyncDirs makes a new file in each of 256 (and 1,000)
// directories, then makes the directory entries durable: with one
// fsync.Syncer batch as the plugin configures it (engine=uring: io_uring
// fsyncs, and one syncfs for a batch of at least FilesystemSyncMin
// directories on one filesystem), with the ring's fsyncs alone
// (engine=uring-fsync-only), or one fsync(2) after another
// (engine=syscall, the baseline). Only the syncs are timed; ns/dir is the
// figure to compare.
//
// floor=syncfs makes the same entries durable with a bare syncfs(2) of
// the filesystem: one journal commit carrying every entry and no work per
// directory, the least any batch can cost on this disk; floor=stat+syncfs
// adds only a stat of each path, the least per-directory work (a lookup)
// any batch must do to know which filesystem it syncs.
func BenchmarkSyncDirs(b *testing.B) {
	for _, n := range []int{256, 1000} {
		plugin := fsync.DefaultConfig()
		plugin.Engine = fsync.KindURing
		ringOnly := plugin
		ringOnly.FilesystemSyncMin = 0
		sequential := ringOnly
		sequential.Engine = fsync.KindSyscall
		benchSyncDirs(b, "uring", plugin, n)
		benchSyncDirs(b, "uring-fsync-only", ringOnly, n)
		benchSyncDirs(b, "syscall", sequential, n)
		runSyncDirs(b, fmt.Sprintf("floor=syncfs/dirs=%d", n), n, func(dirs []string) error {
			return syncFS(dirs[0])
		})
		runSyncDirs(b, fmt.Sprintf("floor=stat+syncfs/dirs=%d", n), n, func(dirs []string) error {
			var st unix.Stat_t
			for _, d := range dirs {
				if err := unix.Stat(d, &st); err != nil {
					return fmt.Errorf("stat %s: %w", d, err)
				}
			}
			return syncFS(dirs[0])
		})
	}
}

func benchSyncDirs(b *testing.B, name string, cfg fsync.Config, n int) {
	name = fmt.Sprintf("engine=%s/dirs=%d", name, n)
	s, err := fsync.New(cfg)
	if err != nil {
		b.Run(name, func(b *testing.B) { b.Skipf("engine %v: %v", cfg.Engine, err) })
		return
	}
	defer s.Close()
	reqs := make([]fsync.Request, n)
	errs := make([]error, n)
	runSyncDirs(b, name, n, func(dirs []string) error {
		for i, d := range dirs {
			reqs[i] = fsync.Request{Path: d, Dir: true}
		}
		if err := s.Sync(context.Background(), reqs, errs); err != nil {
			return err
		}
		for i, e := range errs {
			if e != nil {
				return fmt.Errorf("%s: %w", dirs[i], e)
			}
		}
		return nil
	})
}

// runSyncDirs times sync over n fixture directories, each holding a file
// created (untimed) just before every call.
func runSyncDirs(b *testing.B, name string, n int, sync func(dirs []string) error) {
	b.Run(name, func(b *testing.B) {
		dirs := syncDirsFixture(b, n)
		gen := 0
		step := func() {
			b.StopTimer()
			gen++
			for _, d := range dirs {
				_ = os.Remove(filepath.Join(d, strconv.Itoa(gen-1)))
				f, err := os.Create(filepath.Join(d, strconv.Itoa(gen)))
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			b.StartTimer()
			if err := sync(dirs); err != nil {
				b.Fatal(err)
			}
		}
		step() // settle the fixture
		b.ResetTimer()
		for range b.N {
			step()
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/dir")
	})
}

// syncFS commits the filesystem holding dir with one syncfs(2).
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}
