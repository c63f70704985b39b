//go:build linux

package uring

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func newRing(t *testing.T, entries uint32, opts Options) *Ring {
	t.Helper()
	r, err := New(entries, opts)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("io_uring refused on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// nops is a batch of no-ops (or, with timeout, of TIMEOUT sqes that each
// wait that long).
type nops struct {
	n        int
	timeout  *Timespec
	res      []int32
	answered []int
	aborted  []error
}

func newNops(n int) *nops {
	return &nops{n: n, res: make([]int32, n), answered: make([]int, n), aborted: make([]error, n)}
}
func (b *nops) Len() int { return b.n }
func (b *nops) Prep(i int, sqe *SQE, _ *Buffers) bool {
	if b.timeout != nil {
		sqe.PrepTimeout(b.timeout, 0, 0)
	} else {
		sqe.PrepNop()
	}
	return true
}
func (b *nops) Complete(i int, res int32, _ *Buffers) { b.res[i] = res; b.answered[i]++ }
func (b *nops) Abort(i int, err error)                { b.aborted[i] = err; b.answered[i]++ }

func TestLayout(t *testing.T) {
	if s := unsafe.Sizeof(SQE{}); s != 64 {
		t.Fatalf("sizeof SQE = %d, want 64", s)
	}
	if s := unsafe.Sizeof(CQE{}); s != 16 {
		t.Fatalf("sizeof CQE = %d, want 16", s)
	}
	if s := unsafe.Sizeof(params{}); s != 120 {
		t.Fatalf("sizeof params = %d, want 120", s)
	}
	if s := unsafe.Sizeof(getEventsArg{}); s != 24 {
		t.Fatalf("sizeof getEventsArg = %d, want 24", s)
	}
	if s := unsafe.Sizeof(unix.Statx_t{}); s != 256 {
		t.Fatalf("sizeof Statx_t = %d, want 256", s)
	}
}

func TestBatchLargerThanRing(t *testing.T) {
	for _, noExt := range []bool{false, true} {
		r := newRing(t, 8, Options{NoExtArg: noExt})
		if r.Entries() != 8 {
			t.Fatalf("entries = %d, want 8", r.Entries())
		}
		b := newNops(1000)
		if err := r.Run(context.Background(), b); err != nil {
			t.Fatalf("noExtArg=%v: %v", noExt, err)
		}
		for i, a := range b.answered {
			if a != 1 || b.res[i] != 0 || b.aborted[i] != nil {
				t.Fatalf("noExtArg=%v: op %d answered %d times, res %d, abort %v", noExt, i, a, b.res[i], b.aborted[i])
			}
		}
		if r.InFlight() != 0 {
			t.Fatalf("in flight after batch: %d", r.InFlight())
		}
	}
}

type statxBatch struct {
	paths []string
	res   []int32
	st    []unix.Statx_t
}

func (b *statxBatch) Len() int { return len(b.paths) }
func (b *statxBatch) Prep(i int, sqe *SQE, buf *Buffers) bool {
	p, ok := buf.SetPath(b.paths[i])
	if !ok {
		b.res[i] = -int32(unix.EINVAL)
		return false
	}
	sqe.PrepStatx(unix.AT_FDCWD, p, 0, unix.STATX_SIZE|unix.STATX_INO, buf.StatxBuf())
	return true
}
func (b *statxBatch) Complete(i int, res int32, buf *Buffers) {
	b.res[i] = res
	b.st[i] = *(*unix.Statx_t)(buf.StatxBuf())
}
func (b *statxBatch) Abort(i int, err error) { b.res[i] = -1 }

func TestStatxAndFsync(t *testing.T) {
	r := newRing(t, 4, Options{MaxWorkers: 16})
	dir := t.TempDir()
	var paths []string
	for i := range 20 {
		p := filepath.Join(dir, string(rune('a'+i)))
		if err := os.WriteFile(p, make([]byte, i*100), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	paths = append(paths, filepath.Join(dir, "missing"), "bad\x00path")
	b := &statxBatch{paths: paths, res: make([]int32, len(paths)), st: make([]unix.Statx_t, len(paths))}
	if err := r.Run(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if b.res[i] != 0 || b.st[i].Size != uint64(i*100) {
			t.Fatalf("%s: res %d size %d, want 0 and %d", paths[i], b.res[i], b.st[i].Size, i*100)
		}
	}
	if b.res[20] != -int32(unix.ENOENT) {
		t.Fatalf("missing: res %d, want -ENOENT", b.res[20])
	}
	if b.res[21] != -int32(unix.EINVAL) {
		t.Fatalf("NUL path: res %d, want -EINVAL from Prep", b.res[21])
	}

	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fb := &fsyncBatch{fds: []int{int(f.Fd()), int(f.Fd()), -1}, flags: []uint32{0, FsyncDatasync, 0}, res: make([]int32, 3)}
	if err := r.Run(context.Background(), fb); err != nil {
		t.Fatal(err)
	}
	if fb.res[0] != 0 || fb.res[1] != 0 || fb.res[2] != -int32(unix.EBADF) {
		t.Fatalf("fsync results %v, want [0 0 -EBADF]", fb.res)
	}
	// The caps live in the io-wq of each thread that submits to the ring;
	// read them back on a thread that has submitted.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := r.Run(context.Background(), newNops(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetMaxWorkers(32, 24); err != nil {
		t.Fatal(err)
	}
	old, err := r.SetMaxWorkers(0, 0) // 0: unchanged, returns the caps
	if err != nil {
		t.Fatal(err)
	}
	if old != [2]uint32{32, 24} {
		t.Fatalf("io-wq caps %v, want [32 24]", old)
	}
}

type fsyncBatch struct {
	fds   []int
	flags []uint32
	res   []int32
}

func (b *fsyncBatch) Len() int { return len(b.fds) }
func (b *fsyncBatch) Prep(i int, sqe *SQE, _ *Buffers) bool {
	sqe.PrepFsync(b.fds[i], b.flags[i])
	return true
}
func (b *fsyncBatch) Complete(i int, res int32, _ *Buffers) { b.res[i] = res }
func (b *fsyncBatch) Abort(i int, err error)                { b.res[i] = -1 }

// A batch of 64 timeouts of 10s each on a ring of 16: the deadline passes
// while the first 16 wait and 48 are not submitted yet.
func TestDeadlineMidBatch(t *testing.T) {
	for _, noExt := range []bool{false, true} {
		r := newRing(t, 16, Options{NoExtArg: noExt})
		b := newNops(64)
		b.timeout = &Timespec{Sec: 10}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		err := r.Run(ctx, b)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("noExtArg=%v: Run = %v, want DeadlineExceeded", noExt, err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("Run took %v after a 50ms deadline", el)
		}
		for i := range 64 {
			if b.answered[i] != 1 || !errors.Is(b.aborted[i], context.DeadlineExceeded) {
				t.Fatalf("op %d: answered %d, abort %v", i, b.answered[i], b.aborted[i])
			}
		}
		// The cancelled timeouts are reaped by the next batch.
		nb := newNops(100)
		if err := r.Run(context.Background(), nb); err != nil {
			t.Fatal(err)
		}
		if got := r.InFlight(); got != 0 {
			t.Fatalf("in flight after the next batch: %d, want 0 (orphans reaped)", got)
		}
	}
}

func TestCloseWhileBatchWaits(t *testing.T) {
	r := newRing(t, 8, Options{})
	b := newNops(20)
	b.timeout = &Timespec{Sec: 30}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background(), b) }()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Close took %v", el)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	for i := range 20 {
		if b.answered[i] != 1 || !errors.Is(b.aborted[i], ErrClosed) {
			t.Fatalf("op %d: answered %d, abort %v", i, b.answered[i], b.aborted[i])
		}
	}
	if err := r.Run(context.Background(), newNops(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestRefusedWhenDisabled(t *testing.T) {
	f := filepath.Join(t.TempDir(), "io_uring_disabled")
	if err := os.WriteFile(f, []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(8, Options{disabledFile: f})
	var re *RefusedError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &re) {
		t.Fatalf("New with io_uring_disabled=2: %v, want a *RefusedError", err)
	}
	if _, err := New(0, Options{}); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("New(0) = %v, want an input error", err)
	}
}

// linked is a TIMEOUT of 10s linked to a LINK_TIMEOUT of 20ms: the link
// timeout fires and cancels the first.
type linked struct {
	long, short Timespec
	res         [2]int32
}

func (b *linked) Len() int { return 2 }
func (b *linked) Prep(i int, sqe *SQE, _ *Buffers) bool {
	if i == 0 {
		sqe.PrepTimeout(&b.long, 0, 0)
		sqe.Flags |= SQEIOLink
	} else {
		sqe.PrepLinkTimeout(&b.short, 0)
	}
	return true
}
func (b *linked) Complete(i int, res int32, _ *Buffers) { b.res[i] = res }
func (b *linked) Abort(i int, err error)                { b.res[i] = 1 }

func TestLinkTimeout(t *testing.T) {
	r := newRing(t, 8, Options{})
	b := &linked{long: Timespec{Sec: 10}, short: Timespec{Nsec: int64(20 * time.Millisecond)}}
	start := time.Now()
	if err := r.Run(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("linked timeout took %v", el)
	}
	if b.res[0] != -int32(unix.ECANCELED) || b.res[1] != -int32(unix.ETIME) {
		t.Fatalf("results %v, want [-ECANCELED -ETIME]", b.res)
	}
}
