package cluster

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/internal/hclogzero"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/rs/zerolog"
)

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("cluster: invalid config")

// Peer is one initial voter of the control plane.
type Peer struct {
	ID meta.BrokerID
	// Addr is the peer's raft transport address (host:port).
	Addr string
}

// Config configures one Node. Start from DefaultConfig and set ID, Dir,
// Addr, Peers and TLS (or Insecure).
type Config struct {
	// ID is this broker; it is the raft server id (its decimal form).
	ID meta.BrokerID
	// Dir holds the raft log (Dir/raft-log, a Pebble DB) and snapshots
	// (Dir/raft-snap). One Dir belongs to one Node at a time.
	Dir string
	// Addr is the raft TCP transport's bind and advertised address: a
	// concrete host:port (not 0.0.0.0, not port 0), since peers dial it.
	Addr string
	// Peers are the initial voters, this node included with the same
	// Addr. They bootstrap the cluster when the log is empty; every node
	// must be given the same list. Ignored once the log holds state.
	Peers []Peer
	// ReplicationFactor is applied once, by the first leader, when the
	// metadata has none yet (SetReplicationFactor at bootstrap).
	ReplicationFactor int

	// TLS is this broker's certificates (pki.LoadBroker; it must name
	// broker ID). Raft then listens and dials only over mutual TLS: a
	// peer must present a broker certificate of the cluster CA, and may
	// speak only as the server id its certificate names (see doc.go).
	TLS *pki.Certs
	// Insecure runs raft over plain TCP instead, with no authentication:
	// only for a cluster whose Addr and Peers are all loopback addresses
	// (tests, the demo). Exactly one of TLS and Insecure is set.
	Insecure bool

	// Raft timings; see DefaultConfig for the defaults and the doc for
	// production guidance.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// SnapshotThreshold is the number of log entries since the last
	// snapshot that triggers a new one.
	SnapshotThreshold uint64

	// Logger receives this node's events and those of raft and Pebble. It
	// is the host's logger: it may name the broker (malachid's does; the
	// node does not add it again) but carries no "component" field, which
	// the node sets once per line: cluster, raft (or raft.<name>), pebble.
	Logger zerolog.Logger
}

// Defaults. The timings are the fast loopback ones, measured here
// (election ~0.15 s, failover ~0.2 s on loopback): right for tests, the
// demo and a single rack with sub-millisecond round trips. One change:
// LeaderLeaseTimeout is 100 ms (= HeartbeatTimeout, raft's maximum), not
// 50 ms: on this 2-core box under a load average of ~20, a
// 3-node cluster in one process lost leadership ("failed to contact", the
// lease) in 4 of 14 runs of 300 Applies at 50 ms and in 0 of 14 at 100 ms
// (a later series at load ~20 still saw 2 of 10: the whole process had
// been starved for 150 ms). The lease only bounds how long a partitioned
// leader keeps acting; failover after a leader dies is governed by
// ElectionTimeout and is unchanged. On a box where processes can be
// starved for longer than these timeouts (CPU quota, heavy fsync load),
// raise all of them together, e.g. 400/400/300 ms. Across racks
// or zones use raft's own defaults or larger (HeartbeatTimeout and
// ElectionTimeout 1 s, LeaderLeaseTimeout 500 ms, CommitTimeout 50 ms):
// the election timeout must stay well above the worst round trip plus an
// fsync, or leadership flaps.
const (
	DefaultHeartbeatTimeout   = 100 * time.Millisecond
	DefaultElectionTimeout    = 100 * time.Millisecond
	DefaultLeaderLeaseTimeout = 100 * time.Millisecond
	DefaultCommitTimeout      = 5 * time.Millisecond
	DefaultSnapshotThreshold  = 8192
	DefaultReplicationFactor  = 3
)

// DefaultConfig returns a Config with the default timings and
// replication factor, a no-op logger, and no ID, Dir, Addr, Peers or TLS:
// it does not Validate until those are set.
func DefaultConfig() Config {
	return Config{
		ReplicationFactor:  DefaultReplicationFactor,
		HeartbeatTimeout:   DefaultHeartbeatTimeout,
		ElectionTimeout:    DefaultElectionTimeout,
		LeaderLeaseTimeout: DefaultLeaderLeaseTimeout,
		CommitTimeout:      DefaultCommitTimeout,
		SnapshotThreshold:  DefaultSnapshotThreshold,
		Logger:             zerolog.Nop(),
	}
}

// Validate checks c and returns an error wrapping ErrConfig that names
// the first bad field and its value. It mirrors raft.ValidateConfig's
// timing rules so that Open never fails on them.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	if c.ID == 0 {
		return bad("ID 0: broker id 0 is reserved")
	}
	if c.Dir == "" {
		return bad("Dir is empty")
	}
	if err := CheckAddr(c.Addr); err != nil {
		return bad("Addr %q: %v", c.Addr, err)
	}
	if len(c.Peers) == 0 {
		return bad("Peers is empty: list every initial voter, this node included")
	}
	self := false
	for i, p := range c.Peers {
		if p.ID == 0 {
			return bad("Peers[%d].ID 0: broker id 0 is reserved", i)
		}
		if err := CheckAddr(p.Addr); err != nil {
			return bad("Peers[%d].Addr %q: %v", i, p.Addr, err)
		}
		for j, q := range c.Peers[:i] {
			if q.ID == p.ID {
				return bad("Peers[%d].ID %d: also Peers[%d]", i, p.ID, j)
			}
			if q.Addr == p.Addr {
				return bad("Peers[%d].Addr %q: also Peers[%d]", i, p.Addr, j)
			}
		}
		if p.ID == c.ID {
			self = true
			if p.Addr != c.Addr {
				return bad("Peers[%d].Addr %q: differs from Addr %q for this node (ID %d)", i, p.Addr, c.Addr, c.ID)
			}
		}
	}
	if !self {
		return bad("Peers %v: does not include this node (ID %d)", c.Peers, c.ID)
	}
	if p := c.transportProblem(); p != "" {
		return bad("%s", p)
	}
	if c.ReplicationFactor < 1 {
		return bad("ReplicationFactor %d: want at least 1", c.ReplicationFactor)
	}
	if c.HeartbeatTimeout < 5*time.Millisecond {
		return bad("HeartbeatTimeout %v: want at least 5ms", c.HeartbeatTimeout)
	}
	if c.ElectionTimeout < 5*time.Millisecond {
		return bad("ElectionTimeout %v: want at least 5ms", c.ElectionTimeout)
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		return bad("ElectionTimeout %v: want at least HeartbeatTimeout %v", c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if c.LeaderLeaseTimeout < 5*time.Millisecond {
		return bad("LeaderLeaseTimeout %v: want at least 5ms", c.LeaderLeaseTimeout)
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return bad("LeaderLeaseTimeout %v: want at most HeartbeatTimeout %v", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.CommitTimeout < time.Millisecond {
		return bad("CommitTimeout %v: want at least 1ms", c.CommitTimeout)
	}
	if c.SnapshotThreshold < 1 {
		return bad("SnapshotThreshold 0: want at least 1")
	}
	return nil
}

// CheckAddr checks that addr is a host:port other brokers can dial: a
// host, not the unspecified address, and a port from 1 to 65535 (the raft
// transport advertises it as is). Validate applies it to Addr and every
// peer's address.
func CheckAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return fmt.Errorf("port %q: want 1 to 65535", port)
	}
	if host == "" {
		return errors.New("no host: peers must be able to dial it")
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("host %s is unspecified: peers must be able to dial it", host)
	}
	return nil
}

// transportProblem says what is wrong with TLS and Insecure, or "":
// exactly one is set, TLS names this broker, Insecure stays on loopback.
func (c Config) transportProblem() string {
	switch {
	case c.TLS == nil && !c.Insecure:
		return "TLS is nil: give the broker's certificates, or set Insecure for a plaintext cluster on loopback"
	case c.TLS != nil && c.Insecure:
		return "TLS and Insecure both set: choose one"
	case c.TLS != nil:
		if id := c.TLS.Identity(); id.Role != pki.RoleBroker || id.Broker != c.ID {
			return fmt.Sprintf("TLS (%s) names %s, not broker %d (ID)", c.TLS.Dir(), id, c.ID)
		}
		return ""
	}
	if !isLoopback(c.Addr) {
		return fmt.Sprintf("Insecure with Addr %q: plaintext raft only on loopback addresses", c.Addr)
	}
	for i, p := range c.Peers {
		if !isLoopback(p.Addr) {
			return fmt.Sprintf("Insecure with Peers[%d].Addr %q: plaintext raft only on loopback addresses", i, p.Addr)
		}
	}
	return ""
}

// isLoopback reports whether addr's host is "localhost" or a loopback IP.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// raftConfig maps c onto hashicorp/raft's Config.
func (c Config) raftConfig(notify chan<- bool, log zerolog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = serverID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.NotifyCh = notify
	rc.Logger = hclogzero.New(log, "raft")
	rc.BatchApplyCh = true
	rc.NoLegacyTelemetry = true
	return rc
}

func serverID(id meta.BrokerID) raft.ServerID { return raft.ServerID(id.String()) }
