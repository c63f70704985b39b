package harness

import "syscall"

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
