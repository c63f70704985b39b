package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/catchup"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"golang.org/x/sys/unix"
)

// BenchmarkCatchup moves one sealed copy (1 GiB, in the page cache) over
// loopback from a source broker to a target, with 1 and with 4 transfers
// at once, through each data path:
//
//	mode=zerocopy         sendfile(2) on the source, splice(2) on the target (the default)
//	mode=iocopy           io.CopyBuffer with a 1 MiB buffer at both ends, over wrappers
//	                      that hide io.ReaderFrom/io.WriterTo (pread+write, read+pwrite)
//	mode=sendfile-iocopy  sendfile on the source, io.CopyBuffer on the target
//	mode=iocopy-splice    io.CopyBuffer on the source, splice on the target
//	mode=iperf3           iperf3 -P 1 -n <size> over loopback, the ceiling (skipped without iperf3)
//
// How CPU is measured: the source (a catchup.Server over a store.DB) and
// the target (a catchup.Client) each run in their own child process, this
// test binary re-executed (TestCatchupBenchChild). Each child reads its own
// getrusage(RUSAGE_SELF) user+system time around exactly the transfers, so
// the figures hold no test harness, no setup and no other side. Loopback
// TCP does part of the receive work in softirq context on the sending CPU;
// that is charged to whichever process the kernel was running, which is why
// the sum over both ends (cpu-s/GB) is the figure to compare.
//
// The target writes into a plain file and does not commit: verification and
// fsync cost the same for every mode and would measure the disk (so no mode
// checks frame CRCs on arrival, and nothing syncs inside the timed part).
// Before each round the target writes and removes as many bytes as it is
// about to receive, untimed (recyclePageCache: this VM's free page
// reporting). The last iteration's copies are compared with the source
// after timing. BenchmarkCatchupFloor measures the target's page-cache
// write alone, without a network.
//
// MALACHI_BENCH_RECYCLE=off skips the recycling (to see its effect).
//
// Metrics: MB/s (aggregate, 10^6 bytes per second of wall time around the
// transfers), send-cpu-s/GB, recv-cpu-s/GB and their sum cpu-s/GB (CPU
// seconds per 10^9 bytes moved).
func BenchmarkCatchup(b *testing.B) {
	fx := catchupFixture(b)
	modes := []struct {
		name       string
		send, recv catchup.Mode
	}{
		{"zerocopy", catchup.ModeZeroCopy, catchup.ModeZeroCopy},
		{"iocopy", catchup.ModeReadWrite, catchup.ModeReadWrite},
		{"sendfile-iocopy", catchup.ModeZeroCopy, catchup.ModeReadWrite},
		{"iocopy-splice", catchup.ModeReadWrite, catchup.ModeZeroCopy},
	}
	for _, streams := range []int{1, 4} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("mode=%s/size=%s/streams=%d", m.name, fx.label, streams), func(b *testing.B) {
				runCatchup(b, fx, m.send, m.recv, streams)
			})
		}
	}
	// The ceiling: one iperf3 stream (iperf3 -P 4 -n hangs on this box).
	b.Run(fmt.Sprintf("mode=iperf3/size=%s/streams=1", fx.label), func(b *testing.B) {
		runIperf3(b, fx.seg.ByteSize+store.FooterSize, 1)
	})
}

var benchSecret = []byte("malachi-bench-cluster-secret")

type catchupFix struct {
	dir   string // the source store
	seg   meta.Segment
	path  string // the source copy's file
	label string
}

var (
	catchupOnce sync.Once
	catchupFx   catchupFix
	catchupErr  error
)

// catchupFixture returns a source store holding one sealed copy of 1 GiB
// (64 MiB with -short) of random frames, created once on the repository's
// disk and kept, and reads it into the page cache.
func catchupFixture(b *testing.B) catchupFix {
	catchupOnce.Do(func() {
		frames, label := 1024, "1GiB"
		if testing.Short() {
			frames, label = 64, "64MiB"
		}
		dir := filepath.Join(benchRoot(b), "catchup-"+label)
		catchupFx, catchupErr = makeCatchupSource(dir, meta.SegmentID("bench-"+label), frames)
		catchupFx.label = label
	})
	if catchupErr != nil {
		b.Fatal(catchupErr)
	}
	f, err := os.Open(catchupFx.path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, make([]byte, 4<<20)); err != nil {
		b.Fatal(err)
	}
	return catchupFx
}

// makeCatchupSource opens (or creates) the store in dir with a sealed copy
// of id of frames frames of 1 MiB each (frame header included).
func makeCatchupSource(dir string, id meta.SegmentID, frames int) (catchupFix, error) {
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		return catchupFix{}, err
	}
	defer db.Close()
	fx := catchupFix{dir: dir, path: db.Path(id)}
	if ft, ok := readFooter(fx.path); ok && ft.ByteSize == int64(frames)<<20 {
		fx.seg = meta.Segment{ID: id, StartOffset: ft.StartOffset, Length: ft.Length, ByteSize: ft.ByteSize, Sealed: true, Checksum: meta.CRC32C(ft.FramesCRC)}
		return fx, nil
	}
	_ = db.Delete(id)
	if err := db.Create(id, 0); err != nil {
		return fx, err
	}
	payload := make([]byte, 1<<20-store.FrameHeaderSize)
	rng := rand.NewChaCha8([32]byte{42})
	for range frames {
		rng.Read(payload)
		if _, err := db.Append(id, payload); err != nil {
			return fx, err
		}
	}
	s, err := db.Seal(id)
	if err != nil {
		return fx, err
	}
	fx.seg = meta.Segment{ID: id, StartOffset: s.StartOffset, Length: s.Length, ByteSize: s.ByteSize, Sealed: true, Checksum: s.Checksum}
	return fx, nil
}

func readFooter(path string) (store.Footer, bool) {
	f, err := os.Open(path)
	if err != nil {
		return store.Footer{}, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() < store.FooterSize {
		return store.Footer{}, false
	}
	var buf [store.FooterSize]byte
	if _, err := f.ReadAt(buf[:], fi.Size()-store.FooterSize); err != nil {
		return store.Footer{}, false
	}
	return store.DecodeFooter(buf[:])
}

func runCatchup(b *testing.B, fx catchupFix, send, recv catchup.Mode, streams int) {
	// The source broker.
	sender := exec.Command(os.Args[0], "-test.run=^TestCatchupBenchChild$")
	sender.Env = append(os.Environ(), "MALACHI_CATCHUP_CHILD=sender", "MALACHI_CATCHUP_DIR="+fx.dir,
		"MALACHI_CATCHUP_MODE="+strconv.Itoa(int(send)))
	sender.Stderr = os.Stderr
	in, err := sender.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := sender.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := sender.Start(); err != nil {
		b.Fatal(err)
	}
	defer sender.Wait()
	defer in.Close()
	out := bufio.NewScanner(outPipe)
	addr := expectLine(b, out, "addr")
	senderCPU := func() time.Duration {
		fmt.Fprintln(in, "rusage")
		ns, _ := strconv.ParseInt(expectLine(b, out, "rusage"), 10, 64)
		return time.Duration(ns)
	}

	// The target broker: b.N rounds of streams concurrent transfers.
	segJSON, _ := json.Marshal(fx.seg)
	recvDir := filepath.Join(benchRoot(b), "catchup-target")
	if err := os.MkdirAll(recvDir, 0o755); err != nil {
		b.Fatal(err)
	}
	receiver := exec.Command(os.Args[0], "-test.run=^TestCatchupBenchChild$")
	receiver.Env = append(os.Environ(), "MALACHI_CATCHUP_CHILD=receiver", "MALACHI_CATCHUP_DIR="+recvDir,
		"MALACHI_CATCHUP_MODE="+strconv.Itoa(int(recv)), "MALACHI_CATCHUP_ADDR="+addr,
		"MALACHI_CATCHUP_SEG="+string(segJSON), "MALACHI_CATCHUP_SOURCE="+fx.path,
		"MALACHI_CATCHUP_STREAMS="+strconv.Itoa(streams), "MALACHI_CATCHUP_ROUNDS="+strconv.Itoa(b.N))
	receiver.Stderr = os.Stderr
	b.ResetTimer()
	s0 := senderCPU()
	res, err := receiver.Output()
	s1 := senderCPU()
	b.StopTimer()
	if err != nil {
		b.Fatalf("receiver: %v\n%s", err, res)
	}
	var wall, recvCPU time.Duration
	if _, err := fmt.Sscanf(resultLine(res), "result %d %d", &wall, &recvCPU); err != nil {
		b.Fatalf("receiver said %q: %v", res, err)
	}
	gb := float64(b.N*streams) * float64(fx.seg.ByteSize+store.FooterSize) / 1e9
	b.ReportMetric(gb*1e3/wall.Seconds(), "MB/s")
	b.ReportMetric((s1-s0).Seconds()/gb, "send-cpu-s/GB")
	b.ReportMetric(recvCPU.Seconds()/gb, "recv-cpu-s/GB")
	b.ReportMetric((s1-s0+recvCPU).Seconds()/gb, "cpu-s/GB")
}

func expectLine(b *testing.B, s *bufio.Scanner, word string) string {
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), word+" "); ok {
			return v
		}
	}
	b.Fatalf("child ended before saying %q: %v", word, s.Err())
	return ""
}

// resultLine is the line of b that starts with "result ".
func resultLine(b []byte) string {
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "result ") {
			return l
		}
	}
	return ""
}

// TestCatchupBenchChild is one side of BenchmarkCatchup, run in a child
// process; it does nothing in a normal test run.
func TestCatchupBenchChild(t *testing.T) {
	role := os.Getenv("MALACHI_CATCHUP_CHILD")
	if role == "" {
		t.Skip("only run as a child of BenchmarkCatchup")
	}
	mode, _ := strconv.Atoi(os.Getenv("MALACHI_CATCHUP_MODE"))
	dir := os.Getenv("MALACHI_CATCHUP_DIR")
	switch role {
	case "sender":
		catchupSender(t, dir, catchup.Mode(mode))
	case "receiver":
		catchupReceiver(t, dir, catchup.Mode(mode))
	}
}

func catchupSender(t *testing.T, dir string, mode catchup.Mode) {
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv := &catchup.Server{Source: catchup.StoreSource{DB: db}, Secret: benchSecret, Mode: mode}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	fmt.Println("addr", l.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "rusage" {
			fmt.Println("rusage", int64(cpuTime()))
		}
	}
}

// benchSink receives into plain files and commits nothing (see
// BenchmarkCatchup).
type benchSink struct{ path string }

type benchTarget struct {
	f    *os.File
	size int64
}

func (s benchSink) OpenTarget(seg meta.Segment) (catchup.Target, error) {
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return benchTarget{f: f, size: seg.ByteSize + store.FooterSize}, nil
}

func (t benchTarget) Resume() int64      { return 0 }
func (t benchTarget) Size() int64        { return t.size }
func (t benchTarget) File() catchup.File { return t.f }
func (t benchTarget) Commit() error      { return t.f.Close() }
func (t benchTarget) Abort() error       { return t.f.Close() }

func catchupReceiver(t *testing.T, dir string, mode catchup.Mode) {
	var seg meta.Segment
	if err := json.Unmarshal([]byte(os.Getenv("MALACHI_CATCHUP_SEG")), &seg); err != nil {
		t.Fatal(err)
	}
	streams, _ := strconv.Atoi(os.Getenv("MALACHI_CATCHUP_STREAMS"))
	rounds, _ := strconv.Atoi(os.Getenv("MALACHI_CATCHUP_ROUNDS"))
	addr := os.Getenv("MALACHI_CATCHUP_ADDR")
	cl := &catchup.Client{Secret: benchSecret, Mode: mode}
	paths := make([]string, streams)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("target-%d", i))
		os.Remove(paths[i])
	}
	var wall, cpu time.Duration
	for r := range rounds {
		if err := recyclePageCache(dir, int64(streams)*(seg.ByteSize+store.FooterSize)); err != nil {
			t.Fatal(err)
		}
		w0, c0 := time.Now(), cpuTime()
		errs := make(chan error, streams)
		for _, p := range paths {
			go func() {
				_, err := cl.Fetch(context.Background(), addr, seg, benchSink{path: p}, nil)
				errs <- err
			}()
		}
		for range streams {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		wall += time.Since(w0)
		cpu += cpuTime() - c0
		if r == rounds-1 {
			for _, p := range paths {
				if err := sameFile(os.Getenv("MALACHI_CATCHUP_SOURCE"), p); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, p := range paths {
			os.Remove(p)
		}
	}
	fmt.Printf("result %d %d\n", int64(wall), int64(cpu))
}

func sameFile(a, b string) error {
	fa, err := os.Open(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return err
	}
	defer fb.Close()
	ba, bb := make([]byte, 4<<20), make([]byte, 4<<20)
	for off := int64(0); ; off += int64(len(ba)) {
		na, ea := io.ReadFull(fa, ba)
		nb, _ := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return fmt.Errorf("%s differs from %s near byte %d", b, a, off)
		}
		if ea != nil {
			return nil
		}
	}
}

// runIperf3 measures iperf3 over loopback moving size bytes per stream.
func runIperf3(b *testing.B, size int64, streams int) {
	bin, err := exec.LookPath("iperf3")
	if err != nil {
		b.Skip("iperf3 not installed (apt-get install -y iperf3)")
	}
	var mbps, send, recv float64
	for range b.N {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		srv := exec.CommandContext(ctx, bin, "-s", "-1", "-B", "127.0.0.1", "-p", port)
		if err := srv.Start(); err != nil {
			b.Fatal(err)
		}
		var out []byte
		for try := 0; ; try++ {
			out, err = exec.CommandContext(ctx, bin, "-c", "127.0.0.1", "-p", port, "-P", strconv.Itoa(streams),
				"-n", strconv.FormatInt(size*int64(streams), 10), "-J").Output()
			if err == nil || try == 50 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			srv.Process.Kill()
		}
		srv.Wait()
		cancel()
		if err != nil {
			// iperf3 now and then never finishes a test on this box.
			b.Skipf("iperf3 did not finish within 20 s: %v\n%s", err, out)
		}
		var r struct {
			End struct {
				SumReceived struct {
					Seconds       float64 `json:"seconds"`
					Bytes         float64 `json:"bytes"`
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
				CPU struct {
					Host   float64 `json:"host_total"`
					Remote float64 `json:"remote_total"`
				} `json:"cpu_utilization_percent"`
			} `json:"end"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			b.Fatal(err)
		}
		s := r.End.SumReceived
		gb := s.Bytes / 1e9
		mbps += s.BitsPerSecond / 8 / 1e6
		send += r.End.CPU.Host / 100 * s.Seconds / gb
		recv += r.End.CPU.Remote / 100 * s.Seconds / gb
	}
	n := float64(b.N)
	b.ReportMetric(mbps/n, "MB/s")
	b.ReportMetric(send/n, "send-cpu-s/GB")
	b.ReportMetric(recv/n, "recv-cpu-s/GB")
	b.ReportMetric((send+recv)/n, "cpu-s/GB")
}

// BenchmarkCatchupFloor measures what the target's page-cache write costs
// by itself, with no network, on the same filesystem and the same 1 GiB
// copy as BenchmarkCatchup: the floor under the target's share of the
// catch-up's CPU and wall time. Each floor writes a fresh file, as the
// catch-up target does, and closes it (no sync); removing it is untimed.
//
//	floor=pwrite  pwrite(2) of 1 MiB chunks from one 1 MiB buffer in memory
//	              (what ModeReadWrite's target does after its read(2))
//	floor=splice  splice(2) of the source copy (in the page cache) into a
//	              1 MiB pipe, then pipe → target file at an explicit offset
//	              (what ModeZeroCopy's target does after its socket splice);
//	              pipe-to-file-cpu-s/GB is the second call alone
//	floor=splice-fallocate  the same after fallocate(FALLOC_FL_KEEP_SIZE) of
//	              the whole range, as the catchup target does now
//
// The work runs on one locked OS thread and cpu-s/GB is that thread's
// getrusage(RUSAGE_THREAD) around exactly the system calls.
func BenchmarkCatchupFloor(b *testing.B) {
	fx := catchupFixture(b)
	size := fx.seg.ByteSize + store.FooterSize
	dir := filepath.Join(benchRoot(b), "catchup-target")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	target := filepath.Join(dir, "floor")
	for _, floor := range []string{"pwrite", "splice", "splice-fallocate"} {
		b.Run(fmt.Sprintf("floor=%s/size=%s", floor, fx.label), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var wall, cpu, pipeToFile time.Duration
			for range b.N {
				os.Remove(target)
				if err := recyclePageCache(dir, size); err != nil {
					b.Fatal(err)
				}
				w, c, p, err := writeFloor(floor, fx.path, target, size)
				if err != nil {
					b.Fatal(err)
				}
				wall, cpu, pipeToFile = wall+w, cpu+c, pipeToFile+p
			}
			b.StopTimer()
			if err := sameFile(fx.path, target); floor != "pwrite" && err != nil {
				b.Fatal(err)
			}
			os.Remove(target)
			gb := float64(b.N) * float64(size) / 1e9
			b.ReportMetric(gb*1e3/wall.Seconds(), "MB/s")
			b.ReportMetric(cpu.Seconds()/gb, "cpu-s/GB")
			if floor != "pwrite" {
				b.ReportMetric(pipeToFile.Seconds()/gb, "pipe-to-file-cpu-s/GB")
			}
		})
	}
}

// recyclePageCache writes n bytes into a scratch file in dir and removes it,
// untimed, so that the page cache a timed write allocates next comes from
// pages the guest just freed. On this Firecracker VM the balloon reports
// free memory to the host (free page reporting, ~2 s after it is freed),
// and the first touch of a reported page faults into the host: a 1 GiB
// page-cache write after a few idle seconds measured 1.2-3.1 CPU s/GB and
// 250-530 MB/s, against 0.1-0.3 s/GB and 3-4.8 GB/s right after another
// page-cache file was removed. (Touching anonymous memory and unmapping it
// did not help.) A broker whose memory is in use recycles page cache and
// never pays the host's faults; without this the cost lands on whichever
// mode runs first after a pause.
func recyclePageCache(dir string, n int64) error {
	if os.Getenv("MALACHI_BENCH_RECYCLE") == "off" {
		return nil
	}
	f, err := os.CreateTemp(dir, "recycle-")
	if err != nil {
		return fmt.Errorf("recycling page cache: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < n; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			return fmt.Errorf("recycling page cache: %w", err)
		}
	}
	return nil
}

// threadCPU is the user and system CPU time of the calling OS thread.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeFloor writes size bytes into a new file at target the way floor
// says (see BenchmarkCatchupFloor) and returns the wall and thread CPU
// time from opening the target to closing it, and the CPU time of the
// pipe → file splices alone.
func writeFloor(floor, source, target string, size int64) (wall, cpu, pipeToFile time.Duration, err error) {
	src, err := os.Open(source)
	if err != nil {
		return 0, 0, 0, err
	}
	defer src.Close()
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(src, buf); err != nil {
		return 0, 0, 0, fmt.Errorf("reading the source copy: %w", err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return 0, 0, 0, err
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, 1<<20); err != nil {
		return 0, 0, 0, fmt.Errorf("sizing the pipe to 1 MiB: %w", err)
	}
	w0, c0 := time.Now(), threadCPU()
	f, err := os.OpenFile(target, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, 0, 0, err
	}
	fd, sfd := int(f.Fd()), int(src.Fd())
	if floor == "splice-fallocate" {
		if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, size); err != nil {
			f.Close()
			return 0, 0, 0, fmt.Errorf("fallocate of %d bytes: %w", size, err)
		}
		floor = "splice"
	}
	for off := int64(0); off < size && err == nil; {
		n := int(min(int64(len(buf)), size-off))
		switch floor {
		case "pwrite":
			var m int
			m, err = unix.Pwrite(fd, buf[:n], off)
			off += int64(m)
		case "splice":
			in := off
			var m int64
			if m, err = unix.Splice(sfd, &in, p[1], nil, n, unix.SPLICE_F_MOVE); err != nil || m == 0 {
				err = fmt.Errorf("splice from the source copy at byte %d: %d bytes, %v", off, m, err)
				break
			}
			t0 := threadCPU()
			for m > 0 && err == nil {
				var k int64
				k, err = unix.Splice(p[0], nil, fd, &off, int(m), unix.SPLICE_F_MOVE)
				m -= k
			}
			pipeToFile += threadCPU() - t0
		default:
			err = fmt.Errorf("unknown floor %q", floor)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return time.Since(w0), threadCPU() - c0, pipeToFile, err
}
