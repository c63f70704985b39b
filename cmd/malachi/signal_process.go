package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// signal sends sig to broker b's running process (SIGSTOP and SIGCONT for
// the pause stage). It fails when b does not run.
func (b *broker) signal(sig syscall.Signal) error {
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	if cmd == nil || !b.alive() {
		return fmt.Errorf("signal %v to broker %d: not running", sig, b.ID)
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %v to broker %d (pid %d): %w", sig, b.ID, cmd.Process.Pid, err)
	}
	return nil
}

// pid is b's process id, 0 when never started.
func (b *broker) pid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}
