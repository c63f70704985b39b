package uring

import (
	"errors"
	"fmt"
)

var (
	// ErrUnavailable is returned by New when the kernel (or the platform)
	// refuses io_uring. errors.As with *RefusedError tells why.
	ErrUnavailable = errors.New("uring: io_uring unavailable")
	// ErrClosed is returned by operations on a closed ring, and recorded for
	// every operation of a batch that was still unanswered when Close ran.
	ErrClosed = errors.New("uring: ring closed")
	// ErrBusy is returned by Run when another Run holds the ring.
	ErrBusy = errors.New("uring: ring busy")
)

// RefusedError says why io_uring cannot be used. It matches ErrUnavailable
// and its Errno (EPERM, ENOSYS, ...) with errors.Is.
type RefusedError struct {
	Reason string // "io_uring_disabled=2", "io_uring_setup: operation not permitted", ...
	Err    error  // the errno, or nil
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("uring: io_uring unavailable: %s", e.Reason)
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *RefusedError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the errno.
func (e *RefusedError) Unwrap() error { return e.Err }
