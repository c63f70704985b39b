package plugin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/catchup"
	"github.com/malachi-log/malachi/fsync"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/probe"
	"github.com/malachi-log/malachi/store"
)

// engines are the I/O machinery an enabled instance opens at Start: the
// stat engine of the probe, the catch-up client and server, the fsync
// engine's name (the engine itself is the store's DirSyncer, given by the
// broker at store.Open; see NewDirSyncer).
type engines struct {
	stat      statter
	fetch     fetcher
	fsyncName string
	throttle  *catchup.Throttle // what this broker receives; what it sends too unless send is set
	// send paces what this broker sends when its rate does not
	// (Config.pacesSends false): no byte cap, the same slots; nil: throttle.
	send    *catchup.Throttle
	closers []func() error
}

// openEngines opens the engines of cfg; arrived counts the bytes of the
// backfills into this broker as they arrive.
func openEngines(cfg Config, deps Deps, log zerolog.Logger, arrived prometheus.Counter) (engines, error) {
	var e engines
	kind, err := probe.ParseKind(cfg.ProbeEngine)
	if err != nil {
		return e, fmt.Errorf("%w: heal.probe_engine = %q: %v", ErrConfig, cfg.ProbeEngine, err)
	}
	pc := probe.DefaultConfig()
	pc.Engine, pc.Logger = kind, log.With().Str("component", "probe").Logger()
	pr, err := probe.New(pc)
	if err != nil {
		return e, fmt.Errorf("plugin: heal.probe_engine = %q: %w", cfg.ProbeEngine, err)
	}
	e.stat = proberStatter{pr}
	e.closers = append(e.closers, pr.Close)
	e.fsyncName = deps.FsyncEngine
	limits := catchup.Limits{
		BytesPerSecond: cfg.pinnedBackfillRate(), // auto: no cap until the pacer's first step, at Start
		MaxTransfers:   cfg.MaxTransfersPerBroker,
		QueueWait:      cfg.BackfillTimeout,
		IdleTimeout:    10 * time.Second,
		Background:     cfg.BackfillBackground,
	}
	th, err := catchup.NewThrottle(limits)
	if err != nil {
		return e, fmt.Errorf("%w: catch-up limits: %v", ErrConfig, err)
	}
	e.throttle = th
	if !cfg.pacesSends() {
		limits.BytesPerSecond = 0
		if e.send, err = catchup.NewThrottle(limits); err != nil {
			return e, fmt.Errorf("%w: catch-up send limits: %v", ErrConfig, err)
		}
	}
	cl := &catchup.Client{Insecure: deps.Insecure, Throttle: th, Logger: log.With().Str("component", "catchup").Logger()}
	if cfg.DataEncryption && deps.Certs != nil {
		cl.TLS = deps.Certs.ClientConfig()
	}
	e.fetch = &catchupFetcher{cl: cl, db: deps.Store, arrived: arrived}
	return e, nil
}

// Close releases the engines.
func (e *engines) Close() error {
	var first error
	for i := len(e.closers) - 1; i >= 0; i-- {
		if err := e.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	e.closers = nil
	return first
}

// proberStatter is the statter over probe.Prober.
type proberStatter struct{ p *probe.Prober }

func (s proberStatter) Engine() string { return s.p.Choice().Kind.String() }

func (s proberStatter) StatBatch(ctx context.Context, b *probe.Batch, out []probe.Result) error {
	return s.p.ProbeBatch(ctx, b, out)
}

// sendThrottle is the throttle of what this broker sends.
func (e *engines) sendThrottle() *catchup.Throttle {
	if e.send != nil {
		return e.send
	}
	return e.throttle
}

// serveData runs the catch-up server on l until the returned stop is
// called.
func (e *engines) serveData(l net.Listener, cfg Config, deps Deps, log zerolog.Logger) (stop func() error) {
	log = log.With().Str("component", "catchup").Logger()
	srv := &catchup.Server{Source: catchup.StoreSource{DB: deps.Store}, Self: deps.Self, Insecure: deps.Insecure,
		Throttle: e.sendThrottle(), Logger: log}
	if deps.Certs != nil {
		srv.Tickets = deps.Certs
		if cfg.DataEncryption {
			srv.TLS = brokerServerTLS(deps.Certs)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !isClosed(err) {
			log.Error().Err(err).Msg("catch-up listener stopped")
		}
	}()
	return func() error {
		err := srv.Close()
		<-done
		return err
	}
}

// catchupFetcher is the fetcher over catchup.Client and the local store;
// it counts the bytes of each fetch in arrived as they arrive.
type catchupFetcher struct {
	cl      *catchup.Client
	db      *store.DB
	arrived prometheus.Counter
}

func (f *catchupFetcher) Fetch(ctx context.Context, addr string, seg meta.Segment, ticket []byte) (catchup.Result, error) {
	at := int64(-1) // the first call gives where the fetch resumes
	progress := func(done, _ int64) {
		if at >= 0 && done > at {
			f.arrived.Add(float64(done - at))
		}
		at = done
	}
	return f.cl.Fetch(ctx, addr, seg, ticket, resumeSink{catchup.StoreSink{DB: f.db}}, progress)
}

// resumeSink is the store's sink with its failure to open the target copy
// at its durable end (latched, unreadable) marked heal.ErrNoDurableEnd: the
// source was not read, so the coordinator holds it against the target, not
// the source. A copy whose own seal disagrees stays a seal conflict (its
// wire code comes first).
type resumeSink struct{ catchup.StoreSink }

func (s resumeSink) OpenTarget(seg meta.Segment) (catchup.Target, error) {
	t, err := s.StoreSink.OpenTarget(seg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", heal.ErrNoDurableEnd, err)
	}
	return t, nil
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, catchup.ErrServerClosed)
}

// DirSyncer is the directory syncer a broker gives its store
// (store.Options.DirSyncer) when the plugin is enabled.
type DirSyncer = store.DirSyncer

// NewDirSyncer returns the fsync engine chosen by cfg.FsyncEngine for the
// store, its name (for Deps.FsyncEngine and the metrics) and its close
// func. Call it only for an enabled plugin: a disabled one creates nothing.
func NewDirSyncer(cfg Config, log zerolog.Logger) (DirSyncer, string, func() error, error) {
	kind, err := fsync.ParseKind(cfg.FsyncEngine)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%w: heal.fsync_engine = %q: %v", ErrConfig, cfg.FsyncEngine, err)
	}
	fc := fsync.DefaultConfig()
	fc.Engine, fc.Logger = kind, log.With().Str("component", "fsync").Logger()
	s, err := fsync.New(fc)
	if err != nil {
		return nil, "", nil, fmt.Errorf("plugin: heal.fsync_engine = %q: %w", cfg.FsyncEngine, err)
	}
	return s, s.Choice().Kind.String(), s.Close, nil
}

// brokerServerTLS is the data listener's TLS config with data_encryption:
// the handshake must present a broker certificate of the cluster CA.
func brokerServerTLS(certs *pki.Certs) *tls.Config {
	cfg := certs.ServerConfig()
	cfg.ClientAuth = tls.RequireAnyClientCert
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		id, err := certs.VerifyPeer(cs.PeerCertificates)
		if err != nil {
			return err
		}
		if id.Role != pki.RoleBroker {
			return fmt.Errorf("%w: catch-up data from %s, not a broker", pki.ErrUntrusted, id)
		}
		return nil
	}
	return cfg
}
