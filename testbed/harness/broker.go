package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
)

// Broker is one malachid process of a cluster: everything that is
// per-broker (its addresses, directories, process, clients, how it is
// started) is here.
type Broker struct {
	ID   meta.BrokerID
	Home string // its directory: config, log, data
	Dir  string // data_dir
	// Host is the address its listeners bind (127.0.0.1 on loopback).
	Host                   string
	Admin, Raft, RPC, Data string // host:port
	// Kafka is its kafka_listen address, "" without Config.Kafka.
	Kafka               string
	ConfigPath, LogPath string
	// Prefix is put before the malachid command line (nil: none), e.g.
	// {"nsenter", "--net=/run/netns/NAME", "--"} to run it in a network namespace.
	Prefix []string
	Client *admin.Client // its admin API
	Plugin *admin.Client // its plugin's rpc_listen (/metrics)

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process exited
	exitErr error
	stopped bool // asked to exit by the harness, on purpose
}

// Alive reports whether the process is running.
func (b *Broker) Alive() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		return false
	}
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

// Done is closed when the broker's current process exits (nil when never
// started).
func (b *Broker) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}

// ExitErr is what waiting for the last process returned (nil while it
// runs or when it exited 0).
func (b *Broker) ExitErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.exitErr
}

// Pid is the process id, 0 when never started.
func (b *Broker) Pid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// exitedOnItsOwn reports whether the last process exited without the
// harness being asked to stop it, and with what.
func (b *Broker) exitedOnItsOwn() (bool, error) {
	b.mu.Lock()
	done, stopped, exitErr := b.done, b.stopped, b.exitErr
	b.mu.Unlock()
	if done == nil || stopped {
		return false, nil
	}
	select {
	case <-done:
		return true, exitErr
	default:
		return false, nil
	}
}

// StartBroker starts (or restarts) b's process, its output appended to
// its log, in a process group of its own; it does not wait for it.
func (c *Cluster) StartBroker(b *Broker) error {
	if b.Alive() {
		return fmt.Errorf("harness: broker %d runs already (pid %d)", b.ID, b.Pid())
	}
	logf, err := os.OpenFile(b.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("harness: broker %d: %w", b.ID, err)
	}
	argv := append(append([]string(nil), b.Prefix...), c.cfg.Bin, "--config", b.ConfigPath)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr(c.cfg.Keep)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting broker %d (%s --config %s): %w", b.ID, c.cfg.Bin, b.ConfigPath, err)
	}
	done := make(chan struct{})
	b.mu.Lock()
	b.cmd, b.done, b.exitErr, b.stopped = cmd, done, nil, false
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		b.mu.Lock()
		b.exitErr = err
		b.mu.Unlock()
		close(done)
	}()
	return nil
}

// Restart starts b again (its config as written) after it exited.
func (c *Cluster) Restart(b *Broker) error { return c.StartBroker(b) }

// stopOnPurpose marks b's coming exit as intended (not an unexpected
// exit) and returns its process and the channel closed when it exited;
// it fails when b was never started.
func (b *Broker) stopOnPurpose() (*exec.Cmd, <-chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.cmd == nil || b.done == nil {
		return nil, nil, fmt.Errorf("broker %d was never started", b.ID)
	}
	return b.cmd, b.done, nil
}

// signalGroup sends sig to the process group of cmd (the broker and
// anything its Prefix started), unless it exited.
func signalGroup(cmd *exec.Cmd, done <-chan struct{}, sig syscall.Signal) error {
	select {
	case <-done:
		return os.ErrProcessDone
	default:
	}
	err := syscall.Kill(-cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// Kill sends SIGKILL to b and waits for it to exit: a broker crash.
func (c *Cluster) Kill(b *Broker) error {
	cmd, done, err := b.stopOnPurpose()
	if err != nil {
		return err
	}
	if err := signalGroup(cmd, done, syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill -9 broker %d (pid %d): %w", b.ID, cmd.Process.Pid, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("broker %d (pid %d) did not exit 10s after SIGKILL", b.ID, cmd.Process.Pid)
	}
}

// Terminate stops b as an operator would, SIGTERM and SIGKILL after
// wait, and waits for it to exit. Like Kill, it is on purpose. The error
// says when SIGTERM was not enough; ExitErr is the process's exit.
func (c *Cluster) Terminate(b *Broker, wait time.Duration) error {
	cmd, done, err := b.stopOnPurpose()
	if err != nil {
		return err
	}
	_ = signalGroup(cmd, done, syscall.SIGCONT) // a stopped process cannot act on SIGTERM
	if err := signalGroup(cmd, done, syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGTERM to broker %d (pid %d): %w", b.ID, cmd.Process.Pid, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(wait):
	}
	_ = signalGroup(cmd, done, syscall.SIGKILL)
	select {
	case <-done:
		return fmt.Errorf("broker %d (pid %d) ignored SIGTERM for %v and was killed", b.ID, cmd.Process.Pid, wait)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("broker %d (pid %d) did not exit 10s after SIGKILL", b.ID, cmd.Process.Pid)
	}
}

// Signal sends sig to b's running process group (SIGSTOP and SIGCONT:
// Pause and Resume). It fails when b does not run.
func (b *Broker) Signal(sig syscall.Signal) error {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil || !b.Alive() {
		return fmt.Errorf("signal %v to broker %d: not running", sig, b.ID)
	}
	if err := signalGroup(cmd, done, sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %v to broker %d (pid %d): %w", sig, b.ID, cmd.Process.Pid, err)
	}
	return nil
}

// Pause stops b's process (SIGSTOP): it holds its sockets and answers
// nothing until Resume. It returns once the kernel shows the process
// stopped (on Linux), so that no request sent after it is served.
func (b *Broker) Pause() error {
	if err := b.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	if !waitState(b.Pid(), 'T') {
		return fmt.Errorf("broker %d (pid %d): not stopped 1s after SIGSTOP", b.ID, b.Pid())
	}
	return nil
}

// Resume continues a paused b (SIGCONT).
func (b *Broker) Resume() error { return b.Signal(syscall.SIGCONT) }

// stop ends b if it runs: SIGCONT and SIGTERM, SIGKILL after grace; it
// returns once the process is reaped.
func (b *Broker) stop(grace time.Duration) {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	if cmd != nil {
		b.stopped = true
	}
	b.mu.Unlock()
	if cmd == nil || done == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = signalGroup(cmd, done, syscall.SIGCONT) // a stopped process cannot act on SIGTERM
	_ = signalGroup(cmd, done, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = signalGroup(cmd, done, syscall.SIGKILL)
		<-done
	}
}
