package bench

import (
	"bufio"
	"bytes"
	"context"
	cryptotls "crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/catchup"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/benchenv"
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
// Every transfer presents a catch-up ticket, as brokers do: the target
// child signs one per transfer with its broker certificate (untimed, it
// stands for the coordinator's) and the source verifies it (timed, on the
// source's CPU), both through internal/pki over a throwaway cluster CA.
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
	warnPageReporting(b)
	zc, rw := catchup.ModeZeroCopy, catchup.ModeReadWrite
	for _, streams := range []int{1, 4} {
		for _, m := range []dataPath{{"zerocopy", zc, zc, false}, {"iocopy", rw, rw, false}, {"sendfile-iocopy", zc, rw, false}, {"iocopy-splice", rw, zc, false}} {
			b.Run(fmt.Sprintf("mode=%s/size=%s/streams=%d", m.name, fx.label, streams), func(b *testing.B) {
				runCatchup(b, fx, m, streams)
			})
		}
	}
	// The ceiling: one iperf3 stream (iperf3 -P 4 -n hangs on this box).
	b.Run(fmt.Sprintf("mode=iperf3/size=%s/streams=1", fx.label), func(b *testing.B) {
		runIperf3(b, fx.seg.ByteSize+store.FooterSize, 1)
	})
}

// BenchmarkCatchupPaired compares data paths round by round. Each
// iteration is one round: every entry of the set moves the copy once
// (streams transfers at once), in an order that rotates from round to
// round, between the same two child processes (the sender serves each
// entry on its own listener); with one stream, iperf3 -P 1 runs once per
// round too. The wall and CPU figures are BenchmarkCatchup's, taken per
// transfer; the sender's CPU is asked for over a control connection right
// before and after each one, so neither end's window holds another entry
// or the page-cache recycling.
//
//	set=goal  zerocopy (sendfile → splice), iocopy (the io.Copy
//	          baseline) and tls (the encrypted data path: TLS 1.3 with
//	          broker certificates, user-space copies at both ends), at 1
//	          and 4 streams: the issue's goals and what confidentiality
//	          costs
//	set=ends  zerocopy, iocopy-splice and sendfile-iocopy: what each
//	          zero-copy end brings alone
//
// On a shared VM the CPU time of a process swings by tens of percent from
// one second to the next with the host's load (the guest sees no steal
// time); the transfers of a round are seconds apart, so their ratio is far
// steadier than the ratio of separate runs. Run it with -benchtime Nx for
// N rounds.
//
// Metrics: each entry's median MB/s and CPU s/GB (both ends, receiver,
// sender), and the median over rounds of the first entry's CPU and MB/s
// divided by each other's in the same round (cpu-vs-<name>,
// MB/s-vs-<name>; rounds in which iperf3 did not finish are left out of
// its figures).
func BenchmarkCatchupPaired(b *testing.B) {
	fx := catchupFixture(b)
	warnPageReporting(b)
	zc, rw := catchup.ModeZeroCopy, catchup.ModeReadWrite
	for _, set := range []struct {
		name    string
		entries []dataPath
		streams []int
	}{
		// The issue's goals: zero copy against the io.Copy baseline, and
		// the TLS data path beside them.
		{"goal", []dataPath{{"zerocopy", zc, zc, false}, {"iocopy", rw, rw, false}, {"tls", rw, rw, true}}, []int{1, 4}},
		// Which end gains what: each zero-copy end alone.
		{"ends", []dataPath{{"zerocopy", zc, zc, false}, {"iocopy-splice", rw, zc, false}, {"sendfile-iocopy", zc, rw, false}}, []int{1}},
	} {
		for _, streams := range set.streams {
			b.Run(fmt.Sprintf("set=%s/size=%s/streams=%d", set.name, fx.label, streams), func(b *testing.B) {
				runPaired(b, fx, set.entries, streams)
			})
		}
	}
}

// dataPath is one way through a catch-up benchmark: the source's and the
// target's mode, and whether the connection is TLS (then both ends copy
// in user space whatever their mode).
type dataPath struct {
	name       string
	send, recv catchup.Mode
	tls        bool
}

// runPaired runs b.N rounds of entries (and of iperf3 -P 1 where
// installed and streams is 1) and reports each one's medians and the
// first entry's per-round ratios against every other.
func runPaired(b *testing.B, fx catchupFix, entries []dataPath, streams int) {
	var names []string
	for _, e := range entries {
		names = append(names, e.name)
	}
	src := startSource(b, fx, entries)
	cmd := targetCommand(b, fx, "paired", entries, src, streams)
	if bin, err := exec.LookPath("iperf3"); err == nil && streams == 1 {
		names = append(names, "iperf3")
		cmd.Env = append(cmd.Env, "MALACHI_CATCHUP_IPERF3="+bin)
	}
	b.ResetTimer()
	out, err := cmd.Output()
	b.StopTimer()
	if err != nil {
		b.Fatalf("receiver: %v\n%s", err, out)
	}
	rounds := make([][]figures, b.N) // a zero figures: iperf3 did not finish
	for i := range rounds {
		rounds[i] = make([]figures, len(names))
	}
	seen := 0
	for _, line := range strings.Split(string(out), "\n") {
		var r, i int
		var f figures
		if _, err := fmt.Sscanf(line, "figures %d %d %g %g %g", &r, &i, &f.mbps, &f.recv, &f.send); err != nil {
			continue
		}
		if r < 0 || r >= b.N || i < 0 || i >= len(names) {
			b.Fatalf("receiver said %q", line)
		}
		rounds[r][i] = f
		seen++
	}
	if seen < b.N*len(entries) {
		b.Fatalf("receiver reported %d transfers, want at least %d:\n%s", seen, b.N*len(entries), out)
	}
	// pick is the median of f over the rounds in which every mode in
	// need has figures.
	pick := func(f func(r []figures) float64, need ...int) float64 {
		var v []float64
		for _, r := range rounds {
			if !slices.ContainsFunc(need, func(i int) bool { return r[i].mbps == 0 }) {
				v = append(v, f(r))
			}
		}
		if len(v) == 0 {
			return math.NaN()
		}
		return median(v)
	}
	for i, name := range names {
		reportFigures(b, name+"-", pick(func(r []figures) float64 { return r[i].mbps }, i),
			pick(func(r []figures) float64 { return r[i].cpu() }, i),
			pick(func(r []figures) float64 { return r[i].recv }, i),
			pick(func(r []figures) float64 { return r[i].send }, i))
	}
	for j := 1; j < len(names); j++ {
		b.ReportMetric(pick(func(r []figures) float64 { return r[0].cpu() / r[j].cpu() }, 0, j), "cpu-vs-"+names[j])
		b.ReportMetric(pick(func(r []figures) float64 { return r[0].mbps / r[j].mbps }, 0, j), "MB/s-vs-"+names[j])
	}
}

// median returns the median of v (the mean of the middle two for an even
// count); v is sorted in place.
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// The brokers of the catch-up benchmarks: the source, and the target
// (which also issues the tickets, standing in for the coordinator).
const (
	benchSourceID meta.BrokerID = 1
	benchTargetID meta.BrokerID = 2
)

// benchCerts writes a throwaway cluster CA and the two brokers'
// certificates (for 127.0.0.1) into a directory that ends with b.
func benchCerts(b *testing.B) pki.Local {
	l, err := pki.CreateLocal(filepath.Join(b.TempDir(), "certs"), []meta.BrokerID{benchSourceID, benchTargetID}, []string{"127.0.0.1"})
	if err != nil {
		b.Fatalf("catch-up benchmark certificates: %v", err)
	}
	return l
}

// loadBroker loads broker id's certificates from the certs root in the
// child's environment.
func loadBroker(t *testing.T, id meta.BrokerID) *pki.Certs {
	c, err := pki.LoadBroker(pki.Local{Root: os.Getenv("MALACHI_CATCHUP_CERTS")}.BrokerDir(id))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

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

// sourceBroker is the sender child of a catch-up benchmark.
type sourceBroker struct {
	cmd     *exec.Cmd
	in      io.WriteCloser // closed to end the child
	certs   pki.Local      // the cluster's certificates, for both children
	ctl     string         // the control listener's address
	addrs   []string       // one data listener per path
	conn    net.Conn       // the parent's own control connection
	answers *bufio.Scanner
}

// startSource starts the sender child serving fx's store, one data
// listener per path (its send mode, over TLS or not); it ends with b
// (Cleanup).
func startSource(b *testing.B, fx catchupFix, paths []dataPath) *sourceBroker {
	var modes []catchup.Mode
	for _, p := range paths {
		modes = append(modes, p.send)
	}
	certs := benchCerts(b)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCatchupBenchChild$")
	cmd.Env = append(os.Environ(), "MALACHI_CATCHUP_CHILD=sender", "MALACHI_CATCHUP_DIR="+fx.dir,
		"MALACHI_CATCHUP_MODE="+formatModes(modes), "MALACHI_CATCHUP_TLS="+formatTLS(paths),
		"MALACHI_CATCHUP_CERTS="+certs.Root)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	s := &sourceBroker{cmd: cmd, in: in, certs: certs}
	b.Cleanup(s.close)
	out := bufio.NewScanner(outPipe)
	s.ctl = expectLine(b, out, "ctl")
	s.addrs = strings.Fields(expectLine(b, out, "addr"))
	if s.conn, err = net.Dial("tcp", s.ctl); err != nil {
		b.Fatalf("sender's control listener: %v", err)
	}
	s.answers = bufio.NewScanner(s.conn)
	return s
}

// cpu asks the sender child for its CPU time so far.
func (s *sourceBroker) cpu(tb testing.TB) time.Duration {
	return askCPU(tb, s.conn, s.answers)
}

// askCPU asks a sender child's control connection for the child's CPU
// time so far.
func askCPU(tb testing.TB, conn net.Conn, answers *bufio.Scanner) time.Duration {
	fmt.Fprintln(conn, "cpu")
	if !answers.Scan() {
		tb.Fatalf("sender's control connection: %v", answers.Err())
	}
	ns, err := strconv.ParseInt(answers.Text(), 10, 64)
	if err != nil {
		tb.Fatalf("sender's CPU time %q: %v", answers.Text(), err)
	}
	return time.Duration(ns)
}

func (s *sourceBroker) close() {
	if s.conn != nil {
		s.conn.Close()
	}
	s.in.Close()
	s.cmd.Wait()
}

func formatModes(modes []catchup.Mode) string {
	var parts []string
	for _, m := range modes {
		parts = append(parts, strconv.Itoa(int(m)))
	}
	return strings.Join(parts, ",")
}

// formatTLS says which paths speak TLS, "1" or "0" each, comma-separated.
func formatTLS(paths []dataPath) string {
	var parts []string
	for _, p := range paths {
		parts = append(parts, map[bool]string{false: "0", true: "1"}[p.tls])
	}
	return strings.Join(parts, ",")
}

// parseTLS reads formatTLS's list for n paths; an empty one is no TLS.
func parseTLS(t *testing.T, s string, n int) []bool {
	on := make([]bool, n)
	if s == "" {
		return on
	}
	parts := strings.Split(s, ",")
	if len(parts) != n {
		t.Fatalf("MALACHI_CATCHUP_TLS=%q: want %d entries", s, n)
	}
	for i, p := range parts {
		on[i] = p == "1"
	}
	return on
}

func parseModes(t *testing.T, s string) []catchup.Mode {
	var modes []catchup.Mode
	for _, part := range strings.Split(s, ",") {
		m, err := strconv.Atoi(part)
		if err != nil {
			t.Fatalf("MALACHI_CATCHUP_MODE=%q: %v", s, err)
		}
		modes = append(modes, catchup.Mode(m))
	}
	return modes
}

func runCatchup(b *testing.B, fx catchupFix, path dataPath, streams int) {
	src := startSource(b, fx, []dataPath{path})
	// The target broker: b.N rounds of streams concurrent transfers.
	receiver := targetCommand(b, fx, "receiver", []dataPath{path}, src, streams)
	b.ResetTimer()
	s0 := src.cpu(b)
	res, err := receiver.Output()
	s1 := src.cpu(b)
	b.StopTimer()
	if err != nil {
		b.Fatalf("receiver: %v\n%s", err, res)
	}
	var wall, recvCPU time.Duration
	if _, err := fmt.Sscanf(resultLine(res), "result %d %d", &wall, &recvCPU); err != nil {
		b.Fatalf("receiver said %q: %v", res, err)
	}
	f := transferFigures(b.N*streams, fx.seg, wall, recvCPU, s1-s0)
	reportFigures(b, "", f.mbps, f.cpu(), f.recv, f.send)
}

// targetCommand is the receiver child of a catch-up benchmark: role
// "receiver" or "paired", b.N rounds of streams concurrent transfers from
// src's data listeners (one per path), asking src's control listener for
// its CPU time (paired only).
func targetCommand(b *testing.B, fx catchupFix, role string, paths []dataPath, src *sourceBroker, streams int) *exec.Cmd {
	var modes []catchup.Mode
	for _, p := range paths {
		modes = append(modes, p.recv)
	}
	ctl := ""
	if role == "paired" {
		ctl = src.ctl
	}
	segJSON, err := json.Marshal(fx.seg)
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(benchRoot(b), "catchup-target")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCatchupBenchChild$")
	cmd.Env = append(os.Environ(), "MALACHI_CATCHUP_CHILD="+role, "MALACHI_CATCHUP_DIR="+dir,
		"MALACHI_CATCHUP_MODE="+formatModes(modes), "MALACHI_CATCHUP_TLS="+formatTLS(paths),
		"MALACHI_CATCHUP_CERTS="+src.certs.Root, "MALACHI_CATCHUP_ADDR="+strings.Join(src.addrs, " "),
		"MALACHI_CATCHUP_CTL="+ctl, "MALACHI_CATCHUP_SEG="+string(segJSON), "MALACHI_CATCHUP_SOURCE="+fx.path,
		"MALACHI_CATCHUP_STREAMS="+strconv.Itoa(streams), "MALACHI_CATCHUP_ROUNDS="+strconv.Itoa(b.N))
	cmd.Stderr = os.Stderr
	return cmd
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
	modes := parseModes(t, os.Getenv("MALACHI_CATCHUP_MODE"))
	tls := parseTLS(t, os.Getenv("MALACHI_CATCHUP_TLS"), len(modes))
	dir := os.Getenv("MALACHI_CATCHUP_DIR")
	switch role {
	case "sender":
		catchupSender(t, dir, modes, tls)
	case "receiver":
		catchupReceiver(t, dir, modes[0], tls[0])
	case "paired":
		pairedReceiver(t, dir, modes, tls)
	}
}

// catchupSender serves dir's store as broker benchSourceID with one
// catchup.Server per mode (over TLS where tls says), each on its own
// listener and checking tickets, printing "ctl" and the address of a
// control listener that answers every line it reads with this process's
// CPU time in nanoseconds, then "addr" and the data listeners' addresses
// in mode order. It ends when its standard input closes.
func catchupSender(t *testing.T, dir string, modes []catchup.Mode, tls []bool) {
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	certs := loadBroker(t, benchSourceID)
	addrs := make([]string, len(modes))
	for i, mode := range modes {
		srv := &catchup.Server{Source: catchup.StoreSource{DB: db}, Self: benchSourceID, Tickets: certs, Mode: mode}
		if tls[i] {
			srv.TLS = certs.ServerConfig()
			srv.TLS.VerifyConnection = func(cs cryptotls.ConnectionState) error {
				_, err := certs.VerifyPeer(cs.PeerCertificates)
				return err
			}
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(l)
		defer srv.Close()
		addrs[i] = l.Addr().String()
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	go func() {
		for {
			c, err := ctl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				in := bufio.NewScanner(c)
				for in.Scan() {
					fmt.Fprintln(c, int64(benchenv.ProcessCPU()))
				}
			}()
		}
	}()
	fmt.Println("ctl", ctl.Addr())
	fmt.Println("addr", strings.Join(addrs, " "))
	io.Copy(io.Discard, os.Stdin)
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

// target is the receiver child's side of a catch-up benchmark, read from
// its environment (see targetCommand). It issues its own tickets, as
// broker benchTargetID, standing in for the coordinator.
type target struct {
	certs   *pki.Certs
	dir     string
	seg     meta.Segment
	source  string // the source copy's path, to compare with
	addrs   []string
	streams int
	rounds  int
	paths   []string // one file per stream
}

func readTarget(t *testing.T, dir string) target {
	tg := target{dir: dir, source: os.Getenv("MALACHI_CATCHUP_SOURCE"), addrs: strings.Fields(os.Getenv("MALACHI_CATCHUP_ADDR")),
		certs: loadBroker(t, benchTargetID)}
	if err := json.Unmarshal([]byte(os.Getenv("MALACHI_CATCHUP_SEG")), &tg.seg); err != nil {
		t.Fatal(err)
	}
	tg.streams, _ = strconv.Atoi(os.Getenv("MALACHI_CATCHUP_STREAMS"))
	tg.rounds, _ = strconv.Atoi(os.Getenv("MALACHI_CATCHUP_ROUNDS"))
	for i := range tg.streams {
		p := filepath.Join(dir, fmt.Sprintf("target-%d", i))
		os.Remove(p)
		tg.paths = append(tg.paths, p)
	}
	return tg
}

// recycle recycles as much page cache as the next transfer writes.
func (tg target) recycle(t *testing.T) {
	if err := recyclePageCache(tg.dir, int64(tg.streams)*(tg.seg.ByteSize+store.FooterSize)); err != nil {
		t.Fatal(err)
	}
}

// client is the receiver's catch-up client for mode, over TLS with this
// broker's certificate when tls is set.
func (tg target) client(mode catchup.Mode, tls bool) *catchup.Client {
	cl := &catchup.Client{Mode: mode}
	if tls {
		cl.TLS = tg.certs.ClientConfig()
	}
	return cl
}

// transfer moves the copy once per stream, all at once, from addr with cl,
// and returns the wall and CPU time of the transfers. Each transfer's
// ticket is issued before the timing starts. With check it compares every
// target with the source afterwards; the targets are removed.
func (tg target) transfer(t *testing.T, cl *catchup.Client, addr string, check bool) (wall, cpu time.Duration) {
	tickets := make([][]byte, len(tg.paths))
	for i := range tickets {
		var err error
		tickets[i], err = catchup.IssueTicket(tg.certs, catchup.Ticket{
			Segment: tg.seg, From: 0, To: tg.seg.ByteSize + store.FooterSize,
			Source: benchSourceID, Target: benchTargetID, Issuer: benchTargetID, Expires: time.Now().Add(time.Minute),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	w0, c0 := time.Now(), benchenv.ProcessCPU()
	errs := make(chan error, tg.streams)
	for i, p := range tg.paths {
		go func() {
			_, err := cl.Fetch(context.Background(), addr, tg.seg, tickets[i], benchSink{path: p}, nil)
			errs <- err
		}()
	}
	for range tg.streams {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	wall, cpu = time.Since(w0), benchenv.ProcessCPU()-c0
	for _, p := range tg.paths {
		if check {
			if err := sameFile(tg.source, p); err != nil {
				t.Fatal(err)
			}
		}
		os.Remove(p)
	}
	return wall, cpu
}

func catchupReceiver(t *testing.T, dir string, mode catchup.Mode, tls bool) {
	tg := readTarget(t, dir)
	cl := tg.client(mode, tls)
	var wall, cpu time.Duration
	for r := range tg.rounds {
		tg.recycle(t)
		w, c := tg.transfer(t, cl, tg.addrs[0], r == tg.rounds-1)
		wall, cpu = wall+w, cpu+c
	}
	fmt.Printf("result %d %d\n", int64(wall), int64(cpu))
}

// pairedReceiver runs BenchmarkCatchupPaired's rounds: in each, every path
// (a mode, over TLS where tls says) moves the copy once, and then iperf3 once where MALACHI_CATCHUP_IPERF3
// names it, in an order that rotates from round to round; the sender's CPU
// time is asked for around each transfer. It prints one line per transfer:
// "figures <round> <index> <MB/s> <recv cpu s/GB> <send cpu s/GB>", iperf3's
// index coming after the modes' (no line when iperf3 did not finish).
func pairedReceiver(t *testing.T, dir string, modes []catchup.Mode, tls []bool) {
	tg := readTarget(t, dir)
	ctl, err := net.Dial("tcp", os.Getenv("MALACHI_CATCHUP_CTL"))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	answers := bufio.NewScanner(ctl)
	senderCPU := func() time.Duration { return askCPU(t, ctl, answers) }
	clients := make([]*catchup.Client, len(modes))
	for i, m := range modes {
		clients[i] = tg.client(m, tls[i])
	}
	iperf3 := os.Getenv("MALACHI_CATCHUP_IPERF3")
	entries := len(modes)
	if iperf3 != "" {
		entries++
	}
	for r := range tg.rounds {
		for k := range entries {
			i := (r + k) % entries
			var f figures
			if i == len(modes) {
				if f, err = iperf3Once(iperf3, tg.seg.ByteSize+store.FooterSize, tg.streams); err != nil {
					continue
				}
			} else {
				tg.recycle(t)
				s0 := senderCPU()
				wall, cpu := tg.transfer(t, clients[i], tg.addrs[i], r == tg.rounds-1)
				f = transferFigures(tg.streams, tg.seg, wall, cpu, senderCPU()-s0)
			}
			fmt.Printf("figures %d %d %g %g %g\n", r, i, f.mbps, f.recv, f.send)
			fmt.Fprintf(os.Stderr, "round %d entry %d: %.0f MB/s, CPU %.3f s/GB (recv %.3f, send %.3f), load %s\n",
				r, i, f.mbps, f.cpu(), f.recv, f.send, loadAverage())
		}
	}
}

// loadAverage is the host's load average over 1, 5 and 15 minutes as
// /proc/loadavg says it, or "?" where there is none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
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
		f, err := iperf3Once(bin, size, streams)
		if err != nil {
			b.Skip(err) // iperf3 now and then never finishes a test on this box
		}
		mbps, send, recv = mbps+f.mbps, send+f.send, recv+f.recv
	}
	n := float64(b.N)
	reportFigures(b, "", mbps/n, (send+recv)/n, recv/n, send/n)
}

// figures are one transfer's (or one round's median) MB/s and CPU seconds
// per GB at each end.
type figures struct{ mbps, recv, send float64 }

func (f figures) cpu() float64 { return f.recv + f.send }

// transferFigures are the figures of copies transfers of seg's copy that
// took wall in all, with recv and send the CPU time of each end.
func transferFigures(copies int, seg meta.Segment, wall, recv, send time.Duration) figures {
	gb := float64(copies) * float64(seg.ByteSize+store.FooterSize) / 1e9
	return figures{mbps: gb * 1e3 / wall.Seconds(), recv: recv.Seconds() / gb, send: send.Seconds() / gb}
}

// reportFigures reports MB/s, CPU s/GB over both ends and at each end,
// each metric's unit after prefix.
func reportFigures(b *testing.B, prefix string, mbps, cpu, recv, send float64) {
	b.ReportMetric(mbps, prefix+"MB/s")
	b.ReportMetric(cpu, prefix+"cpu-s/GB")
	b.ReportMetric(recv, prefix+"recv-cpu-s/GB")
	b.ReportMetric(send, prefix+"send-cpu-s/GB")
}

// iperf3Once moves size bytes per stream over loopback with iperf3 (a
// one-off server and a client, -P streams) and returns its throughput and
// its own CPU figures (cpu_utilization_percent of each end). An iperf3
// that has not finished after 20 s is an error.
func iperf3Once(bin string, size int64, streams int) (figures, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return figures{}, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, bin, "-s", "-1", "-B", "127.0.0.1", "-p", port)
	if err := srv.Start(); err != nil {
		return figures{}, err
	}
	var out []byte
	for try := 0; ; try++ {
		out, err = exec.CommandContext(ctx, bin, "-c", "127.0.0.1", "-p", port, "-P", strconv.Itoa(streams),
			"-n", strconv.FormatInt(size*int64(streams), 10), "-J").Output()
		if err == nil || try == 50 || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		srv.Process.Kill()
	}
	srv.Wait()
	if err != nil {
		return figures{}, fmt.Errorf("iperf3 did not finish within 20 s: %v\n%s", err, out)
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
		return figures{}, fmt.Errorf("iperf3's JSON: %w", err)
	}
	sum := r.End.SumReceived
	gb := sum.Bytes / 1e9
	return figures{
		mbps: sum.BitsPerSecond / 8 / 1e6,
		send: r.End.CPU.Host / 100 * sum.Seconds / gb,
		recv: r.End.CPU.Remote / 100 * sum.Seconds / gb,
	}, nil
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
// free memory to the host (free page reporting, once a page has been free
// for min_free_ms: see warnPageReporting), and the first touch of a
// reported page faults into the host: a 1 GiB
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

// warnPageReporting logs, once per benchmark, when this guest hands freed
// pages to its host sooner than a timed round follows the recycling: the
// free page reporting of this VM kind (min_free_ms, 0 here by default)
// then undoes recyclePageCache and the target's writes fault into the
// host again. bench/README.md measured with 60000 (restored afterwards).
func warnPageReporting(b *testing.B) {
	v, err := os.ReadFile("/sys/module/page_reporting/parameters/min_free_ms")
	if err != nil {
		return
	}
	if ms, err := strconv.Atoi(strings.TrimSpace(string(v))); err == nil && ms < 10000 {
		b.Logf("free page reporting hands freed pages to the host after %d ms: the target's page cache faults into the host, "+
			"and CPU figures swing (echo 60000 > /sys/module/page_reporting/parameters/min_free_ms for steadier ones)", ms)
	}
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
