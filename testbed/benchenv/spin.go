package benchenv

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

// Spinner is a load a benchmark puts on the machine beside itself: one
// child process, a shell busy loop, that keeps one core busy (as much as
// the scheduler gives it) until Stop. The same load for every round, so a
// figure measured "under load" says what the load was.
type Spinner struct {
	cmd   *exec.Cmd
	start time.Time
}

// SpinLoad names the load a Spinner makes, for a benchmark's name or log.
const SpinLoad = "one busy process (sh -c 'while :; do :; done')"

// StartSpinner starts the busy child process. The caller must Stop it.
func StartSpinner() (*Spinner, error) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("benchenv: start the spinning process: %w", err)
	}
	return &Spinner{cmd: cmd, start: time.Now()}, nil
}

// Stop kills the child and returns the CPU time it used and the share of
// one core that is over its lifetime (near 1 when the machine gave it a
// full core).
func (s *Spinner) Stop() (cpu time.Duration, share float64) {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait() // "signal: killed": expected
	wall := time.Since(s.start)
	st := s.cmd.ProcessState
	cpu = st.UserTime() + st.SystemTime()
	return cpu, cpu.Seconds() / wall.Seconds()
}

// ResetPeakRSS resets the process's VmHWM (Linux: "5" written to
// /proc/self/clear_refs), so that a round of a benchmark reports its own
// peak and not an earlier round's. It reports whether it could.
func ResetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}
