package uring

import "unsafe"

// Buffers are the memory one in-flight operation lends to the kernel. They
// live in the ring's in-flight table (Go heap, never moved by the collector,
// referenced by the Ring) and are reused only after the operation's
// completion has been reaped, so the kernel never writes into memory that
// Go has freed or handed to another operation.
type Buffers struct {
	Statx [256]byte // struct statx result; see StatxBuf
	Path  []byte    // NUL-terminated path
	// Pin is memory outside the slot that the operation's sqe points into
	// (a caller's arena of NUL-terminated names). Prep sets it; the ring
	// keeps it referenced until the operation's completion is reaped, also
	// when the batch was aborted and the operation became an orphan, and
	// drops it then. The owner must not write into it while the operation
	// may be in flight: after an aborted Run, treat it as the ring's.
	Pin []byte
}

// StatxBuf is the address of the statx result buffer.
func (b *Buffers) StatxBuf() unsafe.Pointer { return unsafe.Pointer(&b.Statx[0]) }

// SetPath copies p into the slot's path buffer with a terminating NUL,
// reusing its capacity, and returns its address. ok is false if p contains
// a NUL byte.
func (b *Buffers) SetPath(p string) (ptr *byte, ok bool) {
	b.Path = append(b.Path[:0], p...)
	for _, c := range b.Path {
		if c == 0 {
			return nil, false
		}
	}
	b.Path = append(b.Path, 0)
	return &b.Path[0], true
}

// Batch is the set of operations one Run submits. The ring calls Prep once
// per operation, in index order, as submission slots free up, then exactly
// one of Complete or Abort per operation. Calls come from the goroutine
// that called Run.
type Batch interface {
	// Len is the number of operations.
	Len() int
	// Prep fills sqe for operation i (its UserData is set by the ring
	// afterwards). buf belongs to this operation until its completion; the
	// sqe may point into it. Prep returning false answers the operation
	// itself (bad input) and submits nothing.
	Prep(i int, sqe *SQE, buf *Buffers) bool
	// Complete delivers the kernel's answer: res is the result, or -errno.
	Complete(i int, res int32, buf *Buffers)
	// Abort says operation i will not be answered: err is ErrClosed, the
	// context's error, or an io_uring_enter failure.
	Abort(i int, err error)
}
