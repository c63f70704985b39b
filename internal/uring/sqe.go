package uring

import (
	"unsafe"
)

// The Prep methods overwrite the whole entry, so an SQE taken from the ring
// never carries fields of the operation that used the slot before.

// PrepNop prepares a no-op.
func (s *SQE) PrepNop() {
	*s = SQE{Opcode: OpNop, Fd: -1}
}

// PrepStatx prepares statx(dirfd, path, flags, mask, buf). path must be
// NUL-terminated and, like buf, must stay referenced and unmoved (Go heap
// memory, which the collector never moves) until the completion arrives.
func (s *SQE) PrepStatx(dirfd int, path *byte, flags int, mask uint32, buf unsafe.Pointer) {
	*s = SQE{
		Opcode:  OpStatx,
		Fd:      int32(dirfd),
		Addr:    uint64(uintptr(unsafe.Pointer(path))),
		Len:     mask,
		Off:     uint64(uintptr(buf)),
		OpFlags: uint32(flags),
	}
}

// PrepFsync prepares fsync(fd), or fdatasync(fd) with FsyncDatasync.
func (s *SQE) PrepFsync(fd int, flags uint32) {
	*s = SQE{Opcode: OpFsync, Fd: int32(fd), OpFlags: flags}
}

// PrepTimeout prepares a timeout that completes with -ETIME when ts passes
// (relative, or absolute on CLOCK_MONOTONIC with TimeoutAbs), or earlier
// once count other completions have been posted (0: only the clock). ts must
// stay referenced until the completion arrives.
func (s *SQE) PrepTimeout(ts *Timespec, count uint32, flags uint32) {
	*s = SQE{
		Opcode:  OpTimeout,
		Fd:      -1,
		Addr:    uint64(uintptr(unsafe.Pointer(ts))),
		Len:     1,
		Off:     uint64(count),
		OpFlags: flags,
	}
}

// PrepLinkTimeout prepares a timeout for the sqe before it, which must carry
// SQEIOLink: if ts passes first, that operation is cancelled.
func (s *SQE) PrepLinkTimeout(ts *Timespec, flags uint32) {
	*s = SQE{
		Opcode:  OpLinkTimeout,
		Fd:      -1,
		Addr:    uint64(uintptr(unsafe.Pointer(ts))),
		Len:     1,
		OpFlags: flags,
	}
}

// PrepCancel prepares the cancellation of the request whose user data is
// userData (flags 0), or of every request (AsyncCancelAny|AsyncCancelAll).
func (s *SQE) PrepCancel(userData uint64, flags uint32) {
	*s = SQE{Opcode: OpAsyncCancel, Fd: -1, Addr: userData, OpFlags: flags}
}
