package catchup

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/store"
)

// wbCall is one writebackFunc call as a test saw it.
type wbCall struct {
	off, n int64
	wait   bool
}

func (c wbCall) String() string {
	if c.wait {
		return fmt.Sprintf("wait[%d,%d)", c.off, c.off+c.n)
	}
	return fmt.Sprintf("start[%d,%d)", c.off, c.off+c.n)
}

// wbRecorder records the write-behind's calls; fail, when set, answers
// each call (nil: success).
type wbRecorder struct {
	mu    sync.Mutex
	calls []wbCall
	fail  func(i int, c wbCall) error
}

func (r *wbRecorder) writeback(_ File, off, n int64, wait bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := wbCall{off, n, wait}
	r.calls = append(r.calls, c)
	if r.fail != nil {
		return r.fail(len(r.calls)-1, c)
	}
	return nil
}

func (r *wbRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := make([]string, len(r.calls))
	for i, c := range r.calls {
		s[i] = c.String()
	}
	return strings.Join(s, " ")
}

// Each completed window's writeback is started, then the window before it
// is waited for; landings inside a window issue nothing; the tail is
// started by flush. Windows count from the transfer's first byte.
func TestWriteBehindWindows(t *testing.T) {
	var rec wbRecorder
	var calls atomic.Uint64
	w := newWriteBehind(nil, 100, 10, rec.writeback, &calls)
	for _, step := range []struct {
		end  int64
		want string
	}{
		{105, ""},
		{110, "start[100,110)"},
		{119, "start[100,110)"},
		{120, "start[100,110) start[110,120) wait[100,110)"},
		// One landing that completes two windows issues both in order.
		{145, "start[100,110) start[110,120) wait[100,110) start[120,130) wait[110,120) start[130,140) wait[120,130)"},
	} {
		if err := w.landed(step.end); err != nil {
			t.Fatal(err)
		}
		if got := rec.String(); got != step.want {
			t.Fatalf("after bytes landed up to %d: calls %q, want %q", step.end, got, step.want)
		}
	}
	if err := w.flush(145); err != nil {
		t.Fatal(err)
	}
	if err := w.flush(145); err != nil { // nothing new: no call
		t.Fatal(err)
	}
	want := "start[100,110) start[110,120) wait[100,110) start[120,130) wait[110,120) start[130,140) wait[120,130) start[140,145)"
	if got := rec.String(); got != want {
		t.Fatalf("after flush: %q, want %q", got, want)
	}
	if calls.Load() != 8 {
		t.Fatalf("counted %d calls, want 8", calls.Load())
	}
	// Without a writeback function there is no write-behind, and a nil
	// *writeBehind does nothing.
	if w := newWriteBehind(nil, 0, 10, nil, &calls); w != nil {
		t.Fatalf("write-behind without a writeback function: %+v", w)
	}
	var none *writeBehind
	if none.landed(1<<40) != nil || none.flush(1<<40) != nil {
		t.Fatal("a nil write-behind reported an error")
	}
}

// A whole fetch issues the windows over the copy in order, on both receive
// paths, and the copy arrives whole.
func TestStoreWriteBehindWindows(t *testing.T) {
	for _, mode := range []Mode{ModeZeroCopy, ModeReadWrite} {
		t.Run(mode.String(), func(t *testing.T) {
			fx := newStoreFixture(t, store.Options{}, "")
			seg, _ := sealed(t, fx.src, "seg-wb", 0, 200, 20000, 3) // ~2 MiB
			var rec wbRecorder
			fx.cl.Mode, fx.cl.writeback, fx.cl.wbWindow = mode, rec.writeback, 256<<10
			if _, err := fx.fetch(t, fx.addr, seg); err != nil {
				t.Fatal(err)
			}
			fx.checkSame(t, seg)
			size := seg.ByteSize + store.FooterSize
			var next, waited int64
			for i, c := range rec.calls {
				switch {
				case c.wait && c.off == waited && c.n == 256<<10 && c.off+c.n < next:
					waited += c.n
				case !c.wait && c.off == next && (c.n == 256<<10 || c.off+c.n == size):
					next += c.n
				default:
					t.Fatalf("call %d is %v after %d bytes started and %d waited for: %v", i, c, next, waited, &rec)
				}
			}
			if next != size || waited != (size/(256<<10)-1)*(256<<10) {
				t.Fatalf("writeback started up to %d, waited for up to %d, of %d bytes: %v", next, waited, size, &rec)
			}
			if st := fx.cl.Stats(); st.Writeback != uint64(len(rec.calls)) {
				t.Fatalf("Stats.Writeback %d, %d calls made", st.Writeback, len(rec.calls))
			}
		})
	}
}

// A failing sync_file_range fails the transfer as a failed write does: the
// error says what failed and wraps ErrTarget and the cause, the target's
// copy is latched, the source's is untouched, and after a restart the
// target resumes from its durable end and completes the copy.
func TestStoreWriteBehindFailure(t *testing.T) {
	for _, mode := range []Mode{ModeZeroCopy, ModeReadWrite} {
		for _, failAt := range []int{2, -1} { // the third call (a wait); the tail's start
			t.Run(fmt.Sprintf("%s/call=%d", mode, failAt), func(t *testing.T) {
				dstDir := t.TempDir()
				fx := newStoreFixture(t, store.Options{}, dstDir)
				seg, bounds := sealed(t, fx.src, "seg-wbfail", 0, 200, 20000, 4)
				size := seg.ByteSize + store.FooterSize
				rec := wbRecorder{fail: func(i int, c wbCall) error {
					if i == failAt || (failAt < 0 && c.off+c.n == size) {
						return syscall.EIO
					}
					return nil
				}}
				fx.cl.Mode, fx.cl.writeback, fx.cl.wbWindow = mode, rec.writeback, 256<<10
				res, err := fx.fetch(t, fx.addr, seg)
				if !errors.Is(err, ErrTarget) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "sync_file_range") {
					t.Fatalf("fetch with a failing sync_file_range: %v, want %v wrapping EIO and naming sync_file_range", err, ErrTarget)
				}
				if lerr := fx.dst.LatchErr(seg.ID); !errors.Is(lerr, store.ErrLatched) || !errors.Is(lerr, syscall.EIO) {
					t.Fatalf("after the failure the copy's latch is %v, want %v wrapping EIO", lerr, store.ErrLatched)
				}
				if err := fx.src.Verify(seg.ID, seg); err != nil {
					t.Fatalf("the source copy after the failed transfer: %v", err)
				}
				// A restart clears the latch; the copy is at a frame
				// boundary, and the next fetch completes it from there.
				if err := fx.dst.Close(); err != nil {
					t.Fatal(err)
				}
				fx.dst = openDB(t, dstDir, store.Options{})
				end, err := fx.dst.DurableEnd(seg.ID)
				if err != nil {
					t.Fatal(err)
				}
				if end.Bytes > min(res.Received, seg.ByteSize) || floorBoundary(bounds, end.Bytes) != end.Bytes {
					t.Fatalf("after the failure (received %d): target at %+v, want a frame boundary within what arrived", res.Received, end)
				}
				fx.cl.writeback = nil
				res, err = fx.fetch(t, fx.addr, seg)
				if err != nil {
					t.Fatalf("fetch after the restart: %v", err)
				}
				if res.From != end.Bytes && !(end.Bytes == seg.ByteSize && res.From == size) {
					t.Fatalf("resumed at %d, want the durable end %d", res.From, end.Bytes)
				}
				fx.checkSame(t, seg)
			})
		}
	}
}
