//go:build !linux

package main

import "syscall"

// childAttr puts a broker in its own process group; without Linux's
// Pdeathsig, a CLI killed with SIGKILL leaves its brokers running.
func childAttr(keep bool) *syscall.SysProcAttr {
	_ = keep
	return &syscall.SysProcAttr{Setpgid: true}
}
