package catchup

import (
	"fmt"
	"sync/atomic"
)

// The target's write-behind. Received bytes land in the page cache; left
// alone they stay dirty until the kernel's flusher or the Commit's fsync
// writes them, so a whole copy (64 MiB and more) can be flushed by one
// fsync, which stalls every other fsync on the same disk (the clients'
// produce acknowledgements among them) for as long as that takes. The
// write-behind writes the copy out as it arrives instead: once a window of
// DefaultWriteBehind bytes has landed it starts that window's writeback
// (sync_file_range(2), SYNC_FILE_RANGE_WRITE, which does not wait) and
// waits for the window before it (SYNC_FILE_RANGE_WAIT_BEFORE|WRITE|
// WAIT_AFTER). So at most about two windows of a transfer are dirty or
// under writeback at any time, the transfer runs no faster than its disk
// takes the bytes, and the Commit's fsync finds at most the last two
// windows and the tail (whose writeback starts when the last byte lands)
// still to write. sync_file_range writes data only, never metadata, and
// makes nothing durable: durability is still the Commit's fsync of the
// file and its directory.
//
// A failed sync_file_range is an error of the target file, handled as a
// failed write: the transfer stops with a *targetError, and Fetch finishes
// the target with Failer.Fail (the store latches the copy and cuts it back
// to its durable end). Off Linux there is no write-behind.

// DefaultWriteBehind is the write-behind's window: 8 MiB, two receive
// chunks (maxChunk).
const DefaultWriteBehind = 8 << 20

// writebackFunc starts the writeback of f's bytes [off, off+n) (wait
// false) or starts it and waits until it is done, waiting first for any
// writeback of the range already under way (wait true). It is
// sync_file_range(2) on Linux (syncFileRange); tests replace it.
type writebackFunc func(f File, off, n int64, wait bool) error

// writeBehind tracks one transfer's windows. The zero value and a nil
// *writeBehind do nothing.
type writeBehind struct {
	f      File
	sync   writebackFunc // nil: no write-behind
	window int64
	calls  *atomic.Uint64
	next   int64 // the first byte whose writeback has not been started
	prev   int64 // the start of the last window started; -1: none
}

// newWriteBehind is the write-behind of a transfer into f from file
// offset from, in windows of window bytes (DefaultWriteBehind when not
// positive), counting calls of sync in calls. A nil sync gives nil.
func newWriteBehind(f File, from, window int64, sync writebackFunc, calls *atomic.Uint64) *writeBehind {
	if sync == nil {
		return nil
	}
	if window <= 0 {
		window = DefaultWriteBehind
	}
	return &writeBehind{f: f, sync: sync, window: window, calls: calls, next: from, prev: -1}
}

// landed is told that the transfer's bytes are in place up to file offset
// end: it starts the writeback of every window that end completes and
// waits for the window before each.
func (w *writeBehind) landed(end int64) error {
	if w == nil {
		return nil
	}
	for end-w.next >= w.window {
		if err := w.call(w.next, w.window, false); err != nil {
			return err
		}
		if w.prev >= 0 {
			if err := w.call(w.prev, w.window, true); err != nil {
				return err
			}
		}
		w.prev, w.next = w.next, w.next+w.window
	}
	return nil
}

// flush starts the writeback of the bytes up to end that no window
// covered: the transfer's tail, once its last byte landed.
func (w *writeBehind) flush(end int64) error {
	if w == nil || end <= w.next {
		return nil
	}
	off := w.next
	w.next = end
	return w.call(off, end-off, false)
}

// call runs one sync_file_range; its error is a *targetError.
func (w *writeBehind) call(off, n int64, wait bool) error {
	w.calls.Add(1)
	if err := w.sync(w.f, off, n, wait); err != nil {
		what := "starting"
		if wait {
			what = "completing"
		}
		return &targetError{op: "writeback", err: fmt.Errorf("sync_file_range %s the writeback of the copy's bytes [%d, %d): %w", what, off, off+n, err)}
	}
	return nil
}

// wrap makes step (of a transfer into the file at off) report the bytes it
// landed to w; a write-behind error ends the step as a write error would.
func (w *writeBehind) wrap(off int64, step func(int64, int, *keepAlive) (int, error)) func(int64, int, *keepAlive) (int, error) {
	if w == nil {
		return step
	}
	return func(done int64, c int, alive *keepAlive) (int, error) {
		m, err := step(done, c, alive)
		if err == nil {
			err = w.landed(off + done + int64(m))
		}
		return m, err
	}
}
