package catchup

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
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
		t.Skip("strace not installed (apt-get install strace): cannot trace the transfer's system calls")
	}
	out := filepath.Join(t.TempDir(), "trace.txt")
	cmd := exec.Command(strace, "-f", "-qq", "-e", "trace=sendfile,splice,copy_file_range", "-o", out,
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
	t.Logf("trace: %d sendfile, %d splice socket→pipe, %d splice pipe→file, %d copy_file_range", sendfile, spliceIn, spliceOut, cfr)
	if sendfile == 0 || spliceIn == 0 || spliceOut == 0 {
		t.Fatalf("zero-copy calls missing from the trace:\n%.2000s", trace)
	}
	if cfr != 0 {
		t.Fatalf("copy_file_range appeared: Go's own fast path ran")
	}
}

func straceChild(t *testing.T) {
	fx := newFixture(t, 4<<20, Limits{}, ModeZeroCopy, ModeZeroCopy)
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.sink, nil); err != nil {
		t.Fatal(err)
	}
	ss, cs := fx.srv.Stats(), fx.cl.Stats()
	if ss.Sendfile == 0 || cs.Splice == 0 {
		t.Fatalf("counters: server %+v client %+v", ss, cs)
	}
}
