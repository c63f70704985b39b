package catchup

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Background priorities: the lowest CPU priority (nice 19) and the lowest
// best-effort I/O priority (class 2, level 7). Both are within what an
// unprivileged process may set for its own threads, and neither starves:
// the scheduler still gives a nice-19 thread its share of a busy CPU, and
// a best-effort request is still served behind the others.
const (
	backgroundNice   = 19
	ioprioWhoProcess = 1 // IOPRIO_WHO_PROCESS: a thread id
	ioprioClassBE    = 2 // IOPRIO_CLASS_BE
	ioprioClassShift = 13
	backgroundIOPrio = ioprioClassBE<<ioprioClassShift | 7
)

// inBackground runs run on a thread of its own at background priority
// and returns when it returned. The thread is never given back: the
// goroutine stays locked to it, and Go ends a thread whose goroutine
// exits locked, so no other goroutine ever runs at the lowered priority
// (an unprivileged process could not raise it back). The process's main
// thread is never the one lowered: Go never ends it (it parks it for good
// instead), and ps and top show its nice value as the whole process's;
// a goroutine that finds itself there holds it while another, which then
// cannot land there, does the work. A priority the kernel refuses leaves
// run at the priority it had: background priority is a courtesy to the
// clients, not a condition of the copy.
func inBackground(run func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked, but on the main thread: the thread ends with this goroutine
		tid := unix.Gettid()
		if tid == unix.Getpid() {
			inBackground(run)
			runtime.UnlockOSThread()
			return
		}
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, backgroundNice)
		_, _, _ = unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), backgroundIOPrio)
		run()
	}()
	<-done
}
