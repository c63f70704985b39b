//go:build linux

package probe

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/malachi-log/malachi/internal/uring"
	"golang.org/x/sys/unix"
)

// statxMask asks for what Result carries; device numbers always come back.
const statxMask = unix.STATX_TYPE | unix.STATX_SIZE | unix.STATX_INO

// checkEvery is how many targets the syscall engine probes between looks
// at the context.
const checkEvery = 64

// CWD is AT_FDCWD.
var _ = [1]struct{}{}[CWD-unix.AT_FDCWD]

// statxFlags are the statx flags for the targets of b.
func statxFlags(b *Batch) int {
	if b.follow {
		return unix.AT_STATX_SYNC_AS_STAT
	}
	return unix.AT_STATX_SYNC_AS_STAT | unix.AT_SYMLINK_NOFOLLOW
}

// errno classifies a statx result.
func classify(path string, e syscall.Errno) error {
	switch e {
	case unix.ENOENT, unix.ENOTDIR:
		return fail(path, ErrNotExist, e)
	}
	return fail(path, ErrFailed, e)
}

func fill(r *Result, st *unix.Statx_t) {
	*r = Result{Size: int64(st.Size), Dev: unix.Mkdev(st.Dev_major, st.Dev_minor), Ino: st.Ino}
}

// sysEngine calls statx(2) once per target, on the batch's NUL-terminated
// names (unix.Statx would allocate a C string per call).
type sysEngine struct {
	closed atomic.Bool
	buf    []byte // a path batch's name, NUL-terminated
	st     unix.Statx_t
}

// NewSyscall returns the engine that calls statx(2) once per target.
func NewSyscall() Engine { return &sysEngine{} }

func (e *sysEngine) Kind() Kind { return KindSyscall }

// Close makes a running ProbeRange stop within checkEvery targets, marking
// the rest ErrClosed, and every later ProbeRange return ErrClosed.
func (e *sysEngine) Close() error { e.closed.Store(true); return nil }

func (e *sysEngine) ProbeRange(ctx context.Context, b *Batch, from int, out []Result) error {
	if from < 0 || from+len(out) > b.Len() {
		return errors.New("probe: range past the end of the batch")
	}
	if e.closed.Load() {
		return ErrClosed
	}
	flags := uintptr(statxFlags(b))
	for j := range out {
		if j%checkEvery == 0 {
			if e.closed.Load() {
				unanswered(out[j:], ErrClosed, ErrClosed)
				return ErrClosed
			}
			if err := ctx.Err(); err != nil {
				unanswered(out[j:], ErrDeadline, err)
				return nil
			}
		}
		i := from + j
		name, ok := b.cname(i, &e.buf)
		if !ok {
			out[j] = Result{Err: fail(b.name(i), ErrFailed, unix.EINVAL)}
			continue
		}
		_, _, en := unix.Syscall6(unix.SYS_STATX, uintptr(b.dirfd(i)), uintptr(unsafe.Pointer(name)),
			flags, uintptr(statxMask), uintptr(unsafe.Pointer(&e.st)), 0)
		if en != 0 {
			out[j] = Result{Err: classify(b.name(i), en)}
			continue
		}
		fill(&out[j], &e.st)
	}
	return nil
}

// uringEngine submits one IORING_OP_STATX per path through a ring, keeping
// the ring full and refilling as completions arrive.
type uringEngine struct {
	ring  *uring.Ring
	batch statxBatch
}

// NewURing opens the io_uring engine with the given queue depth and io-wq
// worker cap (0: kernel default). It returns an error matching
// uring.ErrUnavailable when the kernel refuses io_uring.
func NewURing(entries, maxWorkers uint32) (Engine, error) {
	r, err := uring.New(entries, uring.Options{MaxWorkers: maxWorkers})
	if err != nil {
		return nil, err
	}
	return &uringEngine{ring: r}, nil
}

func (e *uringEngine) Kind() Kind   { return KindURing }
func (e *uringEngine) Close() error { return e.ring.Close() }

func (e *uringEngine) ProbeRange(ctx context.Context, b *Batch, from int, out []Result) error {
	if from < 0 || from+len(out) > b.Len() {
		return errors.New("probe: range past the end of the batch")
	}
	sb := &e.batch
	sb.b, sb.from, sb.out, sb.flags = b, from, out, statxFlags(b)
	defer func() { sb.b, sb.out, sb.abort, sb.abortCause = nil, nil, nil, nil }()
	err := e.ring.Run(ctx, sb)
	if err != nil && b.paths == nil && e.ring.InFlight() > 0 {
		// Orphans still point into b's arena (their sqes carry its
		// addresses and their slots pin it): leave it to them.
		b.detach()
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, uring.ErrClosed):
		return ErrClosed
	case ctx.Err() != nil:
		return nil // entries past the deadline carry ErrDeadline
	}
	return nil // an enter failure: the entries carry ErrFailed
}

// statxBatch adapts targets from..from+len(out) of a Batch to uring.Batch.
// Each sqe points at the target's name in the batch's arena, which the
// operation's slot pins (Buffers.Pin) until its completion is reaped; a
// path batch's name is copied into the slot's own Buffers.Path.
type statxBatch struct {
	b     *Batch
	from  int
	out   []Result
	flags int
	// abort is the error shared by the entries the batch did not answer.
	abort, abortCause error
}

func (s *statxBatch) Len() int { return len(s.out) }

func (s *statxBatch) Prep(j int, sqe *uring.SQE, buf *uring.Buffers) bool {
	i := s.from + j
	name, ok := s.b.cname(i, &buf.Path) // a path batch's name is copied into the slot
	if !ok {
		s.out[j] = Result{Err: fail(s.b.name(i), ErrFailed, unix.EINVAL)}
		return false
	}
	if s.b.paths == nil {
		buf.Pin = s.b.arena
	}
	sqe.PrepStatx(s.b.dirfd(i), name, s.flags, statxMask, buf.StatxBuf())
	return true
}

func (s *statxBatch) Complete(j int, res int32, buf *uring.Buffers) {
	if res < 0 {
		s.out[j] = Result{Err: classify(s.b.name(s.from+j), syscall.Errno(-res))}
		return
	}
	fill(&s.out[j], (*unix.Statx_t)(buf.StatxBuf()))
}

func (s *statxBatch) Abort(j int, err error) {
	if s.abort == nil || s.abortCause != err {
		kind := ErrFailed
		switch {
		case errors.Is(err, uring.ErrClosed):
			kind = ErrClosed
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			kind = ErrDeadline
		}
		s.abort, s.abortCause = &PathError{Kind: kind, Err: err}, err
	}
	s.out[j] = Result{Err: s.abort}
}
