package pass

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// Config configures a Coordinator. Metadata and the four broker interfaces
// are required; the rest has defaults (see New).
type Config struct {
	Metadata   Metadata
	Prober     Prober
	Backfiller Backfiller
	Settler    Settler
	Deleter    Deleter
	// Policy bounds each pass (heal.DefaultPolicy when zero).
	Policy heal.Policy
	// Now is the clock; time.Now when nil. The planner never reads it:
	// the Coordinator stamps each pass and each probe answer with it.
	Now func() time.Time
	// After is the timer of the loop and of the return checks: a channel
	// that receives once d has passed on the clock Now reads; time.After
	// when nil.
	After func(d time.Duration) <-chan time.Time
	// Tick is the pass period of Run (default 10s); FastTick the period
	// while a broker is inside its grace delay or a segment waits (default
	// 25ms), so that the pass that finds it dead starts within FastTick of
	// the delay's end. A pass that did work is followed at once (see
	// NextPass).
	Tick, FastTick time.Duration
	// Concurrency bounds the backfills, settles and confirmations running
	// at once (default 8); PerBroker bounds those touching one broker, as
	// source or target (default 2).
	Concurrency int
	PerBroker   int
	// ProbeTimeout bounds each broker's probe (default 2s); a broker that
	// does not answer in time is not up this tick.
	ProbeTimeout time.Duration
	// ProbeHedge is how long a probe waits for an answer before it asks
	// the broker again, keeping the first attempt (default ProbeTimeout/4;
	// at most ProbeAttempts attempts, all within one ProbeTimeout; negative:
	// never). A link that drops packets, as a flapping one does, loses the
	// first attempt; a later one may land while the link is up. An attempt
	// that fails at once (a refused connection) is the probe's answer.
	ProbeHedge time.Duration
	// MaxProbes bounds the probes in flight at once (default 0: every
	// broker of the metadata at once). Each probe has its own
	// ProbeTimeout, so a broker slow to answer costs its own deadline and
	// delays no other broker's probe; a pass's probing lasts at most one
	// ProbeTimeout whatever the cluster's size.
	MaxProbes int
	// Logger receives the loop's and the executor's lines (a failed pass,
	// a failed settle, a returning broker, an operator's release or
	// acknowledgement); the zero Logger discards. The core logs nothing:
	// its decisions are in each Report (Events).
	Logger zerolog.Logger
	// AvoidPasses is how many passes a broker whose backfill of a new
	// replica failed is not chosen again for that segment (default 5).
	AvoidPasses int
	// ReturnCheck is how often, while a pass's backfills run, the brokers
	// whose dead replicas they replace are probed again (default 1s;
	// negative disables). When one answers with an intact copy of a
	// segment, that segment's backfills are cancelled and its replica set
	// is left as it was (heal.Report.Returned, BytesSaved): the next pass
	// counts the returning copy again.
	ReturnCheck time.Duration
	// OnReport, when set, is called with every pass's Report (metrics,
	// status). It must not block for long.
	OnReport func(heal.Report)
	// RefuseAfter is how many failed backfills of one segment from one
	// source, in a row and with the segment unchanged, count as that
	// source refusing when the errors do not say so (default 3; negative:
	// only errors wrapping heal.ErrSourceRefused count). An error wrapping
	// heal.ErrSourceRefused counts at once. A refused source is not read for the
	// segment again until the segment changes (see Refusal). It sets
	// heal.Policy.RefuseAfter when that is zero; AvoidPasses likewise.
	RefuseAfter int
}

// Coordinator runs heal passes while its caller holds leadership: it
// observes (metadata view, probes), calls HealSealed (which steps the core
// and runs the backfills and settles), and applies what it returns (its
// outcomes go to the next Step). Its memory is one State value. Run, Pass,
// HealSealed and DryRun serialise with each other; Last, Release and
// Acknowledge are safe at any time.
type Coordinator struct {
	cfg     Config
	passMu  sync.Mutex // serialises Pass, HealSealed and DryRun
	planner heal.Planner
	state   heal.State
	pending *heal.Outcomes // the last pass's execution, for the next Step

	mu       sync.Mutex
	last     heal.Report
	release  bool             // an operator's release not yet stepped
	acks     []meta.SegmentID // operators' acknowledgements not yet stepped
	seenBack []heal.Seen      // brokers that answered while a plan ran
}

// New checks cfg and returns a Coordinator. The error wraps
// heal.ErrInvalid and names the missing or bad field.
func New(cfg Config) (*Coordinator, error) {
	switch {
	case cfg.Metadata == nil:
		return nil, fmt.Errorf("%w: coordinator config: Metadata is nil", heal.ErrInvalid)
	case cfg.Prober == nil:
		return nil, fmt.Errorf("%w: coordinator config: Prober is nil", heal.ErrInvalid)
	case cfg.Backfiller == nil:
		return nil, fmt.Errorf("%w: coordinator config: Backfiller is nil", heal.ErrInvalid)
	case cfg.Settler == nil:
		return nil, fmt.Errorf("%w: coordinator config: Settler is nil", heal.ErrInvalid)
	case cfg.Deleter == nil:
		return nil, fmt.Errorf("%w: coordinator config: Deleter is nil", heal.ErrInvalid)
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("%w: coordinator config: Concurrency %d is negative", heal.ErrInvalid, cfg.Concurrency)
	case cfg.PerBroker < 0:
		return nil, fmt.Errorf("%w: coordinator config: PerBroker %d is negative", heal.ErrInvalid, cfg.PerBroker)
	case cfg.ProbeTimeout < 0:
		return nil, fmt.Errorf("%w: coordinator config: ProbeTimeout %v is negative", heal.ErrInvalid, cfg.ProbeTimeout)
	case cfg.AvoidPasses < 0:
		return nil, fmt.Errorf("%w: coordinator config: AvoidPasses %d is negative", heal.ErrInvalid, cfg.AvoidPasses)
	case cfg.Tick < 0 || cfg.FastTick < 0:
		return nil, fmt.Errorf("%w: coordinator config: Tick %v or FastTick %v is negative", heal.ErrInvalid, cfg.Tick, cfg.FastTick)
	}
	if cfg.Policy == (heal.Policy{}) {
		cfg.Policy = heal.DefaultPolicy()
	}
	if cfg.Policy.RefuseAfter == 0 {
		cfg.Policy.RefuseAfter = cfg.RefuseAfter
	}
	if cfg.Policy.AvoidPasses == 0 {
		cfg.Policy.AvoidPasses = cfg.AvoidPasses
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.After == nil {
		cfg.After = after
	}
	cfg.Concurrency = cmpOr(cfg.Concurrency, 8)
	cfg.PerBroker = cmpOr(cfg.PerBroker, 2)
	cfg.ReturnCheck = cmpOr(cfg.ReturnCheck, time.Second)
	cfg.ProbeTimeout = cmpOr(cfg.ProbeTimeout, 2*time.Second)
	cfg.ProbeHedge = cmpOr(cfg.ProbeHedge, cfg.ProbeTimeout/4)
	cfg.Tick = cmpOr(cfg.Tick, 10*time.Second)
	cfg.FastTick = cmpOr(cfg.FastTick, 25*time.Millisecond)
	return &Coordinator{cfg: cfg}, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Run is the pass loop of one leadership term: a pass now, then one per
// Tick, or sooner when the last pass asks for it (NextPass), until ctx is
// done (the caller cancels it when leadership is lost); it returns
// ctx.Err(). The term starts with heal.State.NewTerm: the settle cursor, the
// refusals, the conflicts and the lost segments are forgotten; the
// brokers' last-seen times are kept, so a Coordinator kept across a
// leadership flap gives no broker a fresh grace delay (a new leader makes
// a new Coordinator: its grace delays start at its first pass). A failed
// pass is logged and the next tick tries again.
func (c *Coordinator) Run(ctx context.Context) error {
	c.passMu.Lock()
	c.state = c.state.NewTerm()
	c.pending = nil
	c.passMu.Unlock()
	for {
		rep, err := c.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn().Err(err).Msg("heal pass failed")
		}
		wait := c.cfg.Tick
		if d, ok := NextPass(&rep, c.cfg.FastTick); ok && err == nil {
			wait = min(wait, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.cfg.After(wait):
		}
	}
}

// NextPass says when the pass after r should start, if sooner than the
// tick: at once when r did work (a backfill that failed is none: retried
// at once, a refusal that holds would spin the loop, every pass probing
// every broker); after fast when a broker is inside its
// grace delay, to act right after it ends, or a segment waits. (Deferred
// without backfills means a replica inside its grace delay, not a cap:
// polling it at once would spin.) A broker that answered but could not be
// authenticated stays suspect until an operator fixes its certificates:
// that is no reason to hurry, and every hurried pass probes every broker.
func NextPass(r *heal.Report, fast time.Duration) (time.Duration, bool) {
	failedBackfills := 0
	for _, f := range r.Failed {
		if f.Reason == heal.BackfillFailed {
			failedBackfills++
		}
	}
	if r.Backfills > failedBackfills || len(r.Healed) > 0 || len(r.Stale) > 0 || len(r.Settling) > 0 || len(r.Resumed) > 0 {
		return 0, true
	}
	authFailed := func(b meta.BrokerID) bool {
		return slices.ContainsFunc(r.AuthFailed, func(a heal.AuthFailure) bool { return a.Broker == b })
	}
	waiting := slices.ContainsFunc(r.Suspect, func(b meta.BrokerID) bool { return !authFailed(b) })
	if waiting || r.Deferred > 0 && len(r.AuthFailed) == 0 {
		return fast, true
	}
	return 0, false
}

// Last returns the Report of the last pass (zero before the first).
func (c *Coordinator) Last() heal.Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// State returns a copy of the core's memory after the last pass.
func (c *Coordinator) State() heal.State {
	c.passMu.Lock()
	defer c.passMu.Unlock()
	return c.state
}

// Release lifts a mass-failure hold: placement goes ahead until the hold's
// condition clears on its own, after which a new hold can arise.
func (c *Coordinator) Release() {
	c.mu.Lock()
	c.release = true
	c.mu.Unlock()
	c.cfg.Logger.Info().Msg("heal: mass-failure hold released by operator")
}

// Acknowledge records that an operator acknowledged the loss of segment
// id: later Reports keep listing it in Lost, marked Acknowledged (and
// count it in LostAcknowledged), until the segment is healthy again or
// leaves the metadata; a later loss is then reported unacknowledged. It
// returns an error wrapping heal.ErrInvalid for a bad id, or heal.ErrNotLost when the
// last pass did not report id lost; nothing changes then. Safe at any
// time. The acknowledgement lives in this Coordinator's State: a new
// leader's reports show the segment unacknowledged.
func (c *Coordinator) Acknowledge(id meta.SegmentID) error {
	if err := id.Validate(); err != nil {
		return fmt.Errorf("%w: acknowledge: %w", heal.ErrInvalid, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.IndexFunc(c.last.Lost, func(l heal.LostSegment) bool { return l.Segment == id })
	if i < 0 {
		return fmt.Errorf("%w: acknowledge %s: the last pass (index %d) does not report it lost", heal.ErrNotLost, id, c.last.Index)
	}
	if !slices.Contains(c.acks, id) {
		c.acks = append(c.acks, id)
	}
	if !c.last.Lost[i].Acknowledged {
		// Last's report reflects it at once; copy-on-write, so that
		// reports already handed out do not change.
		c.last.Lost = slices.Clone(c.last.Lost)
		c.last.Lost[i].Acknowledged = true
		c.last.LostAcknowledged++
	}
	c.cfg.Logger.Info().Str("segment", string(id)).Msg("heal: lost segment acknowledged by operator")
	return nil
}

// DryRun observes and steps like a pass and returns the Plan it would
// execute, with its Commands; nothing is executed and the State does not
// change.
func (c *Coordinator) DryRun(ctx context.Context) (heal.Plan, error) {
	c.passMu.Lock()
	defer c.passMu.Unlock()
	view, live, err := c.observe(ctx)
	if err != nil {
		return heal.Plan{}, err
	}
	var p heal.Planner
	plan, _, err := p.Step(c.state, c.observation(view, live, false))
	return plan, err
}

// Pass runs one heal pass: observe (the view and the live brokers),
// HealSealed (step, backfills, settles), then apply what it returned: its
// commands through Config.Metadata, the confirmations of the copies it
// settled, the deletions of the copies its recorded commands dropped. It
// returns the pass's Report (also passed to OnReport and kept for Last).
// When ctx is cancelled mid-pass it stops starting steps, waits for those
// in flight (which the interfaces roll back on cancellation), and returns
// the Report so far with Aborted set and an error wrapping ctx.Err().
func (c *Coordinator) Pass(ctx context.Context) (heal.Report, error) {
	c.passMu.Lock()
	defer c.passMu.Unlock()
	start := c.cfg.Now()
	view, live, err := c.observe(ctx)
	if err != nil {
		return heal.Report{Aborted: ctx.Err() != nil}, err
	}
	h, err := c.healSealed(ctx, view, live, view.ReplicationFactor())
	if err != nil {
		return heal.Report{}, err
	}
	c.apply(ctx, &h)
	rep := h.out.Report()
	rep.Took = c.cfg.Now().Sub(start)
	c.mu.Lock()
	c.last = rep
	c.mu.Unlock()
	if c.cfg.OnReport != nil {
		c.cfg.OnReport(rep)
	}
	if rep.Aborted {
		return rep, fmt.Errorf("heal: pass at index %d aborted: %w", h.Index, ctx.Err())
	}
	return rep, nil
}

// observe reads the metadata view and probes every broker of it at once
// (MaxProbes at most), each within its own ProbeTimeout: the live
// brokers of this tick.
func (c *Coordinator) observe(ctx context.Context) (*meta.View, Live, error) {
	view, err := c.cfg.Metadata.View(ctx)
	if err != nil {
		return nil, Live{}, fmt.Errorf("pass: metadata view: %w", err)
	}
	if view == nil {
		return nil, Live{}, fmt.Errorf("%w: pass: the metadata returned no view", heal.ErrInvalid)
	}
	live := Live{Start: c.cfg.Now()}
	live.Reports, live.AuthFailed, live.Behind = c.probe(ctx, view)
	if err := ctx.Err(); err != nil {
		return nil, Live{}, err
	}
	live.Now = c.cfg.Now()
	return view, live, nil
}

// observation is what Step decides from besides the State: view, live,
// the last execution's outcomes and the operators' requests. With
// consume, the operators' requests are taken (a dry run only reads them).
func (c *Coordinator) observation(view *meta.View, live Live, consume bool) heal.Observation {
	obs := heal.Observation{View: view, Reports: live.Reports, AuthFailed: live.AuthFailed, Behind: live.Behind, Start: live.Start, Now: live.Now,
		Policy: c.cfg.Policy, Executed: c.pending}
	c.mu.Lock()
	obs.Release, obs.Acknowledge = c.release, slices.Clone(c.acks)
	if consume {
		c.release, c.acks = false, nil
	}
	c.mu.Unlock()
	return obs
}

// probe asks every broker of view for its report; it returns the reports,
// the brokers that answered but could not be authenticated, and those that
// answered with metadata behind view (heal.ErrBehind).
func (c *Coordinator) probe(ctx context.Context, view *meta.View) ([]heal.ProbeReport, []heal.AuthFailure, []meta.BrokerID) {
	brokers := view.Brokers()
	reports := make([]heal.ProbeReport, len(brokers))
	ok := make([]bool, len(brokers))
	authFailed := make([]string, len(brokers))
	behind := make([]bool, len(brokers))
	var wg sync.WaitGroup
	fanout := len(brokers)
	if c.cfg.MaxProbes > 0 {
		fanout = min(fanout, c.cfg.MaxProbes)
	}
	sem := make(chan struct{}, max(fanout, 1))
	for i, b := range brokers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := c.probeHedged(ctx, b.ID, view.Index())
			if err == nil {
				r.Broker, r.At = b.ID, c.cfg.Now()
				err = r.Validate()
			}
			if errors.Is(err, heal.ErrUnauthenticated) {
				authFailed[i] = err.Error()
				return
			}
			if errors.Is(err, heal.ErrBehind) {
				behind[i] = true
				c.cfg.Logger.Debug().Uint32("peer", uint32(b.ID)).Err(err).Msg("heal: probe answered behind")
				return
			}
			if err != nil {
				c.cfg.Logger.Debug().Uint32("peer", uint32(b.ID)).Err(err).Msg("heal: probe failed")
				return
			}
			reports[i], ok[i] = r, true
		}()
	}
	wg.Wait()
	var out []heal.ProbeReport
	var auth []heal.AuthFailure
	var late []meta.BrokerID
	for i := range reports {
		if ok[i] {
			out = append(out, reports[i])
		}
		if behind[i] {
			late = append(late, brokers[i].ID)
		}
		if authFailed[i] != "" {
			// It answered: not dead, but not usable either (no report).
			auth = append(auth, heal.AuthFailure{Broker: brokers[i].ID, Reason: authFailed[i]})
		}
	}
	return out, auth, late
}

// ProbeAttempts bounds the attempts of one broker's probe (ProbeHedge).
const ProbeAttempts = 4

// probeHedged is one broker's probe: the first attempt's answer, or that
// of another started every ProbeHedge while none has answered (at most
// ProbeAttempts), all within one ProbeTimeout of ctx. The attempts left
// are cancelled. (One context bounds the probe and cancels what is left
// of it: a context per probe costs four allocations, and a healthy pass
// at 1,000 brokers made 5,000 for a second one.)
func (c *Coordinator) probeHedged(ctx context.Context, b meta.BrokerID, index uint64) (heal.ProbeReport, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ProbeTimeout)
	defer cancel()
	if c.cfg.ProbeHedge < 0 {
		return c.cfg.Prober.Probe(ctx, b, index)
	}
	type answer struct {
		r   heal.ProbeReport
		err error
	}
	answers := make(chan answer, ProbeAttempts) // no attempt blocks once the probe returned
	attempt := func() {
		r, err := c.cfg.Prober.Probe(ctx, b, index)
		answers <- answer{r, err}
	}
	go attempt()
	hedge := time.NewTicker(c.cfg.ProbeHedge)
	defer hedge.Stop()
	for started := 1; ; {
		select {
		case a := <-answers:
			return a.r, a.err
		case <-hedge.C:
			if started < ProbeAttempts {
				started++
				go attempt()
			}
		}
	}
}

// returnSeen records a broker that answered while a plan ran.
func (c *Coordinator) returnSeen(s heal.Seen) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seenBack = append(c.seenBack, s)
}

// takeSeen returns and forgets the brokers recorded by returnSeen.
func (c *Coordinator) takeSeen() []heal.Seen {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seenBack
	c.seenBack = nil
	return s
}
