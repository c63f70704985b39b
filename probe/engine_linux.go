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

// checkEvery is how many paths the syscall engine probes between looks at
// the context.
const checkEvery = 64

var fdCWD = unix.AT_FDCWD

// atFDCWD is AT_FDCWD as a system call argument.
var atFDCWD = uintptr(fdCWD)

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

// sysEngine calls statx(2) once per path, from a reused NUL-terminated
// buffer (unix.Statx would allocate a C string per call).
type sysEngine struct {
	closed atomic.Bool
	buf    []byte
	st     unix.Statx_t
}

// NewSyscall returns the engine that calls statx(2) once per path.
func NewSyscall() Engine { return &sysEngine{} }

func (e *sysEngine) Kind() Kind { return KindSyscall }

// Close makes a running Probe stop within checkEvery paths, marking the
// rest ErrClosed, and every later Probe return ErrClosed.
func (e *sysEngine) Close() error { e.closed.Store(true); return nil }

func (e *sysEngine) Probe(ctx context.Context, paths []string, out []Result) error {
	if len(out) < len(paths) {
		return errors.New("probe: result slice shorter than paths")
	}
	if e.closed.Load() {
		return ErrClosed
	}
	for i, path := range paths {
		if i%checkEvery == 0 {
			if e.closed.Load() {
				unanswered(out[i:], ErrClosed, ErrClosed)
				return ErrClosed
			}
			if err := ctx.Err(); err != nil {
				unanswered(out[i:len(paths)], ErrDeadline, err)
				return nil
			}
		}
		e.buf = append(e.buf[:0], path...)
		if len(path) == 0 || hasNUL(e.buf) {
			out[i] = Result{Err: fail(path, ErrFailed, unix.EINVAL)}
			continue
		}
		e.buf = append(e.buf, 0)
		_, _, en := unix.Syscall6(unix.SYS_STATX, atFDCWD, uintptr(unsafe.Pointer(&e.buf[0])),
			uintptr(unix.AT_STATX_SYNC_AS_STAT), uintptr(statxMask), uintptr(unsafe.Pointer(&e.st)), 0)
		if en != 0 {
			out[i] = Result{Err: classify(path, en)}
			continue
		}
		fill(&out[i], &e.st)
	}
	return nil
}

func hasNUL(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			return true
		}
	}
	return false
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

func (e *uringEngine) Probe(ctx context.Context, paths []string, out []Result) error {
	if len(out) < len(paths) {
		return errors.New("probe: result slice shorter than paths")
	}
	b := &e.batch
	b.paths, b.out = paths, out
	defer func() { b.paths, b.out, b.abort, b.abortCause = nil, nil, nil, nil }()
	err := e.ring.Run(ctx, b)
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

type statxBatch struct {
	paths []string
	out   []Result
	// abort is the error shared by the entries the batch did not answer.
	abort, abortCause error
}

func (b *statxBatch) Len() int { return len(b.paths) }

func (b *statxBatch) Prep(i int, sqe *uring.SQE, buf *uring.Buffers) bool {
	path := b.paths[i]
	p, ok := buf.SetPath(path)
	if !ok || len(path) == 0 {
		b.out[i] = Result{Err: fail(path, ErrFailed, unix.EINVAL)}
		return false
	}
	sqe.PrepStatx(unix.AT_FDCWD, p, unix.AT_STATX_SYNC_AS_STAT, statxMask, buf.StatxBuf())
	return true
}

func (b *statxBatch) Complete(i int, res int32, buf *uring.Buffers) {
	if res < 0 {
		b.out[i] = Result{Err: classify(b.paths[i], syscall.Errno(-res))}
		return
	}
	fill(&b.out[i], (*unix.Statx_t)(buf.StatxBuf()))
}

func (b *statxBatch) Abort(i int, err error) {
	if b.abort == nil || b.abortCause != err {
		kind := ErrFailed
		switch {
		case errors.Is(err, uring.ErrClosed):
			kind = ErrClosed
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			kind = ErrDeadline
		}
		b.abort, b.abortCause = &PathError{Kind: kind, Err: err}, err
	}
	b.out[i] = Result{Err: b.abort}
}
