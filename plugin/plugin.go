package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/ratelog"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/psi"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/store"
)

// ControlPlane is what the plugin needs from the broker's control plane.
// cluster.Node implements it; a broker with its own consensus implements
// these five methods and plugs in.
type ControlPlane interface {
	// View returns this node's view of the metadata, shared and read-only
	// (it may lag the leader; the probe waits for the index it is asked
	// about). It must cost O(1) or so, not a copy: the probe and every pass
	// call it (cluster.Node.View is a copy-on-write view).
	View() *meta.View
	// Barrier returns once this node's view holds everything committed
	// before the call (leader only).
	Barrier(ctx context.Context) error
	// Apply commits c (leader only); a refused command comes back wrapping
	// meta's error (meta.ErrStaleReplicas for a lost compare-and-set).
	Apply(ctx context.Context, c meta.Command) (uint64, error)
	// IsLeader and LeaderCh report leadership: the coordinator runs only
	// while this node leads. LeaderCh sends true on gaining it and false
	// on losing it; the plugin is its only reader.
	IsLeader() bool
	LeaderCh() <-chan bool
}

// Deps are what the broker gives the plugin besides its Config.
type Deps struct {
	// Self is this broker's id. Required.
	Self meta.BrokerID
	// Store holds this broker's copies. Required.
	Store *store.DB
	// Control is the control plane. Required.
	Control ControlPlane
	// LastContact optionally reports when each broker was last heard from
	// by the control plane (raft heartbeats, known on the leader); /status
	// shows it beside the heal view. Healing itself counts a broker alive
	// by its probe answers and dead after the grace delay without one (the
	// plugin's RPC is what a source or target must answer).
	LastContact func() map[meta.BrokerID]time.Time
	// Logger receives the plugin's events. The zero Logger discards. It is
	// the host's logger, without a "component" field: each part adds its
	// own once (heal, probe, fsync, catchup, rpc, scrub, pebble).
	Logger zerolog.Logger
	// Registry is where the plugin's metrics are registered; nil creates
	// one per instance (never the global registry).
	Registry *prometheus.Registry
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// FsyncEngine names the store's directory-sync engine (from
	// NewDirSyncer), for /status and the engine metric.
	FsyncEngine string
	// Certs are the broker's certificates (pki.LoadBroker): the control
	// RPC and /metrics and /status are served and called over mutual TLS
	// with them, and backfill tickets are signed and verified with them.
	// Required unless Insecure.
	Certs *pki.Certs
	// Insecure runs the control RPC and the data listener in plaintext
	// without authentication: for a cluster on loopback that asked for it
	// (a broker's insecure = true). Exported as malachi_heal_insecure 1.
	Insecure bool
	// ClientLatency optionally gives the broker's client-facing latency
	// (its Kafka listener's Produce and Fetch p99): with
	// heal.backfill_bytes_per_second = "auto", catch-up slows down when
	// it rises above what it was while catch-up was idle. nil: no latency
	// signal (the machine's pressure still paces catch-up).
	ClientLatency ClientLatency
}

// Plugin is one broker's instance of Malachi heal. New, then Start once,
// then Stop once. A Plugin built from a disabled Config starts nothing.
type Plugin struct {
	cfg     Config
	deps    Deps
	log     zerolog.Logger
	metrics *metrics
	now     func() time.Time
	srv     *server
	client  *Client
	engines engines

	mu       sync.Mutex
	started  bool
	stopped  bool
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the listeners' goroutines
	watchWG  sync.WaitGroup // the leadership watcher
	closers  []func() error
	status   Status
	scrub    *scrubber // nil when scrubbing is off; set in Start
	pacer    *pacer    // nil unless the backfill rate is auto; set in Start
	passes   *passLog  // the pass history; set in Start
	term     *term     // the running coordinator, nil when not leading
	prevTerm *term     // the last one stopped, and when (see startTerm)
	lostAt   time.Time
	authLog  ratelog.Limiter // one line per unauthenticated peer per minute
}

// Status is the JSON of /status: this instance's view of healing.
type Status struct {
	Broker      meta.BrokerID `json:"broker"`
	Enabled     bool          `json:"enabled"`
	Leader      bool          `json:"leader"`
	RPCAddr     string        `json:"rpc_addr,omitempty"`
	DataAddr    string        `json:"data_addr,omitempty"`
	ProbeEngine string        `json:"probe_engine,omitempty"`
	FsyncEngine string        `json:"fsync_engine,omitempty"`
	// Passes counts the passes this instance's coordinator ran.
	Passes uint64 `json:"passes"`
	// LastPass is the report of the last pass this instance ran (nil if
	// none), LastPassAt its end and LastPassSeconds its duration.
	LastPass        *heal.Report `json:"last_pass,omitempty"`
	LastPassAt      time.Time    `json:"last_pass_at,omitzero"`
	LastPassSeconds float64      `json:"last_pass_seconds,omitempty"`
	// LastPassAge is how long ago the last pass ended, in seconds, when
	// the status was read; LastPassStale says why that report is no
	// longer current, empty while it is: this instance no longer leads
	// (the report is from its last term), or no pass has ended for longer
	// than StaleAfter.
	LastPassAge   float64 `json:"last_pass_age_seconds,omitempty"`
	LastPassStale string  `json:"last_pass_stale,omitempty"`
	// Totals are the running coordinator's cumulative figures (nil when
	// this instance has not led).
	Totals *Totals `json:"totals,omitempty"`
	// Insecure: this instance runs without authentication (Deps.Insecure).
	Insecure bool `json:"insecure,omitempty"`
	// Certificates are this broker's certificates and when they expire;
	// Warning is set within CertWarning of the end.
	Certificates []CertStatus `json:"certificates,omitempty"`
	// AuthFailed are the brokers the coordinator could not authenticate
	// (or that could not authenticate it) on its last pass, with why.
	AuthFailed []heal.AuthFailure `json:"auth_failed,omitempty"`
	// Hold is the mass-failure brake's reason, empty when not holding.
	Hold string `json:"hold,omitempty"`
	// Members is the control plane's view of the voters (Deps.LastContact).
	Members []Member `json:"members,omitempty"`
	// Scrub is the scrubber's progress and findings.
	Scrub *ScrubStatus `json:"scrub,omitempty"`
	// BackfillRate is this broker's catch-up rate and why.
	BackfillRate *PaceStatus `json:"backfill_rate,omitempty"`
}

// Member is one broker as the control plane last heard from it.
type Member struct {
	ID          meta.BrokerID `json:"id"`
	LastContact time.Time     `json:"last_contact,omitzero"`
	// Silent is how long ago that was, in seconds.
	Silent float64 `json:"silent_seconds"`
}

// New checks cfg and deps and returns a Plugin that has started nothing.
// It returns an error wrapping ErrConfig for a bad Config.
func New(cfg Config, deps Deps) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Plugin{cfg: cfg, deps: deps, log: deps.Logger.With().Str("component", "heal").Logger(), now: deps.Now}
	if p.now == nil {
		p.now = time.Now
	}
	p.status = Status{Broker: deps.Self, Enabled: cfg.Enabled}
	if !cfg.Enabled {
		return p, nil
	}
	if deps.Self == 0 || deps.Store == nil || deps.Control == nil {
		return nil, fmt.Errorf("%w: plugin.Deps needs Self, Store and Control", ErrConfig)
	}
	if (deps.Certs == nil) == !deps.Insecure {
		return nil, fmt.Errorf("%w: plugin.Deps needs Certs (the broker's certificates) or Insecure, and not both", ErrConfig)
	}
	if deps.Certs != nil && deps.Certs.Identity().Broker != deps.Self {
		return nil, fmt.Errorf("%w: plugin.Deps.Certs names %s, but Self is broker %d", ErrConfig, deps.Certs.Identity(), deps.Self)
	}
	reg := deps.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	p.metrics = newMetrics(reg)
	p.metrics.watchCerts(reg, deps.Certs, deps.Insecure)
	p.status.Insecure = deps.Insecure
	return p, nil
}

// Enabled reports whether the plugin was configured on.
func (p *Plugin) Enabled() bool { return p.cfg.Enabled }

// Start opens the listeners, starts the replication server and the
// leadership watcher. On a disabled plugin it does nothing and returns nil.
// On error nothing is left running.
func (p *Plugin) Start(ctx context.Context) (err error) {
	if !p.cfg.Enabled {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return fmt.Errorf("plugin: Start called twice")
	}
	p.started = true
	defer func() {
		if err != nil {
			p.closeAll()
		}
	}()
	p.engines, err = openEngines(p.cfg, p.deps, p.deps.Logger, p.metrics.backfillArrived)
	if err != nil {
		return err
	}
	p.closers = append(p.closers, p.engines.Close)
	p.startPace(ctx)
	p.status.ProbeEngine, p.status.FsyncEngine = p.engines.stat.Engine(), p.engines.fsyncName
	p.metrics.setEngine("probe", p.status.ProbeEngine)
	p.metrics.setEngine("fsync", p.status.FsyncEngine)

	p.passes, err = openPassLog(filepath.Join(p.cfg.DataDir, "passes"), p.now(), p.deps.Logger)
	if err != nil {
		return err
	}
	p.closers = append(p.closers, p.passes.close)

	p.client = NewClient(p.deps.Certs, p.deps.Self, p.resolve, p.cfg.RPCTimeout)
	p.closers = append(p.closers, func() error { p.client.Close(); return nil })
	p.srv = &server{self: p.deps.Self, db: p.deps.Store, cp: p.deps.Control, stat: p.engines.stat,
		fetch: p.engines.fetch, cfg: p.cfg, log: p.log, metrics: p.metrics}
	if p.cfg.ScrubInterval > 0 {
		sc, err := newScrubber(p.cfg, p.deps.Self, p.deps.Store, p.deps.Control, p.metrics, p.deps.Logger, p.now)
		if err != nil {
			return err
		}
		p.scrub = sc
		p.srv.scrub = sc
		sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc.run(sctx, p.log)
		}()
		p.closers = append(p.closers, func() error { scancel(); <-done; return sc.close() })
	}

	dl, err := net.Listen("tcp", p.cfg.DataListen) // catchup wraps it in TLS with data_encryption
	if err != nil {
		return fmt.Errorf("plugin: heal.data_listen = %q: %w", p.cfg.DataListen, err)
	}
	stopData := p.engines.serveData(dl, p.cfg, p.deps, p.deps.Logger)
	p.closers = append(p.closers, stopData)
	if err := p.serveRPC(); err != nil {
		return err
	}
	p.status.DataAddr = dl.Addr().String()

	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.watchWG.Add(1)
	go func() {
		defer p.watchWG.Done()
		p.watchLeadership(wctx)
	}()
	p.log.Info().Str("rpc", p.status.RPCAddr).Str("data", p.status.DataAddr).
		Str("probe_engine", p.status.ProbeEngine).Str("fsync_engine", p.status.FsyncEngine).Msg("heal plugin started")
	return nil
}

// serveRPC opens rpc_listen and serves the routes on it; its closer shuts
// the server down. p.mu is held.
func (p *Plugin) serveRPC() error {
	rl, err := rpc.Listen(p.cfg.RPCListen, p.deps.Certs)
	if err != nil {
		return fmt.Errorf("plugin: heal.rpc_listen = %q: %w", p.cfg.RPCListen, err)
	}
	hs := rpc.NewHTTPServer(p.routes(), p.deps.Logger.With().Str("component", "rpc").Logger())
	p.status.RPCAddr = rl.Addr().String()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := hs.Serve(rl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error().Err(err).Msg("rpc listener stopped")
		}
	}()
	p.closers = append(p.closers, func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			return hs.Close()
		}
		return nil
	})
	return nil
}

// startPace sets the backfill rate's metrics and, with "auto", starts the
// pacer over the catch-up throttle; its closer stops it. p.mu is held.
func (p *Plugin) startPace(ctx context.Context) {
	if !p.cfg.BackfillBytesPerSecond.Auto() {
		p.metrics.setPace(p.cfg.pinnedBackfillRate(), "fixed", 0)
		return
	}
	th := p.engines.throttle
	pc := &pacer{cfg: paceConfig(p.cfg), setRate: th.SetRate, moved: th.Moved, psi: psi.Reader{},
		lat: p.deps.ClientLatency, now: p.now, log: p.log, metrics: p.metrics}
	if send := p.engines.send; send != nil { // the target scope: what it sends is paced by its targets
		pc.beside = send.Moved
	}
	p.pacer = pc
	p.metrics.setPace(0, "none", 0)
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		pc.run(pctx)
	}()
	p.closers = append(p.closers, func() error { cancel(); <-done; return nil })
}

// closeAll runs the closers in reverse order; p.mu is held.
func (p *Plugin) closeAll() error {
	if p.cancel != nil {
		p.cancel()
	}
	var errs []error
	for i := len(p.closers) - 1; i >= 0; i-- {
		if err := p.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	p.closers = nil
	return errors.Join(errs...)
}

// Stop stops the coordinator (if running), the listeners and the engines,
// and waits for every goroutine the plugin started. Safe to call on a
// disabled or never-started plugin, and more than once.
func (p *Plugin) Stop() error {
	p.mu.Lock()
	if p.stopped || !p.started {
		p.stopped = true
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	if p.cancel != nil {
		p.cancel()
	}
	p.mu.Unlock()
	// The watcher exits on cancel (stopping the coordinator); wait for it
	// before closing what the coordinator uses.
	p.watchWG.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.closeAll()
	p.wg.Wait()
	p.log.Info().Msg("heal plugin stopped")
	return err
}

// Status returns this instance's view of healing.
func (p *Plugin) Status() Status {
	p.mu.Lock()
	s := p.status
	s.Totals = s.Totals.clone() // Totals is changed in place under mu
	sc := p.scrub
	stat := p.engines.stat
	pc := p.pacer
	p.mu.Unlock()
	if sc != nil {
		st := sc.snapshot()
		s.Scrub = &st
	}
	switch {
	case pc != nil:
		s.BackfillRate = pc.status()
	case p.cfg.Enabled:
		s.BackfillRate = &PaceStatus{Mode: "fixed", BytesPerSecond: p.cfg.pinnedBackfillRate(), Reason: "fixed"}
	}
	if p.deps.LastContact != nil && p.cfg.Enabled {
		now := p.now()
		for id, at := range p.deps.LastContact() {
			m := Member{ID: id, LastContact: at}
			if !at.IsZero() {
				m.Silent = now.Sub(at).Seconds()
			}
			s.Members = append(s.Members, m)
		}
		slices.SortFunc(s.Members, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	}
	if s.LastPass != nil {
		s.LastPassAge = p.now().Sub(s.LastPassAt).Seconds()
		s.LastPassStale = p.staleness(s.Leader, p.now().Sub(s.LastPassAt))
	}
	s.Certificates = certStatus(p.deps.Certs, p.now())
	if stat != nil {
		s.ProbeEngine = stat.Engine() // auto's current choice
	}
	return s
}

// StaleAfter is how long without a finished pass makes the leader's last
// report stale: ten ticks, or two probe deadlines, or 30 s, the longest.
func (c Config) StaleAfter() time.Duration {
	return max(10*c.Tick, 2*c.ProbeDeadline, 30*time.Second)
}

// staleness is why a last pass that ended age ago is no longer current,
// "" while it is.
func (p *Plugin) staleness(leading bool, age time.Duration) string {
	switch {
	case !leading:
		return fmt.Sprintf("this broker does not lead: the report is from its last term, %s ago", age.Round(time.Second))
	case age > p.cfg.StaleAfter():
		return fmt.Sprintf("no pass has ended for %s (stale after %s)", age.Round(time.Second), p.cfg.StaleAfter())
	}
	return ""
}

// Client returns the RPC client the coordinator uses (nil before Start).
func (p *Plugin) Client() *Client { return p.client }

// routes are the rpc_listen's: the RPCs for brokers, /metrics and
// /status for viewers and operators.
func (p *Plugin) routes() http.Handler {
	mux := http.NewServeMux()
	rpcs := &rpc.Server{Certs: p.deps.Certs, Insecure: p.deps.Insecure, Codes: errCodes, MaxBody: maxBody,
		Logger: p.deps.Logger.With().Str("component", "rpc").Logger(), Refused: p.metrics.refused}
	p.srv.routes(mux, rpcs)
	mux.Handle("GET /metrics", rpcs.WrapHTTP(rpc.Viewers, promhttp.HandlerFor(p.metrics.reg, promhttp.HandlerOpts{})))
	rpcs.Handle(mux, "GET /status", rpc.Viewers, func(context.Context, *rpc.Request) (any, error) { return p.Status(), nil })
	rpcs.Handle(mux, "GET /passes", rpc.Viewers, func(_ context.Context, r *rpc.Request) (any, error) {
		since, limit, err := ParsePassQuery(r.HTTP.URL.Query())
		if err != nil {
			return nil, err
		}
		return p.Passes(since, limit), nil
	})
	return mux
}

// resolve finds a broker's addresses in this node's metadata.
func (p *Plugin) resolve(id meta.BrokerID) (meta.Broker, bool) {
	return p.deps.Control.View().Broker(id)
}
