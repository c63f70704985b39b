package harness

import (
	"fmt"
	"strings"
	"time"
)

// configText is broker b's TOML file (the keys of cmd/malachid/malachid.example.toml).
func (c *Cluster) configText(b *Broker) string {
	var peers []string
	for _, p := range c.brokers {
		peers = append(peers, fmt.Sprintf("%q", fmt.Sprintf("%d=%s", p.ID, p.Raft)))
	}
	var s strings.Builder
	fmt.Fprintf(&s, "# written by testbed/harness\n")
	fmt.Fprintf(&s, "id = %d\n", b.ID)
	fmt.Fprintf(&s, "data_dir = %q\n", b.Dir)
	fmt.Fprintf(&s, "admin_listen = %q\n", b.Admin)
	fmt.Fprintf(&s, "raft_listen = %q\n", b.Raft)
	fmt.Fprintf(&s, "peers = [%s]\n", strings.Join(peers, ", "))
	fmt.Fprintf(&s, "replication_factor = %d\n", c.cfg.RF)
	fmt.Fprintf(&s, "fault_injection = true\n")
	if c.cfg.LogLevel != "" {
		fmt.Fprintf(&s, "log_level = %q\n", c.cfg.LogLevel)
	}
	if c.cfg.Insecure {
		fmt.Fprintf(&s, "insecure = true\n")
	} else {
		fmt.Fprintf(&s, "certs_dir = %q\n", c.certs.BrokerDir(b.ID))
	}
	if b.Kafka != "" {
		fmt.Fprintf(&s, "kafka_listen = %q\n", b.Kafka)
	}
	fmt.Fprintf(&s, "\n[raft]\n")
	r := c.cfg.Raft
	writeDuration(&s, "heartbeat_timeout", r.Heartbeat)
	writeDuration(&s, "election_timeout", r.Election)
	writeDuration(&s, "leader_lease_timeout", r.LeaderLease)
	writeDuration(&s, "commit_timeout", r.Commit)
	fmt.Fprintf(&s, "\n[heal]\n")
	fmt.Fprintf(&s, "enabled = %v\n", !c.cfg.NoHeal)
	fmt.Fprintf(&s, "rpc_listen = %q\n", b.RPC)
	fmt.Fprintf(&s, "data_listen = %q\n", b.Data)
	writeDuration(&s, "tick", c.cfg.Tick)
	writeDuration(&s, "grace", c.cfg.Grace)
	if x := strings.TrimSpace(c.Config().HealExtra); x != "" {
		fmt.Fprintf(&s, "%s\n", x)
	}
	if b.Kafka != "" {
		fmt.Fprintf(&s, "\n[kafka]\n")
		if x := strings.TrimSpace(c.cfg.KafkaTable); x != "" {
			fmt.Fprintf(&s, "%s\n", x)
		}
	}
	return s.String()
}

// writeDuration writes key = "d", nothing when d is 0.
func writeDuration(s *strings.Builder, key string, d time.Duration) {
	if d != 0 {
		fmt.Fprintf(s, "%s = %q\n", key, d.String())
	}
}
