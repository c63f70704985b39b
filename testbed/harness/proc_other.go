//go:build !linux

package harness

import "syscall"

// childAttr puts a broker in its own process group; without Linux's
// Pdeathsig, a caller killed with SIGKILL leaves its brokers running.
func childAttr(keep bool) *syscall.SysProcAttr {
	_ = keep
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitState cannot look without /proc: it says the process got there.
func waitState(pid int, state byte) bool { return true }
