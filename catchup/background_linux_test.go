package catchup

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// threadPriority is the calling thread's nice value and I/O priority.
func threadPriority(t testing.TB) (nice, ioprio int) {
	tid := unix.Gettid()
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid) // the raw call returns 20 - nice
	if err != nil {
		t.Errorf("getpriority(%d): %v", tid, err)
	}
	p, _, errno := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if errno != 0 {
		t.Errorf("ioprio_get(%d): %v", tid, errno)
	}
	return 20 - raw, int(p)
}

// inBackground runs its function on another thread at nice 19 and
// best-effort I/O priority 7, returns when it returned, and leaves the
// caller's thread as it was.
func TestInBackgroundLowersItsOwnThreadOnly(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	caller := unix.Gettid()
	niceBefore, ioBefore := threadPriority(t)
	var tid, nice, io int
	ran := false
	inBackground(func() {
		tid = unix.Gettid()
		nice, io = threadPriority(t)
		ran = true
	})
	if !ran {
		t.Fatal("inBackground returned before its function ran")
	}
	if tid == caller {
		t.Fatalf("the background function ran on the caller's thread %d", caller)
	}
	if nice != backgroundNice || io != backgroundIOPrio {
		t.Fatalf("background thread at nice %d, ioprio %#x: want nice %d, ioprio %#x", nice, io, backgroundNice, backgroundIOPrio)
	}
	if n, i := threadPriority(t); n != niceBefore || i != ioBefore {
		t.Fatalf("caller's thread now at nice %d, ioprio %#x: was nice %d, ioprio %#x", n, i, niceBefore, ioBefore)
	}
}

// The process's main thread, whose nice value ps and top show as the
// process's, is never the one lowered, however often a background run
// starts.
func TestInBackgroundNeverLowersTheMainThread(t *testing.T) {
	pid := unix.Getpid()
	mainNice := func() int {
		raw, err := unix.Getpriority(unix.PRIO_PROCESS, pid)
		if err != nil {
			t.Fatalf("getpriority(%d): %v", pid, err)
		}
		return 20 - raw
	}
	before := mainNice()
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			inBackground(func() {
				if tid := unix.Gettid(); tid == pid {
					t.Errorf("a background run on the main thread %d", pid)
				}
			})
		})
	}
	wg.Wait()
	if n := mainNice(); n != before {
		t.Fatalf("the main thread is at nice %d after the background runs: was %d", n, before)
	}
}

// A fetch through a Throttle with Limits.Background moves its bytes and
// commits on a background thread (the progress callback, called as bytes
// land, and the target's Commit run there); without it, at the caller's
// priority. Both copies arrive whole.
func TestFetchInBackground(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	callerNice, callerIO := threadPriority(t)
	type prio struct{ nice, io int }
	for _, background := range []bool{true, false} {
		fx := newStoreFixture(t, store.Options{}, "")
		seg, _ := sealed(t, fx.src, "seg-bg", 0, 200, 20000, 5)
		th, err := NewThrottle(Limits{Background: background})
		if err != nil {
			t.Fatal(err)
		}
		fx.cl.Throttle = th
		var seen []prio
		note := func() {
			n, i := threadPriority(t)
			seen = append(seen, prio{n, i})
		}
		progress := func(done, total int64) {
			if done > 0 { // not Fetch's report of where it starts, before any byte moves
				note()
			}
		}
		sink := noteCommit{Sink: StoreSink{DB: fx.dst}, note: note}
		if _, err := fx.cl.Fetch(context.Background(), fx.addr, seg, storeTicket(t, seg, nil), sink, progress); err != nil {
			t.Fatal(err)
		}
		fx.checkSame(t, seg)
		if len(seen) < 2 {
			t.Fatalf("%d progress reports and commits seen: want at least one of each", len(seen))
		}
		want := prio{backgroundNice, backgroundIOPrio}
		if !background {
			want = prio{callerNice, callerIO}
		}
		for _, p := range seen {
			if p != want {
				t.Fatalf("Background %v: bytes moved or committed at nice %d, ioprio %#x: want nice %d, ioprio %#x", background, p.nice, p.io, want.nice, want.io)
			}
		}
	}
}

// noteCommit is a Sink whose targets call note as their Commit begins.
type noteCommit struct {
	Sink
	note func()
}

func (s noteCommit) OpenTarget(seg meta.Segment) (Target, error) {
	t, err := s.Sink.OpenTarget(seg)
	return noteTarget{t, s.note}, err
}

type noteTarget struct {
	Target
	note func()
}

func (t noteTarget) Commit() error { t.note(); return t.Target.Commit() }
