package catchup

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestZeroCopySyscalls proves which system calls move the bytes: it runs a
// zero-copy transfer (server and client in one child process, re-executing
// this test binary) under strace -f and reads the trace. sendfile(2) must
// carry the source side and splice(2) the target side, the latter writing
// the file at an explicit offset; copy_file_range(2) (Go's own os.File
// fast path) must not appear.
func TestZeroCopySyscalls(t *testing.T) {
	if os.Getenv("CATCHUP_STRACE_CHILD") == "1" {
		straceChild(t)
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace not installed (Debian package strace; `make deps` installs it): cannot trace the transfer's system calls")
	}
	out := filepath.Join(t.TempDir(), "trace.txt")
	cmd := exec.Command(strace, "-f", "-qq", "-e", "trace=sendfile,splice,copy_file_range,fallocate", "-o", out,
		os.Args[0], "-test.run=^TestZeroCopySyscalls$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "CATCHUP_STRACE_CHILD=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		if bytes.Contains(b, []byte("PTRACE_TRACEME")) || bytes.Contains(b, []byte("Operation not permitted")) {
			t.Skipf("strace cannot trace here (ptrace refused): %s", b)
		}
		t.Fatalf("traced child: %v\n%s", err, b)
	}
	trace, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	count := func(re string) int { return len(regexp.MustCompile(re).FindAll(trace, -1)) }
	sendfile := count(`(?m)sendfile\(\d+, \d+, \[\d+\]`)           // out_fd=socket, in_fd=copy, offset pointer
	spliceIn := count(`(?m)splice\(\d+, NULL, \d+, NULL, \d+`)     // socket → pipe
	spliceOut := count(`(?m)splice\(\d+, NULL, \d+, \[\d+\], \d+`) // pipe → copy at an explicit offset
	cfr := count(`(?m)copy_file_range\(`)
	falloc := count(`(?m)fallocate\(\d+, FALLOC_FL_KEEP_SIZE, 0, 4194304[) ]`) // the whole range, once
	t.Logf("trace: %d sendfile, %d splice socket→pipe, %d splice pipe→file, %d copy_file_range, %d fallocate", sendfile, spliceIn, spliceOut, cfr, falloc)
	if falloc != 1 {
		t.Fatalf("want one fallocate(KEEP_SIZE) of the whole range before the splices, got %d:\n%.2000s", falloc, trace)
	}
	if sendfile == 0 || spliceIn == 0 || spliceOut == 0 {
		t.Fatalf("zero-copy calls missing from the trace:\n%.2000s", trace)
	}
	if cfr != 0 {
		t.Fatalf("copy_file_range appeared: Go's own fast path ran")
	}
	// Every pipe → file write ends on a writeAlign boundary of the file
	// (the chunks of this 4 MiB transfer end on such boundaries too),
	// except one that drains a full pipe: the socket → pipe splice just
	// before it, on the same thread, found the pipe full (EAGAIN with
	// bytes waiting on the socket; a loaded machine fills the pipe's slots
	// with small fragments before an aligned amount is queued).
	call := regexp.MustCompile(`^(\d+) +splice\(\d+, NULL, \d+, (NULL|\[(\d+)\]), (\d+)`)
	resumed := regexp.MustCompile(`^(\d+) +<\.\.\. splice resumed>`)
	fullBefore := map[string]bool{} // by thread: its last socket → pipe splice got EAGAIN
	pendingIn := map[string]bool{}  // by thread: an unfinished socket → pipe splice
	drained, writes := 0, 0
	for _, l := range strings.Split(string(trace), "\n") {
		if m := resumed.FindStringSubmatch(l); m != nil {
			if pendingIn[m[1]] {
				fullBefore[m[1]] = strings.Contains(l, "EAGAIN")
				pendingIn[m[1]] = false
			}
			continue
		}
		m := call.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		tid := m[1]
		if m[2] == "NULL" {
			pendingIn[tid] = strings.Contains(l, "<unfinished")
			fullBefore[tid] = strings.Contains(l, "EAGAIN")
			continue
		}
		writes++
		off, _ := strconv.ParseInt(m[3], 10, 64)
		n, _ := strconv.ParseInt(m[4], 10, 64)
		if (off+n)%writeAlign == 0 {
			continue
		}
		if fullBefore[tid] {
			drained++
			continue
		}
		t.Errorf("a write into the copy at [%d, %d) does not end on a %d-byte boundary (and drains no full pipe)", off, off+n, writeAlign)
	}
	if writes != spliceOut {
		t.Fatalf("read %d of the trace's %d pipe → file writes with their thread and result:\n%.2000s", writes, spliceOut, trace)
	}
	if drained > 0 {
		t.Logf("%d writes drained a full pipe off the %d-byte boundaries", drained, writeAlign)
	}
}

// Pipes smaller than the write unit still move every byte: the unit
// shrinks to a quarter of the pipe (at least a page), and a one-page pipe
// that fills before a page is complete is emptied instead of waited on
// (EAGAIN with bytes in the socket).
func TestZeroCopySmallPipes(t *testing.T) {
	for _, pipe := range []int{4096, 16 << 10, 64 << 10} {
		t.Run(strconv.Itoa(pipe), func(t *testing.T) {
			fx := newFixture(t, 3<<20+12345, Limits{IdleTimeout: 5 * time.Second}, ModeZeroCopy, ModeZeroCopy)
			fx.cl.pipeSize = pipe
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := fx.cl.Fetch(ctx, fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, nil); err != nil {
				t.Fatalf("pipe of %d bytes: %v", pipe, err)
			}
			if got := fx.targetBytes(t); !bytes.Equal(got, fx.data) {
				t.Fatal("target differs from the source")
			}
		})
	}
}

// The zero-copy target reserves the whole range before the first byte
// lands, without growing the file ahead of the bytes: mid-transfer the file
// is as long as what arrived and already holds blocks for all of it.
func TestZeroCopyPreallocates(t *testing.T) {
	fx := newFixture(t, 8<<20, Limits{}, ModeZeroCopy, ModeZeroCopy)
	path := filepath.Join(fx.sink.dir, string(fx.seg.ID))
	checked := false
	_, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, func(done, total int64) {
		if checked || done == 0 || done == total {
			return
		}
		checked = true
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Errorf("stat mid-transfer: %v", err)
			return
		}
		if st.Size != done || st.Blocks*512 < total {
			t.Errorf("after %d of %d bytes: size %d, %d bytes allocated; want size %d and at least %d allocated",
				done, total, st.Size, st.Blocks*512, done, total)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !checked {
		t.Fatal("no progress call between the first and the last byte")
	}
	if got := fx.targetBytes(t); !bytes.Equal(got, fx.data) {
		t.Fatal("target differs from the source")
	}
}

func straceChild(t *testing.T) {
	fx := newFixture(t, 4<<20, Limits{}, ModeZeroCopy, ModeZeroCopy)
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, nil); err != nil {
		t.Fatal(err)
	}
	ss, cs := fx.srv.Stats(), fx.cl.Stats()
	if ss.Sendfile == 0 || cs.Splice == 0 {
		t.Fatalf("counters: server %+v client %+v", ss, cs)
	}
}

// The wake-up mark follows the last chunk's rate: what arrives in its
// budget, capped, never more than the read still wants, a power of two,
// and it reaches the socket (SO_RCVLOWAT).
func TestWakeMark(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	lowat := func() int {
		var v int
		var gerr error
		rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT) })
		if gerr != nil {
			t.Fatal(gerr)
		}
		return v
	}
	w := wakeMark{rc: rc, budget: 10 * time.Millisecond}
	for _, c := range []struct {
		name string
		n    int
		d    time.Duration
		left int
		want int
	}{
		{"first chunk: the default", 0, 0, 1 << 20, 1},
		{"1 MiB in 1 ms: capped", 1 << 20, time.Millisecond, 1 << 20, maxWakeMark},
		{"capped by what the read wants", 1 << 20, time.Millisecond, 100000, 65536},
		{"1 MiB in 10 s: ~1 KiB in 10 ms", 1 << 20, 10 * time.Second, 1 << 20, 1024},
		{"1 KiB in 1 s: 10 bytes in 10 ms", 1 << 10, time.Second, 1 << 20, 8},
		{"1 byte in 1 s: the default", 1, time.Second, 1 << 20, 1},
		{"a chunk that moved nothing keeps the mark", 0, time.Second, 1 << 20, 1},
		{"1 MiB in no measurable time: capped", 1 << 20, 0, 1 << 20, maxWakeMark},
	} {
		w.observe(c.n, c.d)
		w.apply(c.left)
		if got := lowat(); got != c.want {
			t.Errorf("%s: SO_RCVLOWAT = %d, want %d", c.name, got, c.want)
		}
	}
}

// A source slower than one chunk per idle timeout is not idle: on the
// zero-copy target the deadline moves as bytes land (a 1 MiB splice chunk
// at 768 KiB/s against a 300 ms idle timeout), and the wake-up mark
// follows the slow rate down.
func TestSlowSourceNotIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 1.5 MiB at 768 KiB/s")
	}
	const idle = 300 * time.Millisecond
	fx := newFixture(t, 3<<19, Limits{BytesPerSecond: 768 << 10, IdleTimeout: idle}, ModeZeroCopy, ModeZeroCopy)
	th, err := NewThrottle(Limits{IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	fx.cl.Throttle = th
	start := time.Now()
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, nil); err != nil {
		t.Fatalf("1.5 MiB at 768 KiB/s with a %v idle timeout: %v", idle, err)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("took %v: the throttle did not hold the rate, so the test proves nothing", took)
	}
	if got := fx.targetBytes(t); !bytes.Equal(got, fx.data) {
		t.Fatal("target differs from the source")
	}
}
