package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/testbed/benchenv"
)

// BenchmarkFsyncBesideWriter measures what this machine's disk lets a
// heal do to a client: a client's durable append (1 KiB appended, then
// fdatasync(2), every 2 ms, as a produce at acks=all does on each
// replica) timed for 8 s, alone (writer=none, the baseline of the round)
// and beside one sequential writer at 50, 100 and 200 MB/s and
// unthrottled, writing 1 MiB chunks behind itself as catch-up does
// (sync_file_range(2) starts each 8 MiB window and waits for the one
// before), at the broker's priority (prio=foreground) and at catch-up's
// background priority (prio=background: nice 19, best-effort I/O
// priority 7). It reports the appends' p50 and p99, the p99 over the
// round's baseline, the writer's MB/s and the load. The rounds
// (MALACHI_BENCH_DISKSHARE_ROUNDS, default 3) run with -benchtime 1x.
func BenchmarkFsyncBesideWriter(b *testing.B) {
	dir := filepath.Join(benchRoot(b), "diskshare")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	rounds := envInt("MALACHI_BENCH_DISKSHARE_ROUNDS", 3)
	for round := 1; round <= rounds; round++ {
		var baseline float64
		b.Run(fmt.Sprintf("round=%d/writer=none", round), func(b *testing.B) {
			s := appendsBeside(b, dir, -1, false)
			baseline = s.p99
			s.report(b, baseline)
		})
		for _, rate := range []int64{50e6, 100e6, 200e6, 0} {
			for _, background := range []bool{false, true} {
				name := fmt.Sprintf("round=%d/writer=%dMBps/prio=%s", round, rate/1e6, map[bool]string{false: "foreground", true: "background"}[background])
				if rate == 0 {
					name = fmt.Sprintf("round=%d/writer=unthrottled/prio=%s", round, map[bool]string{false: "foreground", true: "background"}[background])
				}
				b.Run(name, func(b *testing.B) { appendsBeside(b, dir, rate, background).report(b, baseline) })
			}
		}
	}
}

// appendSample is one run's figures.
type appendSample struct {
	p50, p99, writerMBps float64
	appends              int
}

func (s appendSample) report(b *testing.B, baseline float64) {
	b.ReportMetric(s.p50, "p50-ms")
	b.ReportMetric(s.p99, "p99-ms")
	if baseline > 0 {
		b.ReportMetric(s.p99/baseline, "p99-x-alone")
	}
	b.ReportMetric(s.writerMBps, "writer-MB/s")
	b.ReportMetric(float64(s.appends), "appends")
	benchenv.ReportLoad(b)
}

// appendsBeside times the durable appends for 8 s beside a writer at
// rate bytes per second (0: unthrottled; negative: no writer).
func appendsBeside(b *testing.B, dir string, rate int64, background bool) appendSample {
	var stop atomic.Bool
	written := make(chan float64, 1) // the writer's bytes per second
	if rate >= 0 {
		go func() {
			start := time.Now()
			n := writeBehindAt(b, filepath.Join(dir, "writer"), rate, background, &stop)
			written <- float64(n) / time.Since(start).Seconds()
		}()
		time.Sleep(500 * time.Millisecond) // the writer under way
	} else {
		written <- 0
	}
	path := filepath.Join(dir, "appends")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(path)
	defer f.Close()
	rec := make([]byte, 1024)
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < 8*time.Second {
		t := time.Now()
		if _, err := f.Write(rec); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		time.Sleep(2 * time.Millisecond)
	}
	stop.Store(true)
	bps := <-written
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	return appendSample{p50: q(0.5), p99: q(0.99), writerMBps: bps / 1e6, appends: len(lat)}
}

// writeBehindAt writes path sequentially at rate (0: as fast as it can)
// until stop, starting each 8 MiB window's writeback and waiting for the
// window before, wrapping at 1 GiB; it returns the bytes written.
func writeBehindAt(b *testing.B, path string, rate int64, background bool, stop *atomic.Bool) int64 {
	runtime.LockOSThread() // never unlocked: a lowered thread ends with this goroutine
	if background {
		tid := unix.Gettid()
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 19)
		_, _, _ = unix.Syscall(unix.SYS_IOPRIO_SET, 1, uintptr(tid), 2<<13|7) // IOPRIO_WHO_PROCESS, best effort level 7
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		b.Error(err)
		return 0
	}
	defer os.Remove(path)
	defer f.Close()
	const window, wrap = 8 << 20, 1 << 30
	buf := make([]byte, 1<<20)
	var off, total int64
	start := time.Now()
	for !stop.Load() {
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Error(err)
			return total
		}
		off += int64(len(buf))
		total += int64(len(buf))
		if off%window == 0 {
			fd := int(f.Fd())
			_ = unix.SyncFileRange(fd, off-window, window, unix.SYNC_FILE_RANGE_WRITE)
			if off >= 2*window {
				_ = unix.SyncFileRange(fd, off-2*window, window, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
			}
		}
		if off >= wrap {
			off = 0
		}
		if rate > 0 {
			if ahead := time.Duration(float64(total)/float64(rate)*1e9) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
	return total
}
