package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/probe"
	"golang.org/x/sys/unix"
)

// benchRoot is where benchmark fixtures live: $MALACHI_BENCH_DIR, or
// .malachi-bench beside the repository (on the repository's disk, never
// tmpfs). Fixtures are deterministic and kept between runs.
func benchRoot(tb testing.TB) string {
	if d := os.Getenv("MALACHI_BENCH_DIR"); d != "" {
		return d
	}
	wd, err := os.Getwd() // .../<repo>/bench
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(filepath.Dir(filepath.Dir(wd)), ".malachi-bench")
}

var (
	probeFilesOnce sync.Once
	probeFiles     []string
	probeFilesErr  error
)

// probeFixture returns n files of varied sizes spread over 100 directories,
// created once per machine.
func probeFixture(b *testing.B, n int) []string {
	probeFilesOnce.Do(func() {
		dir := filepath.Join(benchRoot(b), "probe-"+strconv.Itoa(n))
		done := filepath.Join(dir, "complete")
		paths := make([]string, n)
		for i := range paths {
			paths[i] = filepath.Join(dir, strconv.Itoa(i%100), strconv.Itoa(i)+".log")
		}
		if _, err := os.Stat(done); err != nil {
			for d := range 100 {
				if err := os.MkdirAll(filepath.Join(dir, strconv.Itoa(d)), 0o755); err != nil {
					probeFilesErr = err
					return
				}
			}
			for i, p := range paths {
				if err := os.WriteFile(p, make([]byte, i%4096), 0o644); err != nil {
					probeFilesErr = err
					return
				}
			}
			if err := os.WriteFile(done, nil, 0o644); err != nil {
				probeFilesErr = err
				return
			}
		}
		probeFiles = paths
	})
	if probeFilesErr != nil {
		b.Fatal(probeFilesErr)
	}
	return probeFiles
}

// cpuTime is the user and system CPU time of the whole process. The io-wq
// workers that run io_uring's statx and fsync are threads of this process,
// so their time counts.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		panic(err) // a CPU figure of 0 would be reported as measured
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dropCaches empties the page, dentry and inode caches (root only).
func dropCaches(b *testing.B) {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200); err != nil {
		b.Skipf("cold cache needs root to write /proc/sys/vm/drop_caches: %v", err)
	}
}

// BenchmarkProbe compares the probe engines on 100,000 files with a warm
// and a cold cache, against an os.Stat loop (what everyone would write) and
// a unix.Statx loop. ns/file is the figure to compare.
func BenchmarkProbe(b *testing.B) {
	const files = 100000
	type engine struct {
		name string
		run  func(b *testing.B, paths []string) func(ctx context.Context, out []probe.Result)
	}
	prober := func(k probe.Kind) func(b *testing.B, paths []string) func(ctx context.Context, out []probe.Result) {
		return func(b *testing.B, paths []string) func(ctx context.Context, out []probe.Result) {
			cfg := probe.DefaultConfig()
			cfg.Engine = k
			p, err := probe.New(cfg)
			if err != nil {
				b.Skipf("engine %v: %v", k, err)
			}
			b.Cleanup(func() { p.Close() })
			return func(ctx context.Context, out []probe.Result) {
				if err := p.Probe(ctx, paths, out); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	engines := []engine{
		{"uring", prober(probe.KindURing)},
		{"syscall", prober(probe.KindSyscall)},
		{"auto", prober(probe.KindAuto)},
		{"osstat", func(b *testing.B, paths []string) func(ctx context.Context, out []probe.Result) {
			return func(_ context.Context, out []probe.Result) {
				for i, p := range paths {
					fi, err := os.Stat(p)
					if err != nil {
						b.Fatal(err)
					}
					out[i].Size = fi.Size()
				}
			}
		}},
		{"statx", func(b *testing.B, paths []string) func(ctx context.Context, out []probe.Result) {
			return func(_ context.Context, out []probe.Result) {
				var st unix.Statx_t
				for i, p := range paths {
					if err := unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_SIZE|unix.STATX_INO, &st); err != nil {
						b.Fatal(err)
					}
					out[i].Size = int64(st.Size)
				}
			}
		}},
	}
	// The first ring of a process pays for spawning io-wq workers and the
	// first pass over the fixture for the Go heap it grows: a broker pays
	// both once at start. Pay them here, so that no engine's figures depend
	// on running first.
	if p, err := probe.New(probe.DefaultConfig()); err == nil {
		paths := probeFixture(b, files)
		out := make([]probe.Result, len(paths))
		for range 2 {
			_ = p.Probe(context.Background(), paths, out)
		}
		p.Close()
		runtime.GC()
	}
	for _, e := range engines {
		// Small batches, warm only: where a ring round trip costs more than
		// it saves (Config.SmallBatch).
		for _, n := range []int{1, 4, 16, 1000} {
			b.Run(fmt.Sprintf("engine=%s/files=%d/cache=warm", e.name, n), func(b *testing.B) {
				paths := probeFixture(b, files)[:n]
				run := e.run(b, paths)
				out := make([]probe.Result, n)
				run(context.Background(), out)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					run(context.Background(), out)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/file")
			})
		}
		b.Run(fmt.Sprintf("engine=%s/files=%d", e.name, files), func(b *testing.B) {
			paths := probeFixture(b, files)
			for _, cache := range []string{"warm", "cold"} {
				b.Run("cache="+cache, func(b *testing.B) {
					run := e.run(b, paths)
					out := make([]probe.Result, len(paths))
					ctx := context.Background()
					// Warm up (and fill the cache). Twice: Auto measures both
					// engines in its first two batches (one sample each), so the
					// timed batches are its steady state, in which 15 of 16
					// batches run one engine only.
					run(ctx, out)
					run(ctx, out)
					b.ReportAllocs()
					b.ResetTimer()
					var c time.Duration // CPU while the timer runs
					c0 := cpuTime()
					for range b.N {
						if cache == "cold" {
							b.StopTimer()
							c += cpuTime() - c0
							dropCaches(b) // costs this process CPU: not counted
							c0 = cpuTime()
							b.StartTimer()
						}
						run(ctx, out)
					}
					b.StopTimer()
					c += cpuTime() - c0
					for i, r := range out {
						if r.Err != nil || r.Size != int64(i%4096) {
							b.Fatalf("%s: size %d err %v, want %d", paths[i], r.Size, r.Err, i%4096)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(paths)), "ns/file")
					// CPU of every thread of the process (io-wq workers included)
					// per file: what the probe costs a loaded broker.
					b.ReportMetric(float64(c.Nanoseconds())/float64(b.N)/float64(len(paths)), "cpu-ns/file")
				})
			}
		})
	}
}
