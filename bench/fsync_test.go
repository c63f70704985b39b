package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

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
// directories, then makes the directory entries durable with one batch
// (engine=uring) or one fsync after another (engine=syscall). Only the
// syncs are timed; ns/dir is the figure to compare.
func BenchmarkSyncDirs(b *testing.B) {
	for _, n := range []int{256, 1000} {
		for _, k := range []fsync.Kind{fsync.KindURing, fsync.KindSyscall} {
			benchSyncDirs(b, k, n)
		}
	}
}

func benchSyncDirs(b *testing.B, k fsync.Kind, n int) {
	b.Run(fmt.Sprintf("engine=%s/dirs=%d", k, n), func(b *testing.B) {
		dirs := syncDirsFixture(b, n)
		cfg := fsync.DefaultConfig()
		cfg.Engine = k
		s, err := fsync.New(cfg)
		if err != nil {
			b.Skipf("engine %v: %v", k, err)
		}
		defer s.Close()
		reqs := make([]fsync.Request, n)
		for i, d := range dirs {
			reqs[i] = fsync.Request{Path: d, Dir: true}
		}
		errs := make([]error, n)
		gen := 0
		step := func() {
			b.StopTimer()
			gen++
			for _, d := range dirs {
				old := filepath.Join(d, strconv.Itoa(gen-1))
				_ = os.Remove(old)
				f, err := os.Create(filepath.Join(d, strconv.Itoa(gen)))
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			b.StartTimer()
			if err := s.Sync(context.Background(), reqs, errs); err != nil {
				b.Fatal(err)
			}
			for i, e := range errs {
				if e != nil {
					b.Fatalf("%s: %v", dirs[i], e)
				}
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
