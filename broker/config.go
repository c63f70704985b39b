package broker

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/malachi-log/malachi/cluster"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/plugin"
)

// ErrConfig marks a bad configuration (malachid exits with status 2).
var ErrConfig = errors.New("malachid: bad config")

// Config is the broker's configuration: a TOML file, then flags. Every key
// is also a flag named by its dotted path (--heal.enabled=true).
type Config struct {
	ID                uint32   `toml:"id"`
	DataDir           string   `toml:"data_dir"`
	Rack              string   `toml:"rack"`
	AdminListen       string   `toml:"admin_listen"`
	RaftListen        string   `toml:"raft_listen"`
	Peers             []string `toml:"peers"`
	ReplicationFactor int      `toml:"replication_factor"`
	FaultInjection    bool     `toml:"fault_injection"`
	LogLevel          string   `toml:"log_level"`
	LogFormat         string   `toml:"log_format"`
	Preallocate       int64    `toml:"preallocate"`
	// CertsDir holds ca.crt, broker.crt and broker.key (`malachi cert`);
	// "" means data_dir/certs.
	CertsDir string `toml:"certs_dir"`
	// Insecure runs every listener in plaintext without authentication:
	// loopback addresses only, and said loudly (log, metric, status).
	Insecure bool `toml:"insecure"`
	// KafkaListen serves Kafka clients (host:port); "" serves none.
	KafkaListen string        `toml:"kafka_listen"`
	Kafka       KafkaConfig   `toml:"kafka"`
	Raft        RaftConfig    `toml:"raft"`
	Heal        plugin.Config `toml:"heal"`
}

// KafkaConfig is the [kafka] table: topics and partitions of the Kafka
// listener (kafka_listen).
type KafkaConfig struct {
	// AutoCreateTopics creates a topic a client's metadata request names.
	AutoCreateTopics bool `toml:"auto_create_topics"`
	// NumPartitions is the partition count of auto-created topics.
	NumPartitions int32 `toml:"num_partitions"`
	// SegmentBytes rolls a partition's active segment once its frames
	// reach this many bytes.
	SegmentBytes int64 `toml:"segment_bytes"`
	// SegmentMS rolls a partition's active segment this many milliseconds
	// after its first batch; 0 never rolls by age.
	SegmentMS int64 `toml:"segment_ms"`
}

// validate names the first bad key of the [kafka] table.
func (k KafkaConfig) validate() error {
	switch {
	case k.NumPartitions < 1 || k.NumPartitions > meta.MaxPartitions:
		return fmt.Errorf("%w: kafka.num_partitions = %d: want 1 to %d", ErrConfig, k.NumPartitions, meta.MaxPartitions)
	case k.SegmentBytes < 4096:
		return fmt.Errorf("%w: kafka.segment_bytes = %d: want at least 4096", ErrConfig, k.SegmentBytes)
	case k.SegmentMS < 0:
		return fmt.Errorf("%w: kafka.segment_ms = %d: want 0 (off) or more milliseconds", ErrConfig, k.SegmentMS)
	}
	return nil
}

// RaftConfig tunes the control plane's consensus engine.
type RaftConfig struct {
	HeartbeatTimeout   time.Duration `toml:"heartbeat_timeout"`
	ElectionTimeout    time.Duration `toml:"election_timeout"`
	LeaderLeaseTimeout time.Duration `toml:"leader_lease_timeout"`
	CommitTimeout      time.Duration `toml:"commit_timeout"`
	SnapshotThreshold  uint64        `toml:"snapshot_threshold"`
}

// DefaultConfig is a single broker on loopback with the plugin disabled.
func DefaultConfig() Config {
	return Config{
		ID:                1,
		AdminListen:       "127.0.0.1:7001",
		RaftListen:        "127.0.0.1:7101",
		ReplicationFactor: 3,
		LogLevel:          "info",
		LogFormat:         "json",
		// Wider than cluster's loopback defaults (100/100/50 ms): on a
		// loaded 2-core box writing and fsyncing hundreds of MiB, a 50 ms
		// lease made the leader step down every few seconds, and every
		// new term restarts the heal grace delay.
		Raft: RaftConfig{
			HeartbeatTimeout:   400 * time.Millisecond,
			ElectionTimeout:    400 * time.Millisecond,
			LeaderLeaseTimeout: 300 * time.Millisecond,
			CommitTimeout:      cluster.DefaultCommitTimeout,
			SnapshotThreshold:  cluster.DefaultSnapshotThreshold,
		},
		Kafka: KafkaConfig{
			AutoCreateTopics: true,
			NumPartitions:    3,
			SegmentBytes:     1 << 30,
			SegmentMS:        7 * 24 * 3600 * 1000,
		},
		Heal: plugin.DefaultConfig(),
	}
}

// peer is one parsed entry of Config.Peers.
type peer struct {
	ID   meta.BrokerID
	Addr string
}

// parsePeers parses "id=host:port" entries.
func (c *Config) parsePeers() ([]peer, error) {
	var ps []peer
	seen := map[meta.BrokerID]bool{}
	for i, s := range c.Peers {
		ids, addr, ok := strings.Cut(s, "=")
		id, err := meta.ParseBrokerID(ids)
		if !ok || err != nil {
			return nil, fmt.Errorf("%w: peers[%d] = %q: want id=host:port", ErrConfig, i, s)
		}
		if err := cluster.CheckAddr(addr); err != nil {
			return nil, fmt.Errorf("%w: peers[%d] = %q: address: %v", ErrConfig, i, s, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("%w: peers[%d] = %q: broker %d listed twice", ErrConfig, i, s, id)
		}
		seen[id] = true
		ps = append(ps, peer{id, addr})
	}
	return ps, nil
}

// validate checks the raft timings by the rules cluster.Config.Validate
// applies, naming the keys, so that a bad one is refused before anything
// is created under data_dir.
func (r RaftConfig) validate() error {
	bad := func(key string, v time.Duration, why string) error {
		return fmt.Errorf("%w: raft.%s = %q: %s", ErrConfig, key, v, why)
	}
	switch {
	case r.HeartbeatTimeout < 5*time.Millisecond:
		return bad("heartbeat_timeout", r.HeartbeatTimeout, "want at least 5ms")
	case r.ElectionTimeout < 5*time.Millisecond:
		return bad("election_timeout", r.ElectionTimeout, "want at least 5ms")
	case r.ElectionTimeout < r.HeartbeatTimeout:
		return bad("election_timeout", r.ElectionTimeout, fmt.Sprintf("want at least raft.heartbeat_timeout (%v)", r.HeartbeatTimeout))
	case r.LeaderLeaseTimeout < 5*time.Millisecond:
		return bad("leader_lease_timeout", r.LeaderLeaseTimeout, "want at least 5ms")
	case r.LeaderLeaseTimeout > r.HeartbeatTimeout:
		return bad("leader_lease_timeout", r.LeaderLeaseTimeout, fmt.Sprintf("want at most raft.heartbeat_timeout (%v)", r.HeartbeatTimeout))
	case r.CommitTimeout < time.Millisecond:
		return bad("commit_timeout", r.CommitTimeout, "want at least 1ms")
	}
	return nil
}

// Validate checks c; the error names the key and value.
func (c *Config) Validate() error {
	if c.ID == 0 {
		return fmt.Errorf("%w: id = 0: want a broker id of at least 1", ErrConfig)
	}
	if c.DataDir == "" {
		return fmt.Errorf("%w: data_dir = \"\": required", ErrConfig)
	}
	for _, a := range []struct{ k, v string }{{"admin_listen", c.AdminListen}, {"raft_listen", c.RaftListen}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%w: %s = %q: want host:port", ErrConfig, a.k, a.v)
		}
	}
	if _, _, err := net.SplitHostPort(c.KafkaListen); c.KafkaListen != "" && err != nil {
		return fmt.Errorf("%w: kafka_listen = %q: want host:port, or \"\" for no Kafka listener", ErrConfig, c.KafkaListen)
	}
	if err := c.Kafka.validate(); err != nil {
		return err
	}
	if err := cluster.CheckAddr(c.RaftListen); err != nil {
		return fmt.Errorf("%w: raft_listen = %q: %v", ErrConfig, c.RaftListen, err)
	}
	if c.ReplicationFactor < 1 {
		return fmt.Errorf("%w: replication_factor = %d: want at least 1", ErrConfig, c.ReplicationFactor)
	}
	if err := c.Raft.validate(); err != nil {
		return err
	}
	ps, err := c.parsePeers()
	if err != nil {
		return err
	}
	self := false
	for _, p := range ps {
		if uint32(p.ID) == c.ID {
			self = true
			if p.Addr != c.RaftListen {
				return fmt.Errorf("%w: peers = %q: own entry %s differs from raft_listen %q", ErrConfig, c.Peers, p.Addr, c.RaftListen)
			}
		}
	}
	if len(ps) > 0 && !self {
		return fmt.Errorf("%w: peers = %q: does not list this broker (id %d)", ErrConfig, c.Peers, c.ID)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("%w: log_level = %q: want debug, info, warn or error", ErrConfig, c.LogLevel)
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		return fmt.Errorf("%w: log_format = %q: want json or console", ErrConfig, c.LogFormat)
	}
	if c.Preallocate < 0 {
		return fmt.Errorf("%w: preallocate = %d: want 0 or more bytes", ErrConfig, c.Preallocate)
	}
	if err := c.Heal.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return c.checkInsecure()
}

// certsDir is certs_dir, or data_dir/certs.
func (c *Config) certsDir() string {
	if c.CertsDir != "" {
		return c.CertsDir
	}
	return filepath.Join(c.DataDir, "certs")
}

// loadCerts loads this broker's certificates and checks that they name it.
func (c *Config) LoadCerts() (*pki.Certs, error) {
	dir := c.certsDir()
	certs, err := pki.LoadBroker(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: certs_dir = %q: %w (make them with `malachi cert`, or set insecure = true for a plaintext cluster on loopback)", ErrConfig, dir, err)
	}
	if id := certs.Identity(); uint32(id.Broker) != c.ID {
		return nil, fmt.Errorf("%w: certs_dir = %q: %s names %s, but this is broker %d", ErrConfig, dir, pki.BrokerCert, id, c.ID)
	}
	return certs, nil
}

// checkInsecure refuses a plaintext listener on anything but loopback.
func (c *Config) checkInsecure() error {
	if !c.Insecure {
		return nil
	}
	addrs := []struct{ k, v string }{{"admin_listen", c.AdminListen}, {"raft_listen", c.RaftListen}}
	if c.KafkaListen != "" {
		addrs = append(addrs, struct{ k, v string }{"kafka_listen", c.KafkaListen})
	}
	if c.Heal.Enabled {
		addrs = append(addrs, struct{ k, v string }{"heal.rpc_listen", c.Heal.RPCListen}, struct{ k, v string }{"heal.data_listen", c.Heal.DataListen})
	}
	for _, a := range addrs {
		if !isLoopback(a.v) {
			return fmt.Errorf("%w: insecure = true with %s = %q: plaintext listeners only on loopback addresses; give the broker certificates (certs_dir) instead", ErrConfig, a.k, a.v)
		}
	}
	return nil
}

// isLoopback reports whether host:port names a loopback host.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
