package harness

import (
	"fmt"

	"github.com/malachi-log/malachi/testbed/netns"
)

// Ports every broker listens on when it has a host of its own
// (Config.Hosts): admin, raft, plugin rpc, data, Kafka.
const (
	HostAdminPort = 7001
	HostRaftPort  = 7002
	HostRPCPort   = 7003
	HostDataPort  = 7004
	HostKafkaPort = 7005
)

// listenersPerBroker is the number of addresses layout gives each broker.
const listenersPerBroker = 5

// layout returns the five listen addresses of every broker (admin, raft,
// rpc, data, Kafka, broker after broker): on hosts of their own when cfg.Hosts
// and namespaces can be made (c.net set), else loopback ports claimed
// for the cluster's life (ports.go).
func (c *Cluster) layout() ([]string, error) {
	if c.cfg.Hosts {
		nt, err := netns.New(c.cfg.Brokers)
		if err == nil {
			c.net = nt
			var addrs []string
			for i := 1; i <= c.cfg.Brokers; i++ {
				for _, p := range []int{HostAdminPort, HostRaftPort, HostRPCPort, HostDataPort, HostKafkaPort} {
					addrs = append(addrs, fmt.Sprintf("%s:%d", nt.Addr(i), p))
				}
			}
			return addrs, nil
		}
		c.netSkip = err.Error()
		if c.cfg.Logf != nil {
			c.cfg.Logf("harness: brokers on loopback, not on hosts of their own: %v", err)
		}
	}
	pc, err := claimPorts(listenersPerBroker*c.cfg.Brokers, claimCandidates())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.ports = pc
	c.mu.Unlock()
	return pc.addrs, nil
}

// releasePorts drops the cluster's claim on its loopback ports (safe to
// call twice).
func (c *Cluster) releasePorts() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ports != nil {
		c.ports.release()
		c.ports = nil
	}
}

// Net is the brokers' hosts — the network fault injector
// (Isolate, Partition, DropOutbound, DropInbound, Flap, Cap, HealAll;
// host i is broker i) — nil when the brokers run on loopback.
func (c *Cluster) Net() *netns.Net { return c.net }

// NetSkip says why Config.Hosts was asked for and the brokers run on
// loopback ("" otherwise).
func (c *Cluster) NetSkip() string { return c.netSkip }

// closeNet removes the hosts, if any (after the brokers exited).
func (c *Cluster) closeNet() {
	if c.net != nil {
		c.net.Close()
	}
}
