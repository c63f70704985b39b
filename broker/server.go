package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/cluster"
	"github.com/malachi-log/malachi/internal/retry"
	"github.com/malachi-log/malachi/kafka"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/store"
)

// Server is one running broker: store, control plane, admin API and,
// when enabled, the heal plugin and the Kafka listener. Open starts it,
// Close stops it; it is safe for concurrent use.
type Server struct {
	cfg       Config
	self      meta.BrokerID
	log       zerolog.Logger
	db        *store.DB
	node      *cluster.Node
	heal      *plugin.Plugin
	faults    *faultFS
	holds     *produceHolds // the produce hold (faults_hold.go); nil without fault_injection
	certs     *pki.Certs    // nil in insecure mode
	rpc       *rpc.Client   // calls other brokers' admin APIs with certs
	adminAddr string
	kafkaAddr string        // "" without kafka_listen
	kafka     *kafkaCluster // nil without kafka_listen
	// clientLatency is the Kafka listener's Produce and Fetch handling
	// times and, as a follower, what the partition leaders' clients wait
	// on (internalFrame): the adaptive backfill rate's client signal (nil
	// without kafka_listen).
	clientLatency *kafka.Latency
	admin         *http.Server
	adminDone     chan struct{}

	segMu   sync.Mutex
	segLock map[meta.SegmentID]*sync.Mutex
	fences  map[meta.SegmentID]bool // copies fenced for a takeover's seal (segment.go)
	placeMu sync.Mutex
	cursor  int
	creates createLocks // one create of a segment id at a time (leftovers.go)

	closeOnce sync.Once
	closeErr  error
	bgCtx     context.Context // ends at Close
	bgCancel  context.CancelFunc
	bg        sync.WaitGroup
	closers   []func() error
}

// Open starts a broker with cfg, logging to log; a cfg that Validate or
// LoadCerts refuses is refused before anything is created under data_dir.
// On error nothing is left running. ctx is handed to the
// heal plugin's Start (plugin.Plugin.Start).
func Open(ctx context.Context, cfg Config, log zerolog.Logger) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Server{cfg: cfg, self: meta.BrokerID(cfg.ID), log: log, segLock: map[meta.SegmentID]*sync.Mutex{}, fences: map[meta.SegmentID]bool{}}
	if cfg.KafkaListen != "" {
		b.clientLatency = new(kafka.Latency)
	}
	// Each step adds what it opened to b.closers (or sets b.admin, b.bgCancel)
	// as soon as it is open, so this Close releases it when a later step fails.
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if !cfg.Insecure {
		if b.certs, err = cfg.LoadCerts(); err != nil {
			return nil, err
		}
	}
	b.rpc = rpc.NewClient(b.certs, adminCodes, 0)
	b.closers = append(b.closers, func() error { b.rpc.Close(); return nil })
	fsyncEngine, err := b.openStore()
	if err != nil {
		return nil, err
	}

	// The control plane.
	if b.node, err = cluster.Open(b.clusterConfig()); err != nil {
		if errors.Is(err, cluster.ErrConfig) {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return nil, err
	}
	b.closers = append(b.closers, b.node.Close)

	// The plugin, only when enabled: a disabled one creates nothing.
	if cfg.Heal.Enabled {
		if err := b.startHeal(ctx, fsyncEngine); err != nil {
			return nil, err
		}
	}
	if err := b.serveAdmin(); err != nil {
		return nil, err
	}

	bgctx, cancel := context.WithCancel(context.Background())
	b.bgCtx, b.bgCancel = bgctx, cancel
	if cfg.KafkaListen != "" {
		if err := b.startKafka(); err != nil {
			return nil, err
		}
	}
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		b.register(bgctx)
	}()
	return b, nil
}

// openStore creates the data directory and opens the store in it, through
// the fault-injecting FS when asked, with the plugin's fsync engine as its
// directory syncer when heal is enabled; it returns that engine's name.
// What it opens is added to b.closers.
func (b *Server) openStore() (fsyncEngine string, err error) {
	cfg := &b.cfg
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return "", fmt.Errorf("malachid: data_dir = %q: %w", cfg.DataDir, err)
	}
	opts := store.Options{Logger: b.log, Preallocate: cfg.Preallocate}
	if cfg.FaultInjection {
		b.faults = newFaultFS(store.OSFS())
		b.holds = newProduceHolds()
		opts.FS = b.faults
	}
	if cfg.Heal.Enabled {
		ds, name, closeDS, err := plugin.NewDirSyncer(cfg.Heal, b.log)
		if err != nil {
			return "", err
		}
		b.closers = append(b.closers, closeDS)
		opts.DirSyncer, fsyncEngine = ds, name
	}
	if b.db, err = store.Open(cfg.DataDir, opts); err != nil {
		return "", err
	}
	b.closers = append(b.closers, b.db.Close)
	return fsyncEngine, nil
}

// clusterConfig is the control plane's configuration: b's peers (b alone
// when none are configured), raft timings and TLS.
func (b *Server) clusterConfig() cluster.Config {
	cfg := &b.cfg
	peers, _ := cfg.parsePeers()
	cc := cluster.DefaultConfig()
	cc.ID, cc.Dir, cc.Addr = b.self, filepath.Join(cfg.DataDir, "raft"), cfg.RaftListen
	for _, p := range peers {
		cc.Peers = append(cc.Peers, cluster.Peer{ID: p.ID, Addr: p.Addr})
	}
	if len(cc.Peers) == 0 {
		cc.Peers = []cluster.Peer{{ID: b.self, Addr: cfg.RaftListen}}
	}
	cc.ReplicationFactor = cfg.ReplicationFactor
	r := cfg.Raft
	cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout, cc.CommitTimeout = r.HeartbeatTimeout, r.ElectionTimeout, r.LeaderLeaseTimeout, r.CommitTimeout
	if r.SnapshotThreshold > 0 {
		cc.SnapshotThreshold = r.SnapshotThreshold
	}
	cc.Logger = b.log
	cc.TLS, cc.Insecure = b.certs, cfg.Insecure
	return cc
}

// startHeal creates the heal plugin over the store and the control plane
// and starts it; fsyncEngine names the store's directory syncer. Once it
// has started, its Stop is added to b.closers.
func (b *Server) startHeal(ctx context.Context, fsyncEngine string) error {
	var err error
	deps := plugin.Deps{
		Self: b.self, Store: b.db, Control: b.node, LastContact: b.lastContact,
		Logger: b.log, Registry: prometheus.NewRegistry(), FsyncEngine: fsyncEngine,
		Certs: b.certs, Insecure: b.cfg.Insecure,
	}
	if b.clientLatency != nil { // a nil *kafka.Latency in the interface would not read as none
		deps.ClientLatency = b.clientLatency
	}
	b.heal, err = plugin.New(b.cfg.Heal, deps)
	if err != nil {
		if errors.Is(err, plugin.ErrConfig) {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return err
	}
	if err := b.heal.Start(ctx); err != nil {
		return err
	}
	b.closers = append(b.closers, b.heal.Stop)
	return nil
}

// serveAdmin listens on admin_listen and serves the admin API until Close
// shuts b.admin down (b.adminDone is closed when it has stopped).
func (b *Server) serveAdmin() error {
	l, err := rpc.Listen(b.cfg.AdminListen, b.certs)
	if err != nil {
		return fmt.Errorf("malachid: admin_listen = %q: %w", b.cfg.AdminListen, err)
	}
	log := b.log
	b.adminAddr = l.Addr().String()
	b.admin = rpc.NewHTTPServer(b.routes(), log.With().Str("component", "admin").Logger())
	b.adminDone = make(chan struct{})
	go func() {
		defer close(b.adminDone)
		if err := b.admin.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("admin listener stopped")
		}
	}()
	return nil
}

// Close stops the admin API, the plugin, the control plane and the store,
// in that order.
func (b *Server) Close() error {
	b.closeOnce.Do(func() {
		var errs []error
		if b.bgCancel != nil {
			b.bgCancel()
		}
		if b.admin != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := b.admin.Shutdown(ctx); err != nil {
				_ = b.admin.Close()
			}
			cancel()
			<-b.adminDone
		}
		b.bg.Wait()
		for i := len(b.closers) - 1; i >= 0; i-- {
			if err := b.closers[i](); err != nil {
				errs = append(errs, err)
			}
		}
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// AdminAddr is the address the admin API listens on: admin_listen with
// its port resolved (admin_listen = "127.0.0.1:0" picks a free one).
func (b *Server) AdminAddr() string { return b.adminAddr }

// KafkaAddr is the address the Kafka listener listens on, "" without
// kafka_listen.
func (b *Server) KafkaAddr() string { return b.kafkaAddr }

// ReloadCerts reads the certificates again (SIGHUP): new connections of
// every listener and dialer use them; a failed reload keeps the old ones.
func (b *Server) ReloadCerts() {
	if b.certs == nil {
		b.log.Warn().Msg("SIGHUP: insecure mode has no certificates to reload")
		return
	}
	if err := b.certs.Reload(); err != nil {
		b.log.Error().Err(err).Msg("SIGHUP: certificates not reloaded; the previous ones stay in use")
		return
	}
	ev := b.log.Info()
	for _, e := range b.certs.Expiries() {
		ev = ev.Time(e.File, e.NotAfter)
	}
	ev.Msg("SIGHUP: certificates reloaded")
}

// lastContact reports the control plane's last contact with each voter.
func (b *Server) lastContact() map[meta.BrokerID]time.Time {
	ms := b.node.Members()
	out := make(map[meta.BrokerID]time.Time, len(ms))
	for _, m := range ms {
		out[m.ID] = m.LastContact
	}
	return out
}

// register records this broker and its addresses in the metadata, retrying
// until it is committed (through the leader, wherever it is).
func (b *Server) register(ctx context.Context) {
	br := meta.Broker{ID: b.self, Rack: b.cfg.Rack, AdminAddr: b.adminAddr, RaftAddr: b.cfg.RaftListen, KafkaAddr: b.kafkaAddr}
	if b.heal != nil {
		st := b.heal.Status()
		br.RPCAddr, br.DataAddr = st.RPCAddr, st.DataAddr
	}
	bo := retry.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	for {
		snap := b.node.Snapshot()
		if cur, ok := snap.Broker(b.self); ok && cur == br {
			return
		}
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := b.apply(actx, meta.RegisterBroker{Broker: br})
		cancel()
		if err == nil {
			b.log.Info().Str("admin", br.AdminAddr).Str("rpc", br.RPCAddr).Str("data", br.DataAddr).Msg("broker registered")
			return
		}
		b.log.Debug().Err(err).Msg("register: retrying")
		if bo.Wait(ctx) != nil {
			return
		}
	}
}
