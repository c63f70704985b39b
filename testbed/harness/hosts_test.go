package harness

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBrokersOnHosts runs three brokers each in a network namespace of its
// own (mutual TLS on their own addresses): they elect a leader over the
// bridge; isolating the leader makes the other two elect another; healing
// brings all three back to one leader; Stop removes every namespace.
func TestBrokersOnHosts(t *testing.T) {
	bin := malachidBinary(t)
	c, err := New(Config{Bin: bin, Root: t.TempDir(), Brokers: 3, RF: 3, Raft: DemoRaft(500 * time.Millisecond),
		CallTimeout: 5 * time.Second, Hosts: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if c.Net() == nil {
		t.Skipf("no hosts here: %s", c.NetSkip())
	}
	for _, b := range c.Brokers() {
		if b.Host != c.Net().Addr(int(b.ID)) || !strings.HasPrefix(b.Admin, b.Host+":") || len(b.Prefix) == 0 {
			t.Fatalf("broker %d: host %s admin %s prefix %v", b.ID, b.Host, b.Admin, b.Prefix)
		}
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leader, err := c.WaitReady(ctx, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	undo, err := c.Net().Isolate(int(leader))
	if err != nil {
		t.Fatal(err)
	}
	rest := c.Without(leader)
	var next uint64
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if l, err := rest.AgreedLeader(ctx, true); err == nil && l != leader {
			next = uint64(l)
			break
		}
	}
	if next == 0 {
		t.Fatalf("with the leader %d isolated, the other two elected no other leader in 30 s", leader)
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, 30*time.Second); err != nil {
		t.Fatalf("after healing: %v", err)
	}
	ns := c.Net().NS(1)
	c.Stop()
	if _, err := os.Stat("/run/netns/" + ns); err == nil {
		t.Errorf("namespace %s still there after Stop", ns)
	}
	if c.Broker(1).Alive() {
		t.Error("broker 1 runs after Stop")
	}
}
