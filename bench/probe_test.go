package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/probe"
	"github.com/malachi-log/malachi/testbed/benchenv"
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
					c0 := benchenv.ProcessCPU()
					for range b.N {
						if cache == "cold" {
							b.StopTimer()
							c += benchenv.ProcessCPU() - c0
							dropCaches(b) // costs this process CPU: not counted
							c0 = benchenv.ProcessCPU()
							b.StartTimer()
						}
						run(ctx, out)
					}
					b.StopTimer()
					c += benchenv.ProcessCPU() - c0
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

// batchFixture is n empty files t-0001-NNNNNN.seg spread over 256
// directories 00..ff (file i in directory i%256), as the sharded store
// lays copies out, created once per machine under benchRoot (keyed by n,
// on the repository's disk), with every directory open.
type batchFixture struct {
	fds   []int
	names []string // relative to fds[i%256], without the suffix
	paths []string // full paths, suffix included
}

func newBatchFixture(b *testing.B, n int) batchFixture {
	dir := filepath.Join(benchRoot(b), "probe-batch-"+strconv.Itoa(n))
	done := filepath.Join(dir, "complete")
	_, err := os.Stat(done)
	create := err != nil
	fx := batchFixture{fds: make([]int, 256), names: make([]string, n), paths: make([]string, n)}
	for d := range fx.fds {
		sub := filepath.Join(dir, fmt.Sprintf("%02x", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		fd, err := unix.Open(sub, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { unix.Close(fd) })
		fx.fds[d] = fd
	}
	start := time.Now()
	for i := range n {
		fx.names[i] = fmt.Sprintf("t-0001-%06d", i)
		fx.paths[i] = filepath.Join(dir, fmt.Sprintf("%02x", i%256), fx.names[i]+".seg")
		if create {
			fd, err := unix.Openat(fx.fds[i%256], fx.names[i]+".seg", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	}
	if create {
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			b.Fatal(err)
		}
		b.Logf("created %d files in 256 directories under %s in %v", n, dir, time.Since(start).Round(time.Millisecond))
	}
	return fx
}

// iowqCPU is the CPU time of the io-wq workers alive in this process
// (threads named iou-wrk-*, /proc/self/task/*/stat utime+stime, in clock
// ticks of 10 ms). A worker that exits takes its time out of this sum, but
// not out of RUSAGE_SELF, which counts every thread of the group, exited
// ones included.
func iowqCPU() time.Duration {
	tasks, _ := os.ReadDir("/proc/self/task")
	var ticks int64
	for _, t := range tasks {
		comm, err := os.ReadFile("/proc/self/task/" + t.Name() + "/comm")
		if err != nil || !strings.HasPrefix(string(comm), "iou-wrk") {
			continue
		}
		stat, err := os.ReadFile("/proc/self/task/" + t.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the ")" that closes comm: state is field 3, utime 14, stime 15.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100
}

// batchEngine is one way to stat every file of the fixture once.
type batchEngine struct {
	name string
	run  func(out []probe.Result)
}

func batchEngines(b *testing.B, fx batchFixture) []batchEngine {
	var batch probe.Batch
	for i, name := range fx.names {
		batch.Add(fx.fds[i%256], name, ".seg")
	}
	prober := func(k probe.Kind) *probe.Prober {
		cfg := probe.DefaultConfig()
		cfg.Engine = k
		p, err := probe.New(cfg)
		if err != nil {
			b.Skipf("engine %v: %v", k, err)
		}
		b.Cleanup(func() { p.Close() })
		return p
	}
	batchRun := func(p *probe.Prober) func(out []probe.Result) {
		return func(out []probe.Result) {
			if err := p.ProbeBatch(context.Background(), &batch, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	pathsAuto := prober(probe.KindAuto)
	return []batchEngine{
		// The baseline: what anyone would write with dirfd-relative names.
		{"bare", func(out []probe.Result) {
			var st unix.Statx_t
			for i, name := range fx.names {
				if err := unix.Statx(fx.fds[i%256], name+".seg", unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT,
					unix.STATX_TYPE|unix.STATX_SIZE|unix.STATX_INO, &st); err != nil {
					b.Fatal(err)
				}
				out[i] = probe.Result{Size: int64(st.Size), Dev: unix.Mkdev(st.Dev_major, st.Dev_minor), Ino: st.Ino}
			}
		}},
		{"syscall", batchRun(prober(probe.KindSyscall))},
		{"uring", batchRun(prober(probe.KindURing))},
		{"auto", batchRun(prober(probe.KindAuto))},
		// The old API: full paths from the working directory, Auto.
		{"paths", func(out []probe.Result) {
			if err := pathsAuto.Probe(context.Background(), fx.paths, out); err != nil {
				b.Fatal(err)
			}
		}},
	}
}

// BenchmarkProbeBatch compares ProbeBatch (dirfd-relative names, each
// engine) and the full-path Probe with a bare unix.Statx loop over the same
// files (the baseline), in rounds: each iteration runs every engine once
// over about 500,000 stats, in an order that rotates between rounds, and
// reports per engine ns/file, cpu-ns/file (RUSAGE_SELF: every thread of the
// process, io-wq workers included), caller-cpu-ns/file (RUSAGE_THREAD of
// the submitting thread), iowq-cpu-ns/file (the iou-wrk-* threads alone),
// allocs/file, and x-bare (wall time over the baseline's in the same
// round); and load1, the load average when the round started. Run it with
// -benchtime 1x -count 5 for five rounds.
func BenchmarkProbeBatch(b *testing.B) {
	sizes := []int{10000, 100000}
	if os.Getenv("MALACHI_BENCH_1M") != "" {
		sizes = append(sizes, 1000000)
	}
	for _, n := range sizes {
		b.Run("files="+strconv.Itoa(n), func(b *testing.B) {
			fx := newBatchFixture(b, n)
			engines := batchEngines(b, fx)
			out := make([]probe.Result, n)
			for _, e := range engines { // warm the cache, the rings and Auto's first comparison
				e.run(out)
				e.run(out)
			}
			reps := max(1, 500000/n)
			runtime.GC()
			b.ResetTimer()
			for round := range b.N {
				probeBatchRound(b, fx, engines, out, reps, round)
			}
		})
	}
}

var batchRounds int // rotates the engine order across rounds and runs

func probeBatchRound(b *testing.B, fx batchFixture, engines []batchEngine, out []probe.Result, reps, round int) {
	runtime.LockOSThread() // RUSAGE_THREAD is the submitting thread's
	defer runtime.UnlockOSThread()
	load, err := benchenv.ReadLoad()
	if err != nil {
		b.Fatal(err)
	}
	line := load.String()
	b.ReportMetric(load.One, "load1")
	files := float64(reps * len(fx.names))
	wall := map[string]float64{}
	batchRounds++
	for k := range engines {
		e := engines[(k+batchRounds)%len(engines)]
		var m0, m1 runtime.MemStats
		w0 := iowqCPU() // reads /proc: allocates, so outside the MemStats window
		c0, t0 := benchenv.ProcessCPU(), threadCPU()
		runtime.ReadMemStats(&m0)
		start := time.Now()
		for range reps {
			e.run(out)
		}
		el := time.Since(start)
		runtime.ReadMemStats(&m1)
		c, t := benchenv.ProcessCPU()-c0, threadCPU()-t0
		w := iowqCPU() - w0
		for i, r := range out {
			if r.Err != nil || r.Size != 0 {
				b.Fatalf("%s: %s: size %d err %v", e.name, fx.paths[i], r.Size, r.Err)
			}
		}
		wall[e.name] = float64(el.Nanoseconds()) / files
		b.ReportMetric(wall[e.name], "ns/file-"+e.name)
		b.ReportMetric(float64(c.Nanoseconds())/files, "cpu-ns/file-"+e.name)
		b.ReportMetric(float64(t.Nanoseconds())/files, "caller-cpu-ns/file-"+e.name)
		b.ReportMetric(float64(w.Nanoseconds())/files, "iowq-cpu-ns/file-"+e.name)
		b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/files, "allocs/file-"+e.name)
	}
	for name, ns := range wall {
		if name != "bare" {
			b.ReportMetric(ns/wall["bare"], "x-bare-"+name)
		}
	}
	b.Logf("round %d, %d files x %d: loadavg %s; ns/file bare %.0f syscall %.0f uring %.0f auto %.0f paths %.0f",
		round, len(fx.names), reps, line, wall["bare"], wall["syscall"], wall["uring"], wall["auto"], wall["paths"])
}
