//go:build linux

package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/probe"
)

// TestProbeOpensNoCopy: the seed's P5.2, "a read-only stat that never
// opens the log, so steady state costs no descriptors", at the plugin's
// probe (server.probeView) over a real store of 10^4 sealed, confirmed
// copies. inotify watches every shard directory: a probe that opened or
// read a copy would raise IN_OPEN or IN_ACCESS on it. The process's
// descriptors (/proc/self/fd) are the same before and after the steady
// probe. It catches a probe path that opens or reads every copy (a
// durable-end scan or a read per copy in probeView) or keeps one open per
// copy.
func TestProbeOpensNoCopy(t *testing.T) {
	const n = 10_000
	fx := openProbeStore(t, filepath.Join(t.TempDir(), "store"), n)
	defer fx.close()
	pr, err := probe.New(probe.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	s := &server{self: 1, db: fx.db, stat: proberStatter{pr}}
	ctx := context.Background()
	steady := func() {
		t.Helper()
		rep, err := s.probeView(ctx, fx.view)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Copies != n || len(rep.Facts) != 0 {
			t.Fatalf("probe: %d copies, %d facts, want %d and none (every copy intact)", rep.Copies, len(rep.Facts), n)
		}
	}
	steady() // warm: the scratch, the engine, the confirmations

	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Skipf("inotify: %v", err)
	}
	defer unix.Close(in)
	shards := map[string]bool{}
	for i := 0; i < n; i++ {
		shards[filepath.Dir(fx.db.Path(benchSegID(i)))] = true
	}
	for d := range shards {
		if _, err := unix.InotifyAddWatch(in, d, unix.IN_OPEN|unix.IN_ACCESS); err != nil {
			t.Skipf("inotify watch on %s: %v", d, err)
		}
	}
	before := openFDs(t)
	steady()
	after := openFDs(t)
	if after != before {
		t.Errorf("the steady probe changed the process's descriptors from %d to %d", before, after)
	}
	if opened := copyEvents(t, in); len(opened) > 0 {
		t.Errorf("the steady probe raised %d open or read events on copies (first on %q): it must only stat them", len(opened), opened[0])
	}
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// copyEvents drains inotify descriptor in and returns the names of the
// files its events name (a shard directory's own events name none); a
// queue overflow counts as one.
func copyEvents(t *testing.T, in int) []string {
	t.Helper()
	var names []string
	buf := make([]byte, 64<<10)
	for {
		k, err := unix.Read(in, buf)
		if errors.Is(err, unix.EAGAIN) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= k; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				names = append(names, "(inotify queue overflow)")
			case len(name) > 0 && name[0] != 0:
				names = append(names, string(name[:clen(name)]))
			}
		}
	}
}

// clen is the length of the NUL-terminated name in b.
func clen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}
