package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/malachi-log/malachi/internal/hclogzero"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

// Both transports refuse pipelined replication (see openTransport: raft
// 1.8's pipeline can stop replicating to a follower for good and hang
// Shutdown), so raft replicates with synchronous AppendEntries.
func TestTransportsDoNotPipeline(t *testing.T) {
	l := testPKI(t, 1)
	certs, err := pki.LoadBroker(l.BrokerDir(1))
	if err != nil {
		t.Fatal(err)
	}
	hlog := hclogzero.New(testLogger(t), "raft")
	for _, insecure := range []bool{true, false} {
		addr := freeAddrs(t, 1)[0]
		cfg := Config{ID: 1, Addr: addr, Insecure: insecure, TLS: certs, Peers: []Peer{{1, addr}}}
		nt, err := openTransport(cfg, newGate(cfg, testLogger(t), time.Now), hlog)
		if err != nil {
			t.Fatalf("insecure=%v: %v", insecure, err)
		}
		_, err = nt.AppendEntriesPipeline(raft.ServerID(meta.BrokerID(1).String()), raft.ServerAddress(addr))
		nt.Close()
		if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
			t.Errorf("insecure=%v: AppendEntriesPipeline = %v, want ErrPipelineReplicationNotSupported", insecure, err)
		}
	}
}
