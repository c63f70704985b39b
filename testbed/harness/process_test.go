package harness

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/admin"
)

// TestProcessLifecycle runs three real brokers (mutual TLS, the default):
// a leader and registration are found, a paused broker answers nothing
// until resumed, a killed one is not an unexpected exit and comes back on
// Restart, a copy's file is found where the broker keeps it, and Stop
// leaves no process behind.
func TestProcessLifecycle(t *testing.T) {
	bin := malachidBinary(t)
	c, err := New(Config{Bin: bin, Root: t.TempDir(), Brokers: 3, RF: 3, Tick: 200 * time.Millisecond, Grace: 2 * time.Second,
		Raft: DemoRaft(time.Second), CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leader, err := c.WaitReady(ctx, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRegistered(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Broker(leader).Client.Load(ctx, admin.LoadRequest{Segments: 2, RecordsPerSegment: 4, RecordSize: 100, Prefix: "p"}); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Broker(leader).Client.Metadata(ctx)
	if err != nil || len(snap.Segments) != 2 {
		t.Fatalf("metadata after the load: %d segments, %v", len(snap.Segments), err)
	}
	for _, b := range c.Brokers() {
		p := mustCopyPath(t, b, snap.Segments[0].ID)
		if fi, err := os.Stat(p); err != nil || fi.Size() != snap.Segments[0].ByteSize+40 {
			t.Errorf("broker %d's copy %s: %v", b.ID, p, err)
		}
	}

	follower := c.Broker(1)
	if follower.ID == leader {
		follower = c.Broker(2)
	}
	if err := follower.Pause(); err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = follower.Client.Health(hctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("health of a paused broker: %v, want no answer within the deadline", err)
	}
	if err := follower.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, err := follower.Client.Health(ctx); err != nil {
		t.Errorf("health after resume: %v", err)
	}

	if err := c.Kill(follower); err != nil {
		t.Fatal(err)
	}
	if follower.Alive() || c.UnexpectedExit() != nil {
		t.Fatalf("after Kill: alive %v, unexpected exit %v", follower.Alive(), c.UnexpectedExit())
	}
	if err := follower.Signal(syscall.SIGCONT); err == nil {
		t.Error("a signal to a killed broker succeeded")
	}
	if err := c.Restart(follower); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	pids := map[int]bool{}
	for _, b := range c.Brokers() {
		pids[b.Pid()] = true
	}
	c.Stop()
	for pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after Stop: %v", pid, err)
		}
	}
	for _, b := range c.Brokers() {
		if b.Alive() {
			t.Errorf("broker %d alive after Stop", b.ID)
		}
	}
}
