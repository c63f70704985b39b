package harness

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// childAttr puts a broker in its own process group (a terminal's Ctrl-C goes
// to the caller, which stops the brokers in order) and, unless the caller
// keeps its cluster, has the kernel kill the broker if the caller dies first.
func childAttr(keep bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if !keep {
		a.Pdeathsig = syscall.SIGKILL
	}
	return a
}

// waitState polls /proc/pid/stat until the process is in state (T:
// stopped) or a second passes, and says whether it got there.
func waitState(pid int, state byte) bool {
	deadline := time.Now().Add(time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == state {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
