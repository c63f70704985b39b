package broker

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

// testCluster is n real brokers in this process: raft, store, admin API
// over mutual TLS on loopback sockets, the heal plugin off. Closing one
// (stop) is what a killed broker looks like to the others: its sockets
// refuse.
type testCluster struct {
	t       *testing.T
	certs   pki.Local
	brokers []*Server // brokers[i] is broker i+1; nil once stopped
	cfgs    []Config  // cfgs[i] opened broker i+1
}

// newTestCluster starts n brokers with replication factor rf; edit, when
// set, changes each broker's config before it opens.
func newTestCluster(t *testing.T, n, rf int, edit func(*Config)) *testCluster {
	t.Helper()
	root := t.TempDir()
	ids := make([]meta.BrokerID, n)
	for i := range ids {
		ids[i] = meta.BrokerID(i + 1)
	}
	l, err := pki.CreateLocal(filepath.Join(root, "certs"), ids, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	raft := make([]string, n)
	var peers []string
	for i := range raft {
		raft[i] = freeAddr(t)
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, raft[i]))
	}
	c := &testCluster{t: t, certs: l, brokers: make([]*Server, n), cfgs: make([]Config, n)}
	t.Cleanup(func() {
		for i := range c.brokers {
			c.stop(meta.BrokerID(i + 1))
		}
	})
	for i := range n {
		cfg := DefaultConfig()
		cfg.ID = uint32(i + 1)
		cfg.DataDir = filepath.Join(root, fmt.Sprintf("b%d", i+1))
		cfg.AdminListen, cfg.RaftListen, cfg.Peers = "127.0.0.1:0", raft[i], peers
		cfg.CertsDir = l.BrokerDir(ids[i])
		cfg.ReplicationFactor = rf
		// The e2e clusters' timings: shorter ones flap under -race on 2 cores.
		cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 250*time.Millisecond
		if edit != nil {
			edit(&cfg)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		c.cfgs[i] = cfg
		c.start(ids[i])
	}
	c.waitFor(20*time.Second, "a leader and every broker registered", func() bool {
		if c.currentLeader() == nil {
			return false
		}
		for _, b := range c.brokers {
			v := b.node.View()
			for _, id := range ids {
				if br, ok := v.Broker(id); !ok || br.AdminAddr == "" {
					return false
				}
			}
		}
		return true
	})
	return c
}

// b returns broker id, nil once stopped.
func (c *testCluster) b(id meta.BrokerID) *Server { return c.brokers[id-1] }

// currentLeader returns the running broker that leads the control plane,
// or nil.
func (c *testCluster) currentLeader() *Server {
	for _, b := range c.brokers {
		if b != nil && b.node.IsLeader() {
			return b
		}
	}
	return nil
}

// leader returns the running broker that leads the control plane, waiting
// out an election.
func (c *testCluster) leader() *Server {
	c.t.Helper()
	var l *Server
	c.waitFor(20*time.Second, "a control plane leader", func() bool {
		l = c.currentLeader()
		return l != nil
	})
	return l
}

// stop closes broker id (its listeners, raft node and store).
func (c *testCluster) stop(id meta.BrokerID) {
	if b := c.brokers[id-1]; b != nil {
		c.brokers[id-1] = nil
		_ = b.Close()
	}
}

// start opens broker id on its config and data directory (again, after
// stop: a restarted broker).
func (c *testCluster) start(id meta.BrokerID) *Server {
	c.t.Helper()
	cfg := c.cfgs[id-1]
	log := zerolog.New(zerolog.NewTestWriter(c.t)).Level(zerolog.WarnLevel).With().Uint32("broker", cfg.ID).Logger()
	b, err := Open(context.Background(), cfg, log)
	if err != nil {
		c.t.Fatalf("open broker %d: %v", id, err)
	}
	c.brokers[id-1] = b
	return b
}

// holders returns the running brokers that hold a copy of id.
func (c *testCluster) holders(id meta.SegmentID) []meta.BrokerID {
	var out []meta.BrokerID
	for _, b := range c.brokers {
		if b != nil && slices.Contains(b.db.List(), id) {
			out = append(out, b.self)
		}
	}
	return out
}

// waitFor polls cond every 10 ms until it holds, failing after timeout.
func (c *testCluster) waitFor(timeout time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
