//go:build linux

package uring

import (
	"context"
	"runtime"
	"time"
)

// user_data of the ring's own sqes (timers, cancellations) has the top bit
// set; an operation's user_data is its slot index | generation<<32.
const (
	tagInternal uint64 = 1 << 63
	tagTimer           = tagInternal | 1
	tagCancel          = tagInternal | 2
)

type slot struct {
	op   int // batch index, or -1 when free or orphaned
	gen  uint32
	busy bool
	Buffers
}

// Run submits every operation of b, keeping up to Entries() in flight and
// refilling as completions arrive, so batches larger than the ring are
// fine. It returns nil when every operation was answered by the kernel.
//
// When ctx ends (deadline or cancel), Close is called, or io_uring_enter
// fails, Run calls Abort for every unanswered operation, asks the kernel to
// cancel those in flight and returns the reason. The buffers of operations
// that the kernel has not answered yet stay owned by the ring (orphans): the
// next Run or Close reaps them before their slots are reused. After Close,
// Run returns ErrClosed and calls nothing on b.
func (r *Ring) Run(ctx context.Context, b Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() || r.unmapped {
		return ErrClosed
	}
	// io-wq workers belong to the submitting thread: submit a whole batch
	// from one thread so its workers are reused, not spawned per thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	x := &batchRun{r: r, b: b, n: b.Len()}
	if r.inflight > 0 {
		r.reap(x.complete) // orphans of an earlier batch
	}
	deadline, hasDeadline := ctx.Deadline()
	for {
		x.submit()
		if x.mine == 0 && x.next == x.n {
			return nil
		}
		if abort := x.wait(ctx, deadline, hasDeadline); abort != nil {
			x.abort(abort)
			return abort
		}
		r.reap(x.complete)
	}
}

// batchRun is one Run of a batch on r, which holds r.mu: operations of b
// before next have been prepared, mine of them are in flight.
type batchRun struct {
	r    *Ring
	b    Batch
	n    int // b.Len()
	next int // first operation of b not yet prepared
	mine int // this batch's operations in flight
}

// complete handles one CQE: it hands an operation's result to b, or
// releases an orphan, and frees the slot. The ring's own CQEs are ignored.
func (x *batchRun) complete(c *CQE) {
	r := x.r
	if c.UserData&tagInternal != 0 {
		return
	}
	si := uint32(c.UserData)
	s := &r.slots[si]
	if !s.busy || s.gen != uint32(c.UserData>>32) {
		return // cannot happen: every user_data is posted once
	}
	if s.op >= 0 {
		x.b.Complete(s.op, c.Res, &s.Buffers)
		x.mine--
	} else {
		r.orphans--
	}
	s.busy, s.op, s.Pin = false, -1, nil
	r.free = append(r.free, si)
	r.inflight--
}

// submit prepares the batch's next operations into free slots until the
// batch, the free slots or the submission queue runs out. An operation
// that b declines to prepare is skipped and its sqe given back.
func (x *batchRun) submit() {
	r := x.r
	for x.next < x.n && len(r.free) > 0 {
		sqe := r.getSQE()
		if sqe == nil {
			break
		}
		si := r.free[len(r.free)-1]
		s := &r.slots[si]
		if !x.b.Prep(x.next, sqe, &s.Buffers) {
			r.sqPending-- // not published yet: give the sqe back
			s.Pin = nil
			x.next++
			continue
		}
		r.free = r.free[:len(r.free)-1]
		s.gen = (s.gen + 1) & 0x7fffffff
		s.op, s.busy = x.next, true
		sqe.UserData = uint64(si) | uint64(s.gen)<<32
		x.next++
		x.mine++
		r.inflight++
	}
}

// wait submits what is queued and waits for completions, at most until the
// poll interval or ctx's deadline. It returns why the batch must be
// aborted instead (Close, ctx, or io_uring_enter failing), or nil.
func (x *batchRun) wait(ctx context.Context, deadline time.Time, hasDeadline bool) error {
	r := x.r
	if r.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	wait := r.opts.PollInterval
	if hasDeadline {
		d := time.Until(deadline)
		if d <= 0 {
			return context.DeadlineExceeded
		}
		wait = min(wait, d)
	}
	// Wait for a quarter of what is in flight while more is queued, so
	// one enter submits and reaps many; at the end of the batch wait
	// for all of it.
	want := x.mine
	if x.next < x.n {
		want = max(1, x.mine/4)
	}
	return r.enter(uint32(want), wait)
}

// abort ends the batch for reason: it aborts every operation not yet
// submitted, reaps what has completed, aborts and orphans the operations
// still in flight and asks the kernel to cancel them; after Close it
// waits for them all.
func (x *batchRun) abort(reason error) {
	r := x.r
	for i := x.next; i < x.n; i++ {
		x.b.Abort(i, reason)
	}
	_ = r.enter(0, 0)
	r.reap(x.complete)
	for i := range r.slots {
		if s := &r.slots[i]; s.busy && s.op >= 0 {
			x.b.Abort(s.op, reason)
			s.op = -1
			r.orphans++
		}
	}
	if r.inflight > 0 {
		r.cancelInflight()
	}
	if r.closed.Load() {
		r.drain()
	}
}

// cancelInflight submits an ASYNC_CANCEL for every operation in flight.
// Queued io-wq work is cancelled (-ECANCELED); work already running
// finishes on its own.
func (r *Ring) cancelInflight() {
	for i := range r.slots {
		s := &r.slots[i]
		if !s.busy {
			continue
		}
		sqe := r.getSQE()
		if sqe == nil {
			_ = r.enter(0, 0)
			if sqe = r.getSQE(); sqe == nil {
				return
			}
		}
		sqe.PrepCancel(uint64(i)|uint64(s.gen)<<32, 0)
		sqe.UserData = tagCancel
	}
	_ = r.enter(0, 0)
}

// drain waits until every operation in flight has completed and releases
// their slots. Only orphans may be in flight.
func (r *Ring) drain() {
	for r.inflight > 0 {
		if err := r.enter(1, r.opts.PollInterval); err != nil {
			time.Sleep(r.opts.PollInterval) // never spin; the operations must still be waited for
		}
		r.reap(func(c *CQE) {
			if c.UserData&tagInternal != 0 {
				return
			}
			si := uint32(c.UserData)
			s := &r.slots[si]
			if !s.busy || s.gen != uint32(c.UserData>>32) {
				return
			}
			s.busy, s.op, s.Pin = false, -1, nil
			r.free = append(r.free, si)
			r.inflight--
			r.orphans--
		})
	}
}

// InFlight is the number of operations submitted and not yet answered by
// the kernel, orphans of aborted batches included.
func (r *Ring) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight
}
