package uring

// Kernel ABI of io_uring (include/uapi/linux/io_uring.h), the subset this
// package uses. Names follow the kernel (and giouring) where that reads well.

// Setup flags (io_uring_params.flags).
const (
	SetupClamp     uint32 = 1 << 4 // IORING_SETUP_CLAMP: clamp entries instead of failing
	SetupSubmitAll uint32 = 1 << 7 // IORING_SETUP_SUBMIT_ALL: keep submitting after an sqe fails
)

// Features reported by the kernel (io_uring_params.features).
const (
	FeatSingleMmap uint32 = 1 << 0 // IORING_FEAT_SINGLE_MMAP: SQ and CQ rings share one mmap
	FeatNoDrop     uint32 = 1 << 1 // IORING_FEAT_NODROP: CQ overflow is kept, never dropped
	FeatExtArg     uint32 = 1 << 8 // IORING_FEAT_EXT_ARG: io_uring_enter takes a timeout
)

// io_uring_enter flags.
const (
	EnterGetEvents uint32 = 1 << 0 // IORING_ENTER_GETEVENTS
	EnterExtArg    uint32 = 1 << 3 // IORING_ENTER_EXT_ARG
)

// mmap offsets.
const (
	offSQRing int64 = 0
	offCQRing int64 = 0x8000000
	offSQEs   int64 = 0x10000000
)

// Opcodes (io_uring_sqe.opcode).
const (
	OpNop         uint8 = 0  // IORING_OP_NOP
	OpFsync       uint8 = 3  // IORING_OP_FSYNC
	OpTimeout     uint8 = 11 // IORING_OP_TIMEOUT
	OpAsyncCancel uint8 = 14 // IORING_OP_ASYNC_CANCEL
	OpLinkTimeout uint8 = 15 // IORING_OP_LINK_TIMEOUT
	OpStatx       uint8 = 21 // IORING_OP_STATX
)

// SQE flags (io_uring_sqe.flags).
const (
	SQEIOLink uint8 = 1 << 2 // IOSQE_IO_LINK: the next sqe starts after this one
)

// Operation flags.
const (
	FsyncDatasync   uint32 = 1 << 0 // IORING_FSYNC_DATASYNC
	TimeoutAbs      uint32 = 1 << 0 // IORING_TIMEOUT_ABS (CLOCK_MONOTONIC)
	AsyncCancelAll  uint32 = 1 << 0 // IORING_ASYNC_CANCEL_ALL
	AsyncCancelAny  uint32 = 1 << 2 // IORING_ASYNC_CANCEL_ANY
	registerIOWQMax uint32 = 19     // IORING_REGISTER_IOWQ_MAX_WORKERS
)

// SQE is struct io_uring_sqe (64 bytes). OpFlags is the union of
// rw_flags/fsync_flags/statx_flags/timeout_flags/cancel_flags.
type SQE struct {
	Opcode      uint8
	Flags       uint8
	IOPrio      uint16
	Fd          int32
	Off         uint64 // also addr2
	Addr        uint64
	Len         uint32
	OpFlags     uint32
	UserData    uint64
	BufIndex    uint16
	Personality uint16
	SpliceFdIn  int32
	Addr3       uint64
	_pad2       uint64
}

// CQE is struct io_uring_cqe (16 bytes).
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// Timespec is struct __kernel_timespec.
type Timespec struct {
	Sec  int64
	Nsec int64
}

type sqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

type cqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, CQEs, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

// params is struct io_uring_params (120 bytes).
type params struct {
	SQEntries    uint32
	CQEntries    uint32
	Flags        uint32
	SQThreadCPU  uint32
	SQThreadIdle uint32
	Features     uint32
	WQFd         uint32
	Resv         [3]uint32
	SQOff        sqringOffsets
	CQOff        cqringOffsets
}

// getEventsArg is struct io_uring_getevents_arg (24 bytes).
type getEventsArg struct {
	Sigmask   uint64
	SigmaskSz uint32
	MinWait   uint32
	Ts        uint64
}
