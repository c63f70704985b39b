package plugin

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pass"
)

// ErrNotCoordinator is returned by DryRun and Release on an instance that
// is not running the coordinator (not the leader, or disabled).
var ErrNotCoordinator = errors.New("plugin: not the heal coordinator (not the raft leader)")

// passMetadata adapts the ControlPlane to pass.Metadata.
type passMetadata struct {
	cp ControlPlane
	m  *metrics
	// barriered is set once a barrier succeeded in this leadership term.
	barriered *atomic.Bool
	// applied is the index of the last command applied since the last
	// pass was recorded (0: none); recordPass takes it.
	applied *atomic.Uint64
}

// View implements pass.Metadata. The first pass of a term starts
// with a barrier, so the view holds everything earlier leaders committed;
// after that the leader's own view already holds every command it
// acknowledged (Apply returns once its state machine applied it), and the
// barrier's log write would only slow every pass down.
func (h passMetadata) View(ctx context.Context) (*meta.View, error) {
	if !h.barriered.Load() {
		start := time.Now()
		if err := h.cp.Barrier(ctx); err != nil {
			return nil, err
		}
		h.m.barrierSeconds.Observe(time.Since(start).Seconds())
		h.barriered.Store(true)
	}
	return h.cp.View(), nil
}

// SetReplicas implements pass.Metadata.
func (h passMetadata) SetReplicas(ctx context.Context, cmd meta.SetSegmentReplicas) error {
	start := time.Now()
	idx, err := h.cp.Apply(ctx, cmd)
	h.m.commandSeconds.Observe(time.Since(start).Seconds())
	if err == nil {
		h.applied.Store(idx)
	}
	return err
}

// term is one leadership term's coordinator.
type term struct {
	barriered atomic.Bool // see passMetadata; reset at every term start
	applied   atomic.Uint64
	c         *pass.Coordinator
}

// watchLeadership runs the coordinator while this node leads: started on
// gaining leadership, cancelled on losing it. IsLeader is polled as well,
// so a notification lost before the watcher started changes nothing.
func (p *Plugin) watchLeadership(ctx context.Context) {
	ch := p.deps.Control.LeaderCh()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		leading := p.deps.Control.IsLeader()
		switch {
		case leading && stop == nil:
			stop = p.startTerm(ctx)
		case !leading && stop != nil:
			stop()
			stop = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-poll.C:
		}
	}
}

// startTerm starts a coordinator and returns the func that stops it and
// waits for it.
//
// A node that regains leadership within one grace delay of losing it (a
// flap under load) keeps its coordinator, and with it the brokers'
// last-seen times: a broker already missing does not get a fresh grace
// delay on every flap, and a broker that answered before the flap is at
// most suspect after it.
func (p *Plugin) startTerm(parent context.Context) func() {
	ctx, cancel := context.WithCancel(parent)
	p.mu.Lock()
	t := p.prevTerm
	reuse := t != nil && p.now().Sub(p.lostAt) < p.cfg.Grace
	p.mu.Unlock()
	if !reuse {
		var err error
		if t, err = p.newTerm(); err != nil {
			p.log.Error().Err(err).Msg("coordinator: cannot start")
			cancel()
			return func() {}
		}
		p.mu.Lock()
		p.status.Totals = newTotals(p.now())
		p.mu.Unlock()
	}
	t.barriered.Store(false) // a new term: catch up with earlier leaders first
	p.mu.Lock()
	p.term, p.prevTerm = t, nil
	p.status.Leader = true
	p.mu.Unlock()
	p.metrics.leader.Set(1)
	p.log.Info().Bool("resumed", reuse).Msg("coordinator started: this node leads")

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = t.c.Run(ctx) // heal's pass loop; it returns when ctx is cancelled
	}()
	return func() {
		cancel()
		wg.Wait()
		p.mu.Lock()
		if p.term == t {
			p.term = nil
		}
		p.prevTerm, p.lostAt = t, p.now()
		p.status.Leader = false
		p.mu.Unlock()
		p.metrics.leader.Set(0)
		p.log.Info().Msg("coordinator stopped: leadership lost or plugin stopping")
	}
}

// newTerm builds a coordinator over the plugin's client and control plane.
// pass runs the pass loop (Coordinator.Run) on the plugin's clock; the
// plugin reacts to each pass's Report (metrics, status, log).
func (p *Plugin) newTerm() (*term, error) {
	t := &term{}
	pol := heal.Policy{Grace: p.cfg.Grace, SettleBatch: p.cfg.SettleBatch,
		MaxBackfillsPerBroker: p.cfg.PassBackfills, MaxBackfills: p.cfg.PassBackfills, HoldShare: p.cfg.HoldShare, LeftoverDelay: p.cfg.LeftoverDelay, MaxMaintenance: p.cfg.MaxMaintenance,
		Rebalance: p.cfg.Rebalance, RebalanceMoves: p.cfg.RebalanceMoves}
	c, err := pass.New(pass.Config{
		Metadata: passMetadata{cp: p.deps.Control, m: p.metrics, barriered: &t.barriered, applied: &t.applied}, Prober: p.client, Backfiller: p.client, Settler: p.client, Deleter: p.client,
		Policy: pol, Now: p.now, Tick: p.cfg.Tick, Concurrency: p.cfg.MaxBackfills, PerBroker: p.cfg.MaxBackfillsPerBroker,
		ProbeTimeout: p.cfg.ProbeDeadline, Logger: p.log,
		OnReport: func(r heal.Report) { p.recordPass(&r, r.Took, t.applied.Swap(0)) },
	})
	if err != nil {
		return nil, err
	}
	t.c = c
	return t, nil
}

// recordPass updates metrics, status and the pass history with a pass's
// report; applied is the index of the last command it applied (0: none).
func (p *Plugin) recordPass(r *heal.Report, took time.Duration, applied uint64) {
	p.metrics.observePass(r, took.Seconds())
	end := p.now()
	if p.passes != nil {
		rec := PassRecord{Broker: p.deps.Self, Started: end.Add(-took), Ended: end, ViewIndex: r.Index, AppliedIndex: applied, Report: *r}
		if err := p.passes.add(rec); err != nil {
			p.log.Error().Err(err).Uint64("index", r.Index).Msg("pass history: cannot record the pass")
		}
	}
	p.mu.Lock()
	p.status.Passes++
	rc := *r
	p.status.LastPass = &rc
	p.status.LastPassAt = end
	p.status.LastPassSeconds = took.Seconds()
	p.status.Hold = r.HoldReason
	p.status.AuthFailed = r.AuthFailed
	if p.status.Totals == nil {
		p.status.Totals = newTotals(p.now())
	}
	p.status.Totals.add(r)
	p.mu.Unlock()
	p.metrics.auth.authFailed.Set(float64(len(r.AuthFailed)))
	for _, a := range r.AuthFailed {
		if ok, n := p.authLog.Allow(strconv.FormatUint(uint64(a.Broker), 10), p.now()); ok {
			p.log.Error().Uint32("peer", uint32(a.Broker)).Str("reason", a.Reason).Int("suppressed_since_last", n).
				Msg("heal: cannot authenticate broker: not probed, not a source or target, not counted dead")
		}
	}
	ev := p.log.Info()
	if len(r.Failed) > 0 || r.UnderReplicated > 0 {
		ev = p.log.Warn()
	}
	if r.Backfills == 0 && len(r.Healed) == 0 && len(r.Failed) == 0 && r.UnderReplicated == 0 && len(r.Settled) == 0 {
		ev = p.log.Debug()
	}
	ev.Uint64("index", r.Index).Int("segments", r.Segments).Int("under_replicated", r.UnderReplicated).
		Int("backfills", r.Backfills).Int("healed", len(r.Healed)).Int("failed", len(r.Failed)).
		Int("unsettled", len(r.Unsettled)).Int("settled", len(r.Settled)).Int("confirmed", len(r.Confirmed)).
		Int("deleted", len(r.Deleted)).Int("stale", len(r.Stale)).Int64("bytes_copied", r.BytesCopied).
		Str("hold", r.HoldReason).Float64("took_seconds", took.Seconds()).Msg("heal pass")
	for _, e := range r.Events {
		ev := p.log.Warn()
		if e.Kind == heal.EventHoldLifted {
			ev = p.log.Info()
		}
		ev.Str("event", e.Kind.String()).Str("segment", string(e.Segment)).Uint32("peer", uint32(e.Broker)).
			Str("detail", e.Detail).Msg("heal: state changed")
	}
	for _, f := range r.Failed {
		p.log.Warn().Str("segment", string(f.Segment)).Str("reason", f.Reason.String()).Str("err", f.Err).
			Interface("copies", f.Copies).Msg("segment not healed")
	}
}

// DryRun returns the plan the next pass would execute, executing nothing.
// Only the coordinator (the leader's instance) can answer: elsewhere it
// returns ErrNotCoordinator.
func (p *Plugin) DryRun(ctx context.Context) (heal.Plan, error) {
	p.mu.Lock()
	t := p.term
	p.mu.Unlock()
	if t == nil {
		return heal.Plan{}, ErrNotCoordinator
	}
	return t.c.DryRun(ctx)
}

// Release lifts a mass-failure hold on the coordinator.
func (p *Plugin) Release() error {
	p.mu.Lock()
	t := p.term
	p.mu.Unlock()
	if t == nil {
		return ErrNotCoordinator
	}
	t.c.Release()
	return nil
}

// Acknowledge marks a lost segment as acknowledged by an operator: the
// reports keep it, marked so. It returns ErrNotCoordinator off the
// coordinator, and heal's ErrInvalid or ErrNotLost unchanged.
func (p *Plugin) Acknowledge(id meta.SegmentID) error {
	p.mu.Lock()
	t := p.term
	p.mu.Unlock()
	if t == nil {
		return ErrNotCoordinator
	}
	return t.c.Acknowledge(id)
}

// Unplaceable returns the brokers this instance's coordinator counted
// dead or suspect on its last pass, or could not authenticate: a new
// segment placed on one would be replaced by the next pass (a broker back
// from a replaced data directory answers no probe until its metadata has
// caught up, though the control plane already hears it). Empty when this
// instance is not the coordinator.
func (p *Plugin) Unplaceable() map[meta.BrokerID]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.status.LastPass
	if !p.status.Leader || r == nil {
		return nil
	}
	out := map[meta.BrokerID]bool{}
	for _, b := range slices.Concat(r.Dead, r.Suspect) {
		out[b] = true
	}
	for _, a := range r.AuthFailed {
		out[a.Broker] = true
	}
	return out
}
