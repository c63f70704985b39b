//go:build linux

package fsync

import (
	"context"
	"errors"
	"syscall"

	"github.com/malachi-log/malachi/internal/uring"
	"golang.org/x/sys/unix"
)

func openForSync(path string, dir bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if dir {
		flags |= unix.O_DIRECTORY
	}
	for {
		fd, err := unix.Open(path, flags, 0)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

func closeFD(fd int) { _ = unix.Close(fd) }

// syncFD fsyncs (or fdatasyncs) fd, retrying on EINTR.
func syncFD(fd int, dataOnly bool) error {
	for {
		var err error
		if dataOnly {
			err = unix.Fdatasync(fd)
		} else {
			err = unix.Fsync(fd)
		}
		if err != unix.EINTR {
			return err
		}
	}
}

// uringEngine submits one IORING_OP_FSYNC per descriptor, all in flight at
// once (up to the ring size), and waits for all of them.
type uringEngine struct {
	ring  *uring.Ring
	batch fsyncBatch
}

// NewURing opens the io_uring engine with the given queue depth and io-wq
// worker cap (0: kernel default). The error matches uring.ErrUnavailable
// when the kernel refuses io_uring.
func NewURing(entries, maxWorkers uint32) (Engine, error) {
	r, err := uring.New(entries, uring.Options{MaxWorkers: maxWorkers})
	if err != nil {
		return nil, err
	}
	return &uringEngine{ring: r}, nil
}

func (e *uringEngine) Kind() Kind   { return KindURing }
func (e *uringEngine) Close() error { return e.ring.Close() }

func (e *uringEngine) Sync(fds []int, dataOnly []bool, errs []error) {
	b := &e.batch
	b.fds, b.dataOnly, b.errs = fds, dataOnly, errs
	// No deadline: a batch serves many callers, and the descriptors must
	// stay open until the kernel is done with them. Run returns early only
	// when Close interrupts it, after every operation has completed.
	// Every operation gets Complete or Abort, unless the ring was closed
	// before Run started: then none ran.
	for i := range errs {
		errs[i] = ErrClosed
	}
	_ = e.ring.Run(context.Background(), b)
	b.fds, b.dataOnly, b.errs = nil, nil, nil
}

type fsyncBatch struct {
	fds      []int
	dataOnly []bool
	errs     []error
}

func (b *fsyncBatch) Len() int { return len(b.fds) }

func (b *fsyncBatch) Prep(i int, sqe *uring.SQE, _ *uring.Buffers) bool {
	var flags uint32
	if b.dataOnly[i] {
		flags = uring.FsyncDatasync
	}
	sqe.PrepFsync(b.fds[i], flags)
	return true
}

func (b *fsyncBatch) Complete(i int, res int32, _ *uring.Buffers) {
	switch {
	case res == -int32(unix.ECANCELED):
		b.errs[i] = ErrClosed // only Close cancels a sync batch
	case res < 0:
		b.errs[i] = syscall.Errno(-res)
	default:
		b.errs[i] = nil
	}
}

func (b *fsyncBatch) Abort(i int, err error) {
	if errors.Is(err, uring.ErrClosed) {
		b.errs[i] = ErrClosed
		return
	}
	b.errs[i] = err
}
