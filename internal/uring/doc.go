// Package uring is a small pure-Go io_uring ring on golang.org/x/sys/unix:
// setup with a sized SQ/CQ (one mmap when the kernel offers
// IORING_FEAT_SINGLE_MMAP), SQE preparation for the operations Malachi uses
// (STATX, FSYNC with and without DATASYNC, NOP, TIMEOUT, LINK_TIMEOUT,
// ASYNC_CANCEL), submit-and-wait with a deadline, batches larger than the
// ring, the io-wq worker cap, and a typed error when the kernel refuses
// io_uring. It knows nothing about segments. Names mirror giouring and the
// kernel where that reads well; the code is written from the kernel ABI
// (include/uapi/linux/io_uring.h).
//
// Usage:
//
//	r, err := uring.New(1024, uring.Options{MaxWorkers: 128})
//	if errors.Is(err, uring.ErrUnavailable) { /* use plain syscalls */ }
//	defer r.Close()
//	err = r.Run(ctx, batch) // batch implements uring.Batch: Prep, Complete, Abort
//
// Run keeps up to Entries() operations in flight and refills the SQ as
// completions arrive; one io_uring_enter both submits and waits for a
// quarter of what is in flight, so a batch of n operations costs about
// 4n/Entries() system calls.
//
// Invariants:
//
//  1. The SQ tail is published with a store-release (sync/atomic on the
//     mmapped uint32) after the SQEs it covers are written; the CQ tail is
//     read with a load-acquire before the CQEs it covers are read; the CQ
//     head is released with a store-release after they are read. The SQ
//     array is the identity map, written once at setup.
//  2. Every memory address an SQE carries (statx buffer, path bytes,
//     timespec) points into Go-heap memory owned by the Ring (the in-flight
//     table's Buffers, or fields of Ring) or pinned by it (Buffers.Pin, a
//     caller's arena of names), which the collector never moves and which
//     stays referenced until the operation's CQE has been reaped; the slot
//     drops Pin then. A slot is reused only after its CQE is reaped.
//  3. Each operation of a batch gets exactly one answer: Complete (the
//     kernel's result) or Abort (deadline, cancel, Close, enter failure).
//  4. In flight never exceeds SQ entries, and the CQ has twice as many
//     entries, so completions never overflow the CQ.
//  5. An aborted batch leaves its unanswered operations as orphans: the ring
//     has asked the kernel to cancel them, keeps their buffers, and reaps
//     them in the next Run or in Close before their slots are reused.
//
// Concurrency: Run calls are serialized by a mutex; Batch methods run on
// the goroutine that called Run. Close may run concurrently with Run: Run
// notices within Options.PollInterval (10ms), aborts with ErrClosed, and
// Close then cancels what is in flight and waits for the kernel to answer
// every operation before it unmaps the rings, so no completion can write
// into memory that has been released. Close therefore blocks as long as the
// slowest operation already running on an io-wq worker (an fsync can take
// as long as the disk takes).
//
// Refusal: New returns a *RefusedError (errors.Is ErrUnavailable) when
// /proc/sys/kernel/io_uring_disabled is 2, or io_uring_setup fails with
// EPERM (io_uring_disabled=1 outside io_uring_group, seccomp, LSM) or
// ENOSYS (no io_uring). Off Linux New always returns it.
package uring
