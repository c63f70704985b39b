package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/probe"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/benchenv"
)

// BenchmarkBrokerProbe is the probe of one broker over the real server
// path: the copy-on-write view's index of the broker's copies, the store's
// confirmations from memory and shard directories, the prober (each engine)
// and heal's filter of intact copies. Beside it, in the same run, the bare
// floor: a unix.Statx loop over the same files, relative to the same shard
// directories. Every copy is sealed, intact and confirmed (the steady
// state), so the report is empty and the cost is the stat and the lookups.
//
// The copies are empty sparse files of their sealed size in a store kept
// under os.TempDir() (malachi-bench-probe-N), built once per machine:
// building 10^6 confirmed copies takes minutes. 10^6 runs only with
// MALACHI_BENCH_1M=1. Each sub-benchmark reports ns/copy, allocs/copy,
// cpu-ns/copy (getrusage of the process around the timed loop) and load1,
// the one-minute load average when it ended.
func BenchmarkBrokerProbe(b *testing.B) {
	counts := []int{10_000, 100_000}
	if os.Getenv("MALACHI_BENCH_1M") != "" {
		counts = append(counts, 1_000_000)
	}
	for _, n := range counts {
		fx := probeFixture(b, n)
		b.Run(fmt.Sprintf("copies=%d/bare-statx", n), func(b *testing.B) { fx.benchBare(b) })
		for _, eng := range []probe.Kind{probe.KindSyscall, probe.KindURing, probe.KindAuto} {
			b.Run(fmt.Sprintf("copies=%d/server-%s", n, eng), func(b *testing.B) { fx.benchServer(b, eng) })
		}
		fx.close()
	}
}

// probeBench is one broker's store of n confirmed copies and a view whose
// metadata assigns them to it (among as many segments it does not hold).
type probeBench struct {
	n    int
	db   *store.DB
	view *meta.View
}

const benchByteSize = 4096

func benchSegID(i int) meta.SegmentID { return meta.SegmentID(fmt.Sprintf("t-%04d-%012d", i%1000, i)) }

// probeFixture opens (building it the first time) the store of n copies
// under os.TempDir() and the view over them.
func probeFixture(b *testing.B, n int) *probeBench {
	b.Helper()
	return openProbeStore(b, filepath.Join(os.TempDir(), fmt.Sprintf("malachi-bench-probe-%d", n)), n)
}

// openProbeStore opens the store of n confirmed copies at dir, building it
// unless dir holds one already, and the view over them.
func openProbeStore(b testing.TB, dir string, n int) *probeBench {
	b.Helper()
	done := filepath.Join(dir, "READY")
	if _, err := os.Stat(done); err != nil {
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		buildProbeStore(b, dir, n)
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := db.LoadConfirmations(); err != nil {
		b.Fatal(err)
	}
	t := meta.NewTable(3)
	for i := 0; i < 2*n; i++ {
		// Every other segment is this broker's (1); the others are not.
		reps := []meta.BrokerID{2, 3, 4}
		if i%2 == 0 {
			reps = []meta.BrokerID{1, 2, 3}
		}
		id := benchSegID(i / 2)
		if i%2 == 1 {
			id = meta.SegmentID("u" + string(id))
		}
		if err := t.Apply(uint64(i+1), meta.CreateSegment{Segment: meta.Segment{ID: id, Replicas: reps}}); err != nil {
			b.Fatal(err)
		}
		if err := t.Apply(uint64(i+1), meta.SealSegment{ID: id, Length: 1, ByteSize: benchByteSize, Checksum: meta.CRC32C(1)}); err != nil {
			b.Fatal(err)
		}
	}
	return &probeBench{n: n, db: db, view: t.View()}
}

// buildProbeStore creates n sealed-size files in a store at dir and
// confirms them, a batch at a time.
func buildProbeStore(b testing.TB, dir string, n int) {
	b.Logf("building %d confirmed copies under %s", n, dir)
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		f, err := os.Create(db.Path(benchSegID(i)))
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Truncate(benchByteSize + store.FooterSize); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	if db, err = store.Open(dir, store.Options{}); err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	for lo := 0; lo < n; lo += MaxSettleBatch {
		hi := min(lo+MaxSettleBatch, n)
		ids := make([]meta.SegmentID, 0, hi-lo)
		fis := make([]store.FileIdentity, 0, hi-lo)
		for i := lo; i < hi; i++ {
			fi, err := db.Identity(benchSegID(i))
			if err != nil {
				b.Fatal(err)
			}
			ids, fis = append(ids, benchSegID(i)), append(fis, fi)
		}
		errs := make([]error, len(ids))
		if err := db.ConfirmBatch(ids, fis, errs); err != nil {
			b.Fatal(err)
		}
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
}

func (fx *probeBench) close() { fx.db.Close() }

// benchBare is the floor: statx of each file relative to its shard
// directory, in a loop, nothing else.
func (fx *probeBench) benchBare(b *testing.B) {
	type target struct {
		dir  int
		name []byte
	}
	var dirs store.StatDirs
	if err := fx.db.OpenStatDirs(&dirs); err != nil {
		b.Fatal(err)
	}
	defer dirs.Close()
	ts := make([]target, 0, fx.n)
	for i := 0; i < fx.n; i++ {
		dir, name, suffix := dirs.Target(benchSegID(i))
		ts = append(ts, target{dir, append([]byte(name+suffix), 0)})
	}
	var st unix.Statx_t
	measure(b, fx.n, func() {
		for i := range ts {
			p := &ts[i].name[0]
			if err := statxAt(ts[i].dir, p, &st); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchServer is the broker's probe: server.probeView over the view.
func (fx *probeBench) benchServer(b *testing.B, eng probe.Kind) {
	pc := probe.DefaultConfig()
	pc.Engine = eng
	pr, err := probe.New(pc)
	if err != nil {
		b.Skipf("engine %s: %v", eng, err)
	}
	defer pr.Close()
	s := &server{self: 1, db: fx.db, stat: proberStatter{pr}}
	ctx := context.Background()
	check := func() {
		rep, err := s.probeView(ctx, fx.view)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Copies != fx.n || len(rep.Facts) != 0 {
			b.Fatalf("probe: %d copies and %d facts (first %+v), want %d and none", rep.Copies, len(rep.Facts), rep.Facts[:min(1, len(rep.Facts))], fx.n)
		}
	}
	check() // warm the scratch and the engine
	measure(b, fx.n, check)
}

// measure runs fn b.N times and reports per copy: ns, allocations, CPU
// (user+system of the whole process, io-wq workers of a ring included as
// they are threads of the process) and the load average at the end.
func measure(b *testing.B, copies int, fn func()) {
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	var ru0, ru1 syscall.Rusage
	runtime.ReadMemStats(&ms0)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fn()
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	runtime.ReadMemStats(&ms1)
	per := float64(b.N) * float64(copies)
	cpu := time.Duration(ru1.Utime.Nano()-ru0.Utime.Nano()) + time.Duration(ru1.Stime.Nano()-ru0.Stime.Nano())
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/copy")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/per, "allocs/copy")
	b.ReportMetric(float64(cpu.Nanoseconds())/per, "cpu-ns/copy")
	benchenv.ReportLoad(b)
}

// statxAt is one statx(dirfd, name) of the kind the probe makes, with no
// conversion of the name (a NUL-terminated byte string).
func statxAt(dir int, name *byte, st *unix.Statx_t) error {
	_, _, en := unix.Syscall6(unix.SYS_STATX, uintptr(dir), uintptr(unsafe.Pointer(name)),
		uintptr(unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT), uintptr(unix.STATX_TYPE|unix.STATX_SIZE|unix.STATX_INO), uintptr(unsafe.Pointer(st)), 0)
	if en != 0 {
		return en
	}
	return nil
}
