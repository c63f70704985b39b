package fsync

import "sync/atomic"

// sysEngine calls fsync(2) or fdatasync(2) once per descriptor, in order.
type sysEngine struct{ closed atomic.Bool }

// NewSyscall returns the engine that syncs one descriptor per system call.
func NewSyscall() Engine { return &sysEngine{} }

func (e *sysEngine) Kind() Kind { return KindSyscall }

// Close makes a running Sync answer its remaining descriptors ErrClosed.
func (e *sysEngine) Close() error { e.closed.Store(true); return nil }

func (e *sysEngine) Sync(fds []int, dataOnly []bool, errs []error) {
	for i, fd := range fds {
		if e.closed.Load() {
			errs[i] = ErrClosed
			continue
		}
		errs[i] = syncFD(fd, dataOnly[i])
	}
}
