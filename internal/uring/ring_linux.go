//go:build linux

package uring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Options tune New. The zero value is valid.
type Options struct {
	// MaxWorkers, when non-zero, raises (or lowers) the cap on io-wq workers
	// of this ring, bounded and unbounded, with
	// IORING_REGISTER_IOWQ_MAX_WORKERS. The kernel's default cap on bounded
	// workers is min(SQ entries, 4 × CPUs). STATX and FSYNC run on io-wq
	// workers, so the cap bounds how many run at once.
	MaxWorkers uint32
	// NoExtArg makes the ring wait with a TIMEOUT sqe instead of the
	// IORING_ENTER_EXT_ARG timeout, as on kernels before 5.11. For tests.
	NoExtArg bool
	// PollInterval bounds one wait inside Run, so that Close and a cancelled
	// context are noticed within it. Zero means 10ms.
	PollInterval time.Duration

	disabledFile string // tests: replaces /proc/sys/kernel/io_uring_disabled
}

// Ring is one io_uring instance: a submission queue, a completion queue and
// the in-flight table that owns the buffers of submitted operations.
//
// Run may be called from any goroutine; calls are serialized. Close may be
// called at any time, from any goroutine, also while Run waits.
type Ring struct {
	fd       int
	features uint32
	opts     Options
	entries  uint32 // SQ entries
	cqSize   uint32

	ringMem []byte // SQ ring, and CQ ring with FeatSingleMmap
	cqMem   []byte // CQ ring without FeatSingleMmap
	sqeMem  []byte

	sqHead    *uint32 // written by the kernel
	sqTail    *uint32 // written by us (store-release)
	sqMask    uint32
	sqes      []SQE
	sqPending uint32 // our tail: sqes filled, published at submit

	cqHead *uint32 // written by us (store-release)
	cqTail *uint32 // written by the kernel (load-acquire)
	cqMask uint32
	cqes   []CQE

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	// mu serializes Run and Close; everything below is protected by mu.
	mu       sync.Mutex
	slots    []slot
	free     []uint32
	inflight int // operations submitted (or queued) and not yet completed, orphans included
	orphans  int
	arg      getEventsArg
	waitTS   Timespec
	timerTS  Timespec
	unmapped bool
}

// New sets up a ring with at least entries submission slots (rounded up to
// a power of two by the kernel, clamped to its maximum) and twice as many
// completion slots. It returns a *RefusedError (matching ErrUnavailable)
// when the kernel refuses io_uring: io_uring_disabled, EPERM, ENOSYS.
func New(entries uint32, opts Options) (*Ring, error) {
	if entries == 0 {
		return nil, fmt.Errorf("uring: entries must be > 0, got 0")
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 10 * time.Millisecond
	}
	disabled := "/proc/sys/kernel/io_uring_disabled"
	if opts.disabledFile != "" {
		disabled = opts.disabledFile
	}
	if b, err := os.ReadFile(disabled); err == nil {
		if v := strings.TrimSpace(string(b)); v == "2" {
			return nil, &RefusedError{Reason: disabled + " is 2"}
		}
	}
	var p params
	p.Flags = SetupClamp | SetupSubmitAll
	fd, err := setup(entries, &p)
	if errors.Is(err, unix.EINVAL) {
		p = params{Flags: SetupClamp} // SUBMIT_ALL needs 5.18
		fd, err = setup(entries, &p)
	}
	if err != nil {
		var reason string
		switch {
		case errors.Is(err, unix.ENOSYS):
			reason = "io_uring_setup: ENOSYS (kernel without io_uring, or blocked by seccomp)"
		case errors.Is(err, unix.EPERM):
			reason = "io_uring_setup: EPERM (io_uring_disabled=1 and not in io_uring_group, or a security policy)"
		default:
			reason = "io_uring_setup: " + err.Error()
		}
		return nil, &RefusedError{Reason: reason, Err: err}
	}
	r := &Ring{fd: fd, features: p.Features, opts: opts, entries: p.SQEntries, cqSize: p.CQEntries}
	if err := r.mmap(&p); err != nil {
		r.unmap()
		unix.Close(fd)
		return nil, err
	}
	if opts.MaxWorkers > 0 {
		if _, err := r.setMaxWorkers(opts.MaxWorkers, opts.MaxWorkers); err != nil {
			r.unmap()
			unix.Close(fd)
			return nil, err
		}
	}
	// A Ring dropped without Close may still have operations in flight that
	// write into its buffers: the finalizer runs while the buffers are still
	// reachable from r, and Close waits for those operations.
	runtime.SetFinalizer(r, (*Ring).Close)
	r.slots = make([]slot, r.entries)
	r.free = make([]uint32, 0, r.entries)
	for i := int(r.entries) - 1; i >= 0; i-- {
		r.slots[i].op = -1
		r.free = append(r.free, uint32(i))
	}
	return r, nil
}

func setup(entries uint32, p *params) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

func (r *Ring) mmap(p *params) error {
	sqSize := int(p.SQOff.Array) + int(p.SQEntries)*4
	cqSize := int(p.CQOff.CQEs) + int(p.CQEntries)*int(unsafe.Sizeof(CQE{}))
	single := p.Features&FeatSingleMmap != 0
	if single && cqSize > sqSize {
		sqSize = cqSize
	}
	var err error
	r.ringMem, err = unix.Mmap(r.fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("uring: mmap SQ ring: %w", err)
	}
	cq := r.ringMem
	if !single {
		r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("uring: mmap CQ ring: %w", err)
		}
		cq = r.cqMem
	}
	r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.SQEntries)*int(unsafe.Sizeof(SQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("uring: mmap SQEs: %w", err)
	}
	u32 := func(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	r.sqHead = u32(r.ringMem, p.SQOff.Head)
	r.sqTail = u32(r.ringMem, p.SQOff.Tail)
	r.sqMask = *u32(r.ringMem, p.SQOff.RingMask)
	array := unsafe.Slice(u32(r.ringMem, p.SQOff.Array), p.SQEntries)
	for i := range array {
		array[i] = uint32(i) // identity: sqe i sits in slot i
	}
	r.sqes = unsafe.Slice((*SQE)(unsafe.Pointer(&r.sqeMem[0])), p.SQEntries)
	r.sqPending = atomic.LoadUint32(r.sqTail)

	r.cqHead = u32(cq, p.CQOff.Head)
	r.cqTail = u32(cq, p.CQOff.Tail)
	r.cqMask = *u32(cq, p.CQOff.RingMask)
	r.cqes = unsafe.Slice((*CQE)(unsafe.Pointer(&cq[p.CQOff.CQEs])), p.CQEntries)
	return nil
}

func (r *Ring) unmap() {
	for _, m := range [][]byte{r.sqeMem, r.cqMem, r.ringMem} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMem, r.cqMem, r.ringMem = nil, nil, nil
	r.sqes, r.cqes = nil, nil
	r.unmapped = true
}

// Entries is the number of submission slots, which bounds the operations
// in flight at once.
func (r *Ring) Entries() uint32 { return r.entries }

// Features is the kernel's IORING_FEAT_* set.
func (r *Ring) Features() uint32 { return r.features }

// SetMaxWorkers sets the io-wq worker caps of the ring (0 leaves one
// unchanged) and returns the previous caps of the calling thread's io-wq
// (zeros if this thread has not submitted to a ring yet). io-wq workers
// belong to the thread that submits; the ring's caps apply to every thread
// that has submitted to it and to every thread that will.
func (r *Ring) SetMaxWorkers(bounded, unbounded uint32) (old [2]uint32, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unmapped {
		return old, ErrClosed
	}
	return r.setMaxWorkers(bounded, unbounded)
}

func (r *Ring) setMaxWorkers(bounded, unbounded uint32) ([2]uint32, error) {
	vals := [2]uint32{bounded, unbounded}
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), uintptr(registerIOWQMax),
		uintptr(unsafe.Pointer(&vals)), 2, 0, 0)
	if e != 0 {
		return vals, fmt.Errorf("uring: IORING_REGISTER_IOWQ_MAX_WORKERS %d/%d: %w", bounded, unbounded, e)
	}
	return vals, nil
}

// getSQE returns the next free submission entry, or nil when the SQ is
// full. The entry is published by the next submit.
func (r *Ring) getSQE() *SQE {
	head := atomic.LoadUint32(r.sqHead) // load-acquire: the kernel is done with slots before head
	if r.sqPending-head >= r.entries {
		return nil
	}
	s := &r.sqes[r.sqPending&r.sqMask]
	r.sqPending++
	return s
}

// unsubmitted is the number of sqes filled but not yet consumed by the kernel.
func (r *Ring) unsubmitted() uint32 {
	return r.sqPending - atomic.LoadUint32(r.sqHead)
}

// enter publishes the filled sqes (store-release of the SQ tail after the
// sqes are written), submits them and, if want > 0, waits until want
// completions are posted or timeout passes. A timeout or an interrupted wait
// is not an error: the caller reaps what arrived and decides.
func (r *Ring) enter(want uint32, timeout time.Duration) error {
	atomic.StoreUint32(r.sqTail, r.sqPending)
	toSubmit := r.unsubmitted()
	flags := uint32(0)
	var argp unsafe.Pointer
	var argsz uintptr
	if want > 0 {
		flags |= EnterGetEvents
		if r.features&FeatExtArg != 0 && !r.opts.NoExtArg {
			r.waitTS = Timespec{Sec: int64(timeout / time.Second), Nsec: int64(timeout % time.Second)}
			r.arg = getEventsArg{Ts: uint64(uintptr(unsafe.Pointer(&r.waitTS)))}
			argp, argsz = unsafe.Pointer(&r.arg), unsafe.Sizeof(r.arg)
			flags |= EnterExtArg
		} else {
			// Wait for a TIMEOUT sqe that completes after want other
			// completions or when timeout passes, whichever is first; the
			// kernel reads timerTS while preparing it.
			sqe := r.getSQE()
			if sqe == nil {
				if err := r.enter(0, 0); err != nil {
					return err
				}
				sqe = r.getSQE()
			}
			r.timerTS = Timespec{Sec: int64(timeout / time.Second), Nsec: int64(timeout % time.Second)}
			sqe.PrepTimeout(&r.timerTS, want, 0)
			sqe.UserData = tagTimer
			atomic.StoreUint32(r.sqTail, r.sqPending)
			toSubmit++
			want = 1
		}
	}
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(want),
		uintptr(flags), uintptr(argp), argsz)
	switch e {
	case 0, unix.ETIME, unix.EINTR:
		return nil
	case unix.EAGAIN, unix.EBUSY:
		// The kernel is short of resources or the CQ backlog is full: the
		// caller reaps completions and comes back.
		return nil
	default:
		return fmt.Errorf("uring: io_uring_enter: %w", e)
	}
}

// reap hands every posted completion to fn and releases their CQ slots.
func (r *Ring) reap(fn func(*CQE)) int {
	head := *r.cqHead
	tail := atomic.LoadUint32(r.cqTail) // load-acquire: cqes before tail are written
	n := 0
	for ; head != tail; head++ {
		fn(&r.cqes[head&r.cqMask])
		n++
	}
	atomic.StoreUint32(r.cqHead, head) // store-release: we are done reading them
	return n
}

// Close cancels every operation still in flight, waits until the kernel has
// answered each (cancelled operations answer at once; a statx or fsync
// already running on an io-wq worker answers when it ends), then unmaps the
// rings and closes the ring descriptor. A Run waiting when Close is called
// records ErrClosed for its unanswered operations and returns ErrClosed.
// Close is idempotent.
func (r *Ring) Close() error {
	r.closeOnce.Do(func() {
		r.closed.Store(true)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.inflight > 0 {
			r.cancelInflight()
			r.drain()
		}
		r.unmap()
		r.closeErr = unix.Close(r.fd)
	})
	return r.closeErr
}
