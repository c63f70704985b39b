package harness

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/testbed/loopdisk"
	"github.com/malachi-log/malachi/testbed/netns"
)

// Config is what a cluster is made of.
type Config struct {
	Bin     string // the malachid binary
	Root    string // every broker's directory lives under it
	Brokers int
	RF      int
	// Tick and Grace are heal.tick and heal.grace (0: not written, the
	// plugin's defaults).
	Tick, Grace time.Duration
	// Raft are the [raft] timings written to every config.
	Raft RaftTimings
	// NoHeal writes heal.enabled = false.
	NoHeal bool
	// HealExtra is appended to every [heal] table, one key per line.
	HealExtra string
	// LogLevel is malachid's log_level ("": its default).
	LogLevel string
	// CallTimeout bounds each admin call (0: 30 s).
	CallTimeout time.Duration
	// Keep leaves the processes running when the process that started
	// them exits (no parent-death signal).
	Keep bool
	// Insecure runs the brokers with insecure = true: plaintext on
	// loopback, no certificates. Otherwise New makes a CA, a certificate
	// per broker and the operator and viewer clients under Root/certs,
	// and the harness calls the brokers as "operator".
	Insecure bool
	// LoopBroker, when set, is the broker whose <data_dir>/copies is a
	// loop-mounted ext4 of LoopBytes bytes, mounted by Start before that
	// broker starts and unmounted by Stop. Where the mount cannot be made,
	// Start says why in LoopSkip and the broker runs on the plain
	// directory.
	LoopBroker meta.BrokerID
	LoopBytes  int64
	// Hosts places each broker on a host of its own: a network namespace
	// with its own address (testbed/netns), reached from this process
	// directly; the brokers listen on ports 7001-7004 of that address and
	// their certificates name it. Where namespaces cannot be made (not
	// root, no ip/nft/tc), New says why in NetSkip (and once through
	// Logf) and lays the cluster out on loopback.
	Hosts bool
	// Kafka gives every broker a Kafka listener (kafka_listen, on
	// Broker.Kafka) with KafkaTable as its [kafka] table (one key per
	// line; "" for the defaults). Clients connect with the "client"
	// certificate under Certs().ClientDir() (KafkaTLS).
	Kafka      bool
	KafkaTable string
	// Logf, when set, receives the harness's few notices (the loopback
	// fallback of Hosts).
	Logf func(format string, args ...any)
}

// RaftTimings are malachid's [raft] table; a zero field is not written.
type RaftTimings struct {
	Heartbeat, Election, LeaderLease, Commit time.Duration
}

// DemoRaft are the demo's timings: heartbeat and election timeout t, the
// leader lease half of it, a 5 ms commit timeout.
func DemoRaft(t time.Duration) RaftTimings {
	return RaftTimings{Heartbeat: t, Election: t, LeaderLease: t / 2, Commit: 5 * time.Millisecond}
}

// Cluster runs brokers as real processes.
type Cluster struct {
	cfg Config
	// certs is the layout of the cluster's certificates (Root/certs);
	// zero with cfg.Insecure. They live outside every data_dir, so a
	// broker whose data directory is swapped keeps its identity.
	certs pki.Local
	// rpc is the harness's one client of every broker, as "operator".
	rpc     *rpc.Client
	brokers []*Broker
	// mark is when Poll first saw the heal state as it is (health.go);
	// shared with the views of Without.
	mark *stateMark

	mu sync.Mutex
	// loop is the loop-mounted copies disk of loopBroker, nil when none is
	// mounted; loopSkip says why a requested one could not be made.
	// INVARIANT: a non-nil loop is closed (unmounted, detached) by Stop.
	//
	// What is mounted is the broker's <data_dir>/copies only, like Kafka's
	// log.dirs kept apart from its metadata: the raft log, the Pebble
	// confirmation DB and the scrubber's state stay on the plain directory.
	// Pebble treats a failed write as fatal by design (store's ConfirmMinFree
	// guard keeps it from writing on a nearly full disk), so a full or
	// read-only disk under it would be a broker crash, not the copy-disk
	// fault the demo's diskfull and readonly stages are about. mkfs leaves a
	// lost+found directory in the mount; it stays: store.Open registers
	// regular files named <segment-id>.seg only and skips everything else.
	loop       *loopdisk.Disk
	loopBroker *Broker
	loopSkip   string
	// net is the brokers' hosts (nil on loopback); netSkip says why a
	// requested one could not be made. INVARIANT: a non-nil net is
	// closed by Stop, after every broker exited.
	net     *netns.Net
	netSkip string
	// loopCloseErr is what closing the loop disk in Stop returned.
	loopCloseErr error
	// ports are the loopback ports claimed for the brokers (nil on hosts
	// of their own). INVARIANT: held from New until Stop, after every
	// broker exited, so a restarted broker binds its own ports again.
	ports *portClaim
}

// New lays out a cluster of cfg.Brokers brokers on loopback under
// cfg.Root (Root/bN/data, Root/bN/malachid.toml, Root/bN/malachid.log)
// and makes its certificates; nothing runs until Start.
func New(cfg Config) (*Cluster, error) {
	if cfg.Brokers < 1 {
		return nil, fmt.Errorf("harness: Brokers = %d: want at least 1", cfg.Brokers)
	}
	c := &Cluster{cfg: cfg, mark: &stateMark{}}
	addrs, err := c.layout()
	if err != nil {
		return nil, err
	}
	if err := c.makeCerts(); err != nil {
		c.closeNet()
		c.releasePorts()
		return nil, err
	}
	for i := 0; i < cfg.Brokers; i++ {
		home := filepath.Join(cfg.Root, fmt.Sprintf("b%d", i+1))
		b := &Broker{
			ID:         meta.BrokerID(i + 1),
			Home:       home,
			Dir:        filepath.Join(home, "data"),
			Host:       "127.0.0.1",
			Admin:      addrs[listenersPerBroker*i],
			Raft:       addrs[listenersPerBroker*i+1],
			RPC:        addrs[listenersPerBroker*i+2],
			Data:       addrs[listenersPerBroker*i+3],
			ConfigPath: filepath.Join(home, "malachid.toml"),
			LogPath:    filepath.Join(home, "malachid.log"),
		}
		if cfg.Kafka {
			b.Kafka = addrs[listenersPerBroker*i+4]
		}
		if c.net != nil {
			b.Host, b.Prefix = c.net.Addr(i+1), c.net.Prefix(i+1)
		}
		b.Client = admin.New(b.Admin, c.rpc, cfg.Insecure)
		b.Plugin = admin.New(b.RPC, c.rpc, cfg.Insecure)
		c.brokers = append(c.brokers, b)
	}
	return c, nil
}

// makeCerts writes the cluster's certificates under Root/certs (valid
// for 127.0.0.1 and localhost) and makes the harness's client with the
// operator's; with cfg.Insecure, a plaintext client and no files.
func (c *Cluster) makeCerts() error {
	timeout := c.cfg.CallTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if c.cfg.Insecure {
		c.rpc = rpc.NewClient(nil, admin.Codes, timeout)
		return nil
	}
	ids := make([]meta.BrokerID, c.cfg.Brokers)
	for i := range ids {
		ids[i] = meta.BrokerID(i + 1)
	}
	hosts := []string{"127.0.0.1", "localhost"}
	if c.net != nil {
		for i := range ids {
			hosts = append(hosts, c.net.Addr(i+1))
		}
	}
	l, err := pki.CreateLocal(filepath.Join(c.cfg.Root, "certs"), ids, hosts)
	if err != nil {
		return fmt.Errorf("harness: the cluster's certificates: %w", err)
	}
	certs, err := pki.LoadClient(l.ClientDir(), string(pki.RoleOperator))
	if err != nil {
		return fmt.Errorf("harness: the operator's certificate: %w", err)
	}
	c.certs, c.rpc = l, rpc.NewClient(certs, admin.Codes, timeout)
	return nil
}

// Config is the cluster's configuration as given to New.
func (c *Cluster) Config() Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// Certs is the layout of the cluster's certificates (zero when insecure).
func (c *Cluster) Certs() pki.Local { return c.certs }

// RPC is the harness's client of every broker (as the operator), for a
// client of an address of the caller's choosing (admin.New).
func (c *Cluster) RPC() *rpc.Client { return c.rpc }

// CLIFlags are the flags that let `malachi status` and the other
// commands talk to this cluster as the operator.
func (c *Cluster) CLIFlags() []string {
	if c.cfg.Insecure {
		return []string{"--insecure"}
	}
	return []string{"--certs-dir", c.certs.ClientDir(), "--user", string(pki.RoleOperator)}
}

// Brokers returns every broker, by id from 1.
func (c *Cluster) Brokers() []*Broker { return c.brokers }

// Broker returns broker id, nil when the cluster has none of that id.
func (c *Cluster) Broker(id meta.BrokerID) *Broker {
	for _, b := range c.brokers {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// Running returns the brokers whose process is up.
func (c *Cluster) Running() []*Broker {
	var out []*Broker
	for _, b := range c.brokers {
		if b.Alive() {
			out = append(out, b)
		}
	}
	return out
}

// Live returns the set of the brokers whose process is up (Running).
func (c *Cluster) Live() map[meta.BrokerID]bool {
	live := map[meta.BrokerID]bool{}
	for _, b := range c.Running() {
		live[b.ID] = true
	}
	return live
}

// Without returns a view of the cluster without broker id (same
// processes, same client) for polling the brokers that stay.
func (c *Cluster) Without(id meta.BrokerID) *Cluster {
	o := &Cluster{cfg: c.cfg, certs: c.certs, rpc: c.rpc, net: c.net, mark: c.mark}
	for _, b := range c.brokers {
		if b.ID != id {
			o.brokers = append(o.brokers, b)
		}
	}
	return o
}

// Start writes every config, mounts the loop disk when asked for
// (LoopBroker) and starts every broker.
func (c *Cluster) Start() error {
	for _, b := range c.brokers {
		if err := c.WriteConfig(b); err != nil {
			return err
		}
	}
	if l, _ := c.Loop(); l == nil && c.Broker(c.cfg.LoopBroker) != nil {
		b := c.Broker(c.cfg.LoopBroker)
		if err := c.MountCopiesDisk(b, c.cfg.LoopBytes); err != nil {
			c.mu.Lock()
			c.loopSkip = err.Error()
			c.mu.Unlock()
		}
	}
	for _, b := range c.brokers {
		if err := c.StartBroker(b); err != nil {
			return err
		}
	}
	return nil
}

// WriteConfig makes broker b's data directory and writes its config.
func (c *Cluster) WriteConfig(b *Broker) error {
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return fmt.Errorf("harness: broker %d: %w", b.ID, err)
	}
	if err := os.WriteFile(b.ConfigPath, []byte(c.configText(b)), 0o600); err != nil {
		return fmt.Errorf("harness: broker %d: %w", b.ID, err)
	}
	return nil
}

// Stop ends every broker still running: SIGTERM, then SIGKILL after a
// grace; then it unmounts and detaches the loop disk, if any, and closes
// the client's idle connections.
func (c *Cluster) Stop() {
	defer c.rpc.Close()
	defer c.releasePorts()
	defer c.closeNet()
	defer c.closeLoop()
	var wg sync.WaitGroup
	for _, b := range c.brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.stop(3 * time.Second)
		}()
	}
	wg.Wait()
}

// UnexpectedExit names a broker that exited without the harness being
// asked to stop it, with the last lines of its log.
func (c *Cluster) UnexpectedExit() error {
	for _, b := range c.brokers {
		if exited, err := b.exitedOnItsOwn(); exited {
			return fmt.Errorf("broker %d (admin %s) exited on its own: %v; last lines of %s:\n%s", b.ID, b.Admin, err, b.LogPath, TailFile(b.LogPath, 8))
		}
	}
	return nil
}

// WaitReady waits until every running broker answers /v1/health and they
// agree on a leader, and returns it. It fails at once when a broker exits
// on its own.
func (c *Cluster) WaitReady(ctx context.Context, timeout time.Duration) (meta.BrokerID, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for {
		if err := c.UnexpectedExit(); err != nil {
			return 0, err
		}
		leader, err := c.AgreedLeader(ctx, true)
		if err == nil {
			return leader, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return 0, fmt.Errorf("cluster not ready after %v: %w", timeout, lastErr)
			}
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// AgreedLeader asks every running broker for its view of the leader and
// returns it when they agree. With all, every running broker must answer.
// Leader is the quicker lookup of the broker to talk to.
func (c *Cluster) AgreedLeader(ctx context.Context, all bool) (meta.BrokerID, error) {
	var leader meta.BrokerID
	for _, b := range c.brokers {
		if !b.Alive() {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := b.Client.Health(hctx)
		cancel()
		if err != nil {
			if all {
				return 0, err
			}
			continue
		}
		if h.Leader == 0 {
			return 0, fmt.Errorf("broker %d (admin %s) knows no leader yet", b.ID, b.Admin)
		}
		if leader != 0 && h.Leader != leader {
			return 0, fmt.Errorf("brokers disagree on the leader: %d and %d", leader, h.Leader)
		}
		leader = h.Leader
	}
	if leader == 0 {
		return 0, errors.New("no running broker answered /v1/health")
	}
	return leader, nil
}

// WaitRegistered waits until the metadata, as the leader (or else a
// running broker) serves it, lists every running broker and records a
// replication factor: a loader can then place segments on all of them.
func (c *Cluster) WaitRegistered(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	missing := "no running broker"
	for {
		if err := c.UnexpectedExit(); err != nil {
			return err
		}
		if len(c.Running()) > 0 {
			snap, err := c.LeaderClient(ctx).Metadata(ctx)
			missing = ""
			if err != nil {
				missing = err.Error()
			} else if snap.ReplicationFactor == 0 {
				missing = "no replication factor recorded"
			}
			for _, r := range c.Running() {
				if _, ok := snap.Broker(r.ID); !ok && err == nil {
					missing = fmt.Sprintf("broker %d not in the metadata", r.ID)
				}
			}
			if missing == "" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("brokers not registered after %v: %s", timeout, missing)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Leader is the leader as the running brokers not in skip see it: the
// first that answers /v1/health either leads or names a running broker
// not in skip. Nil when none does (an election, a partition).
func (c *Cluster) Leader(ctx context.Context, skip ...meta.BrokerID) *Broker {
	for _, b := range c.Running() {
		if slices.Contains(skip, b.ID) {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		h, err := b.Client.Health(hctx)
		cancel()
		switch {
		case err != nil || h.Leader == 0:
			continue
		case h.IsLeader:
			return b
		}
		if lb := c.Broker(h.Leader); lb != nil && lb.Alive() && !slices.Contains(skip, lb.ID) {
			return lb
		}
	}
	return nil
}

// LeaderClient is Leader's admin client; else a running broker's, or the
// first broker's when none runs (its error then names what is wrong).
func (c *Cluster) LeaderClient(ctx context.Context) *admin.Client {
	if b := c.Leader(ctx); b != nil {
		return b.Client
	}
	if run := c.Running(); len(run) > 0 {
		return run[0].Client
	}
	return c.Brokers()[0].Client
}

// SetHealExtra replaces Config.HealExtra for the configs written from now
// on (WriteConfig, Start): a stage that needs other heal settings rewrites
// the configs and restarts the brokers it wants them on.
func (c *Cluster) SetHealExtra(extra string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg.HealExtra = extra
}

// KafkaSeeds are the brokers' Kafka listeners (empty without
// Config.Kafka), the bootstrap list of a client.
func (c *Cluster) KafkaSeeds() []string {
	var seeds []string
	for _, b := range c.brokers {
		if b.Kafka != "" {
			seeds = append(seeds, b.Kafka)
		}
	}
	return seeds
}

// KafkaTLS is a Kafka client's TLS configuration: the "client" role's
// certificate of the cluster CA (nil when insecure).
func (c *Cluster) KafkaTLS() (*tls.Config, error) {
	if c.cfg.Insecure {
		return nil, nil
	}
	certs, err := pki.LoadClient(c.certs.ClientDir(), string(pki.RoleClient))
	if err != nil {
		return nil, fmt.Errorf("harness: the Kafka client's certificate: %w", err)
	}
	cfg := certs.ClientConfig()
	cfg.ServerName = "127.0.0.1"
	return cfg, nil
}
