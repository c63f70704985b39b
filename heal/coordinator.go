package heal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// Config configures a Coordinator. Control and the four broker interfaces
// are required; the rest has defaults (see NewCoordinator).
type Config struct {
	Control    ControlPlane
	Prober     Prober
	Backfiller Backfiller
	Settler    Settler
	Deleter    Deleter
	// Policy bounds each pass (DefaultPolicy when zero).
	Policy Policy
	// Now is the clock; time.Now when nil. The planner never reads it:
	// the Coordinator stamps each pass and each probe answer with it.
	Now func() time.Time
	// Concurrency bounds the backfills, settles and confirmations running
	// at once (default 8); PerBroker bounds those touching one broker, as
	// source or target (default 2).
	Concurrency int
	PerBroker   int
	// ProbeTimeout bounds each broker's probe (default 2s); a broker that
	// does not answer in time is not up this tick.
	ProbeTimeout time.Duration
	// MaxProbes bounds the probes in flight at once (default 0: every
	// broker of the metadata at once). Each probe has its own
	// ProbeTimeout, so a broker slow to answer costs its own deadline and
	// delays no other broker's probe; a pass's probing lasts at most one
	// ProbeTimeout whatever the cluster's size.
	MaxProbes int
	// Logger receives one line per pass and one per failed step; nil
	// discards.
	Logger *slog.Logger
	// AvoidPasses is how many passes a broker whose backfill of a new
	// replica failed is not chosen again for that segment (default 5).
	AvoidPasses int
	// ReturnCheck is how often, while a pass's backfills run, the brokers
	// whose dead replicas they replace are probed again (default 1s;
	// negative disables). When one answers with an intact copy of a
	// segment, that segment's backfills are cancelled and its replica set
	// is left as it was (Report.Returned, BytesSaved): the next pass
	// counts the returning copy again.
	ReturnCheck time.Duration
	// OnReport, when set, is called with every pass's Report (metrics,
	// status). It must not block for long.
	OnReport func(Report)
	// RefuseAfter is how many failed backfills of one segment from one
	// source, in a row and with the segment unchanged, count as that
	// source refusing when the errors do not say so (default 3; negative:
	// only errors wrapping ErrSourceRefused count). An error wrapping
	// ErrSourceRefused counts at once. A refused source is not read for the
	// segment again until the segment changes (see Refusal).
	RefuseAfter int
}

// Coordinator runs heal passes while its caller holds leadership. Run and
// Pass must not be called concurrently with each other; Last, Release and
// Acknowledge are safe at any time.
type Coordinator struct {
	cfg     Config
	planner Planner
	cursor  CopyRef
	seen    map[meta.BrokerID]time.Time
	// authFailed are this pass's brokers whose probe failed on
	// credentials (ErrUnauthenticated); they count as seen.
	authFailed []AuthFailure
	pass       int
	avoid      map[CopyRef]int // until which pass

	refused   []Refusal        // Input.Refused of the next pass
	conflicts []Conflict       // Input.Conflicts of the next pass
	lost      []meta.SegmentID // Input.Lost of the next pass
	fills     map[Refusal]int  // failed backfills per source and segment state, below RefuseAfter

	mu      sync.Mutex
	last    Report
	release bool
	held    string                  // the last pass's HoldReason, to log its start and end
	acked   map[meta.SegmentID]bool // acknowledged lost segments
}

// NewCoordinator checks cfg and returns a Coordinator. The error wraps
// ErrInvalid and names the missing or bad field.
func NewCoordinator(cfg Config) (*Coordinator, error) {
	switch {
	case cfg.Control == nil:
		return nil, fmt.Errorf("%w: coordinator config: Control is nil", ErrInvalid)
	case cfg.Prober == nil:
		return nil, fmt.Errorf("%w: coordinator config: Prober is nil", ErrInvalid)
	case cfg.Backfiller == nil:
		return nil, fmt.Errorf("%w: coordinator config: Backfiller is nil", ErrInvalid)
	case cfg.Settler == nil:
		return nil, fmt.Errorf("%w: coordinator config: Settler is nil", ErrInvalid)
	case cfg.Deleter == nil:
		return nil, fmt.Errorf("%w: coordinator config: Deleter is nil", ErrInvalid)
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("%w: coordinator config: Concurrency %d is negative", ErrInvalid, cfg.Concurrency)
	case cfg.PerBroker < 0:
		return nil, fmt.Errorf("%w: coordinator config: PerBroker %d is negative", ErrInvalid, cfg.PerBroker)
	case cfg.ProbeTimeout < 0:
		return nil, fmt.Errorf("%w: coordinator config: ProbeTimeout %v is negative", ErrInvalid, cfg.ProbeTimeout)
	}
	if cfg.Policy == (Policy{}) {
		cfg.Policy = DefaultPolicy()
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 8
	}
	if cfg.PerBroker == 0 {
		cfg.PerBroker = 2
	}
	if cfg.AvoidPasses < 0 {
		return nil, fmt.Errorf("%w: coordinator config: AvoidPasses %d is negative", ErrInvalid, cfg.AvoidPasses)
	}
	if cfg.AvoidPasses == 0 {
		cfg.AvoidPasses = 5
	}
	if cfg.RefuseAfter == 0 {
		cfg.RefuseAfter = 3
	}
	if cfg.ReturnCheck == 0 {
		cfg.ReturnCheck = time.Second
	}
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Coordinator{cfg: cfg}, nil
}

// Run runs one pass now and one per value received from tick, until ctx is
// done (the caller cancels it when leadership is lost) or tick is closed.
// Each Run is a leadership term: the brokers' last-seen times start at the
// term's first pass, so the grace delay runs from then, and the memory of
// refused sources starts empty (operators' acknowledgements are kept). A failed pass is
// logged and reported and the next tick tries again. Run returns ctx.Err()
// or nil when tick closes.
func (c *Coordinator) Run(ctx context.Context, tick <-chan time.Time) error {
	c.seen = nil
	c.cursor = CopyRef{}
	c.refused, c.fills, c.lost = nil, nil, nil // a new term tries each lost segment once more
	c.conflicts = nil                          // and each conflicting copy: it refuses again, changing nothing
	for {
		if _, err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("heal pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-tick:
			if !ok {
				return nil
			}
		}
	}
}

// Last returns the Report of the last pass (zero before the first).
func (c *Coordinator) Last() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Release lifts a mass-failure hold: placement goes ahead until the hold's
// condition clears on its own, after which a new hold can arise.
func (c *Coordinator) Release() {
	c.mu.Lock()
	c.release = true
	c.mu.Unlock()
	c.cfg.Logger.Info("heal: mass-failure hold released by operator")
}

// Acknowledge records that an operator acknowledged the loss of segment
// id: later Reports keep listing it in Lost, marked Acknowledged (and
// count it in LostAcknowledged), until the segment is healthy again or
// leaves the metadata; a later loss is then reported unacknowledged. It
// returns an error wrapping ErrInvalid for a bad id, or ErrNotLost when the
// last pass did not report id lost; nothing changes then. Safe at any
// time. The acknowledgement lives in this Coordinator: a new leader's
// reports show the segment unacknowledged.
func (c *Coordinator) Acknowledge(id meta.SegmentID) error {
	if err := id.Validate(); err != nil {
		return fmt.Errorf("%w: acknowledge: %w", ErrInvalid, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.IndexFunc(c.last.Lost, func(l LostSegment) bool { return l.Segment == id })
	if i < 0 {
		return fmt.Errorf("%w: acknowledge %s: the last pass (index %d) does not report it lost", ErrNotLost, id, c.last.Index)
	}
	if c.acked == nil {
		c.acked = map[meta.SegmentID]bool{}
	}
	c.acked[id] = true
	if !c.last.Lost[i].Acknowledged {
		// Last's report reflects it at once; copy-on-write, so that
		// reports already handed out do not change.
		c.last.Lost = slices.Clone(c.last.Lost)
		c.last.Lost[i].Acknowledged = true
		c.last.LostAcknowledged++
	}
	c.cfg.Logger.Info("heal: lost segment acknowledged by operator", "segment", id)
	return nil
}

// DryRun reads the metadata view, probes every broker and returns the Plan a pass
// would execute, executing nothing (the settle cursor does not move).
func (c *Coordinator) DryRun(ctx context.Context) (Plan, error) {
	in, err := c.input(ctx)
	if err != nil {
		return Plan{}, err
	}
	var p Planner
	return p.Plan(in)
}

// input builds a pass's Input: metadata view, probes, last-seen times.
func (c *Coordinator) input(ctx context.Context) (Input, error) {
	view, err := c.cfg.Control.View(ctx)
	if err != nil {
		return Input{}, fmt.Errorf("heal: metadata view: %w", err)
	}
	if view == nil {
		return Input{}, fmt.Errorf("%w: heal: the control plane returned no metadata view", ErrInvalid)
	}
	brokers := view.Brokers()
	start := c.cfg.Now()
	if c.seen == nil {
		c.seen = make(map[meta.BrokerID]time.Time, len(brokers))
	}
	for _, b := range brokers {
		if _, ok := c.seen[b.ID]; !ok {
			c.seen[b.ID] = start // first watched now: the grace delay starts
		}
	}
	reports := make([]ProbeReport, len(brokers))
	ok := make([]bool, len(brokers))
	authFailed := make([]string, len(brokers))
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
			pctx, cancel := context.WithTimeout(ctx, c.cfg.ProbeTimeout)
			defer cancel()
			r, err := c.cfg.Prober.Probe(pctx, b.ID, view.Index())
			if err == nil {
				r.Broker = b.ID
				err = r.Validate()
			}
			if errors.Is(err, ErrUnauthenticated) {
				authFailed[i] = err.Error()
				return
			}
			if err != nil {
				c.cfg.Logger.Debug("heal: probe failed", "broker", b.ID, "err", err)
				return
			}
			reports[i], ok[i] = r, true
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Input{}, err
	}
	now := c.cfg.Now()
	in := Input{View: view, Now: now, Policy: c.cfg.Policy, SettleCursor: c.cursor}
	c.authFailed = c.authFailed[:0]
	for i := range reports {
		if ok[i] {
			in.Reports = append(in.Reports, reports[i])
			c.seen[reports[i].Broker] = now
		}
		if authFailed[i] != "" {
			// It answered: not dead, but not usable either (no report).
			c.seen[brokers[i].ID] = now
			c.authFailed = append(c.authFailed, AuthFailure{Broker: brokers[i].ID, Reason: authFailed[i]})
		}
	}
	for _, b := range brokers {
		in.Seen = append(in.Seen, Seen{Broker: b.ID, At: c.seen[b.ID]})
	}
	for ref, until := range c.avoid {
		if until < c.pass {
			delete(c.avoid, ref)
			continue
		}
		in.Avoid = append(in.Avoid, ref)
	}
	sortRefs(in.Avoid)
	in.Refused = slices.Clone(c.refused)
	in.Conflicts = slices.Clone(c.conflicts)
	in.Lost = c.lost
	c.mu.Lock()
	in.Release = c.release
	for id := range c.acked {
		in.Acknowledged = append(in.Acknowledged, id)
	}
	c.mu.Unlock()
	slices.Sort(in.Acknowledged)
	return in, nil
}

// Pass runs one heal pass: snapshot, probe, plan, execute. It returns the
// executed plan's Report (also passed to OnReport and kept for Last). When
// ctx is cancelled mid-pass it stops starting steps, waits for those in
// flight (which the interfaces roll back on cancellation), and returns the
// Report so far with Aborted set and an error wrapping ctx.Err().
func (c *Coordinator) Pass(ctx context.Context) (Report, error) {
	c.pass++
	in, err := c.input(ctx)
	if err != nil {
		return Report{Aborted: ctx.Err() != nil}, err
	}
	plan, err := c.planner.Plan(in)
	if err != nil {
		return Report{}, err
	}
	c.mu.Lock()
	if plan.Report.HoldReason == "" {
		c.release = false // the hold cleared: a new one may arise
	}
	switch held := plan.Report.HoldReason; {
	case held != "" && c.held == "":
		c.cfg.Logger.Warn("heal: mass-failure hold: no backfill starts", "reason", held)
	case held == "" && c.held != "":
		c.cfg.Logger.Info("heal: mass-failure hold lifted", "was", c.held)
	}
	c.held = plan.Report.HoldReason
	for _, id := range in.Acknowledged {
		if _, still := slices.BinarySearch(plan.Acknowledged, id); !still {
			delete(c.acked, id) // healthy again or gone: a new loss is new
		}
	}
	c.mu.Unlock()
	c.cursor = plan.SettleCursor
	c.refused = plan.Refused
	c.conflicts = plan.Conflicts
	c.lost = plan.Lost
	rep := c.execute(ctx, plan)
	rep.AuthFailed = slices.Clone(c.authFailed)
	c.mu.Lock()
	c.last = rep
	c.mu.Unlock()
	if c.cfg.OnReport != nil {
		c.cfg.OnReport(rep)
	}
	c.cfg.Logger.Info("heal pass", "report", rep.String())
	if rep.Aborted {
		return rep, fmt.Errorf("heal: pass at index %d aborted: %w", plan.Index, ctx.Err())
	}
	return rep, nil
}

// limiter bounds concurrent steps overall and per broker. Per-broker slots
// are taken in broker id order, so two steps never wait on each other.
type limiter struct {
	all chan struct{}
	per int
	mu  sync.Mutex
	by  map[meta.BrokerID]chan struct{}
}

func (l *limiter) slot(b meta.BrokerID) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.by[b]
	if !ok {
		ch = make(chan struct{}, l.per)
		l.by[b] = ch
	}
	return ch
}

// acquire takes a global slot and one per broker named (zero ids are
// skipped); it returns a release func, or an error when ctx ends first.
func (l *limiter) acquire(ctx context.Context, bs ...meta.BrokerID) (func(), error) {
	slices.Sort(bs)
	bs = slices.Compact(bs)
	var held []chan struct{}
	release := func() {
		for _, ch := range held {
			<-ch
		}
	}
	chans := []chan struct{}{l.all}
	for _, b := range bs {
		if b != 0 {
			chans = append(chans, l.slot(b))
		}
	}
	for _, ch := range chans {
		select {
		case ch <- struct{}{}:
			held = append(held, ch)
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
	}
	return release, nil
}

// execute runs plan by the contract documented on Plan.
func (c *Coordinator) execute(ctx context.Context, plan Plan) Report {
	rep := plan.Report
	lim := &limiter{all: make(chan struct{}, c.cfg.Concurrency), per: c.cfg.PerBroker, by: map[meta.BrokerID]chan struct{}{}}
	var (
		mu            sync.Mutex
		wg            sync.WaitGroup
		failed        = map[meta.SegmentID]string{}   // a backfill of the segment failed
		conflicts     = map[meta.SegmentID]*Failure{} // a copy answered ErrSealConflict
		settled       = map[CopyRef]bool{}
		resumed       []CopyRef
		returnedBytes int64
	)
	// Backfills of one segment share a context, cancelled when a dead
	// replica they replace comes back (see watchReturns).
	segCtx := map[meta.SegmentID]context.Context{}
	segCancel := map[meta.SegmentID]context.CancelFunc{}
	returned := map[meta.SegmentID]bool{}
	defer func() {
		for _, cancel := range segCancel {
			cancel()
		}
	}()
	stepCtx := func(a Action) context.Context {
		mu.Lock()
		defer mu.Unlock()
		if !a.Op.IsBackfill() {
			return ctx
		}
		sc, ok := segCtx[a.Segment.ID]
		if !ok {
			var cancel context.CancelFunc
			sc, cancel = context.WithCancel(ctx)
			segCtx[a.Segment.ID], segCancel[a.Segment.ID] = sc, cancel
			if returned[a.Segment.ID] {
				cancel()
			}
		}
		return sc
	}
	run := func(a Action, bs []meta.BrokerID, step func(context.Context) error) {
		release, err := lim.acquire(ctx, bs...)
		if err != nil {
			return
		}
		sctx := stepCtx(a)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer release()
			if sctx.Err() != nil {
				return
			}
			err := step(sctx)
			mu.Lock()
			defer mu.Unlock()
			ref := CopyRef{a.Segment.ID, a.Target}
			switch {
			case err != nil && a.Op.IsBackfill() && returned[a.Segment.ID]:
				// Cancelled: a replaced replica came back.
			case err != nil && ctx.Err() == nil && errors.Is(err, ErrSealConflict):
				// The target's own seal disagrees with the metadata; it
				// changed nothing. Remembered: no command, no settle, no
				// deletion for the segment while it lasts.
				c.conflicted(a, err, conflicts)
				if a.Op.IsBackfill() {
					failed[a.Segment.ID] = err.Error()
				}
			case err != nil && a.Op.IsBackfill() && ctx.Err() == nil && c.refusedBy(a, err):
				// The source refused: not read again for this segment
				// until it changes; the target was not at fault.
				if _, ok := failed[a.Segment.ID]; !ok {
					failed[a.Segment.ID] = fmt.Sprintf("%s to %d from %d: source refused: %v", a.Op, a.Target, a.Source, err)
				}
			case err != nil && a.Op.IsBackfill():
				if a.Op != ResumeShortCopy && ctx.Err() == nil {
					if c.avoid == nil {
						c.avoid = map[CopyRef]int{}
					}
					c.avoid[ref] = c.pass + c.cfg.AvoidPasses
				}
				if _, ok := failed[a.Segment.ID]; !ok {
					failed[a.Segment.ID] = fmt.Sprintf("%s to %d from %d: %v", a.Op, a.Target, a.Source, err)
				}
			case err != nil:
				c.cfg.Logger.Warn("heal: settle failed", "copy", ref.String(), "err", err)
			case a.Op.IsBackfill():
				delete(c.fills, refusal(a))
				if a.Op == ResumeShortCopy {
					resumed = append(resumed, ref)
				}
			case a.Op == SettleOverrun:
				settled[ref] = true
			}
		}()
	}

	stopWatch := c.watchReturns(ctx, plan, func(seg meta.SegmentID) {
		mu.Lock()
		defer mu.Unlock()
		returned[seg] = true
		if cancel, ok := segCancel[seg]; ok {
			cancel()
		}
	})

	// Phase 1: backfills and settles, in risk order.
	for _, a := range plan.Actions {
		if ctx.Err() != nil {
			break
		}
		switch a.Op {
		case ReplaceDeadReplica, ReplaceLatchedCopy, ReplaceCorruptCopy, AddMissingReplica, ResumeShortCopy:
			run(a, []meta.BrokerID{a.Target, a.Source}, func(ctx context.Context) error {
				from, err := c.cfg.Backfiller.DurableEnd(ctx, a.Target, a.Segment)
				if err != nil {
					return fmt.Errorf("%w: %w", errDurableEnd, err)
				}
				n, err := c.cfg.Backfiller.Backfill(ctx, a.Target, a.Source, a.Segment, from)
				mu.Lock()
				rep.BytesCopied += n
				if returned[a.Segment.ID] {
					returnedBytes += n
				}
				mu.Unlock()
				return err
			})
		case SettleOverrun:
			run(a, []meta.BrokerID{a.Target}, func(ctx context.Context) error {
				return c.cfg.Settler.Settle(ctx, a.Target, a.Segment)
			})
		case SetReplicas, ConfirmCopy, DeleteDroppedCopy, ReportFailed:
		default:
			panic(fmt.Sprintf("heal: Coordinator: action with unknown op %d", a.Op))
		}
	}
	wg.Wait()
	stopWatch()
	c.pruneFills(plan)
	for _, a := range plan.Actions {
		if a.Op.IsBackfill() && returned[a.Segment.ID] {
			if !slices.Contains(rep.Returned, a.Segment.ID) {
				rep.Returned = append(rep.Returned, a.Segment.ID)
			}
			rep.BytesSaved += a.Segment.ByteSize
		}
	}
	rep.BytesSaved = max(0, rep.BytesSaved-returnedBytes)
	commanded := map[meta.SegmentID]bool{}
	for _, a := range plan.Actions {
		if a.Op == SetReplicas {
			commanded[a.Segment.ID] = true
		}
		if f, ok := conflicts[a.Segment.ID]; ok {
			if f.Reason != ReasonNone {
				rep.Failed = append(rep.Failed, *f)
				f.Reason = ReasonNone // reported once
			}
			continue
		}
		if msg, ok := failed[a.Segment.ID]; ok && a.Op.IsBackfill() && !slices.ContainsFunc(rep.Failed, func(f Failure) bool {
			return f.Segment == a.Segment.ID && f.Reason == BackfillFailed
		}) {
			rep.Failed = append(rep.Failed, Failure{Segment: a.Segment.ID, Reason: BackfillFailed, Err: msg})
		}
	}
	slices.SortFunc(resumed, func(a, b CopyRef) int {
		if a.less(b) {
			return -1
		}
		return 1
	})
	rep.Resumed = resumed

	// Phase 2: commands, only for segments whose backfills all succeeded.
	// They run concurrently, bounded by Concurrency (a consensus engine
	// batches concurrent proposals into one log write), and their outcomes
	// are folded in plan (risk) order.
	recorded := map[meta.SegmentID]bool{}
	type outcome struct {
		a   Action
		err error
		ran bool
	}
	var outs []*outcome
	sem := make(chan struct{}, c.cfg.Concurrency)
	var cwg sync.WaitGroup
	for _, a := range plan.Actions {
		if a.Op != SetReplicas || ctx.Err() != nil {
			continue
		}
		if _, bad := failed[a.Segment.ID]; bad {
			continue // invariant 3: never record a set whose backfill failed
		}
		if returned[a.Segment.ID] {
			continue // a replaced replica came back: no churn
		}
		o := &outcome{a: a}
		outs = append(outs, o)
		sem <- struct{}{}
		cwg.Add(1)
		go func() {
			defer func() { <-sem; cwg.Done() }()
			if ctx.Err() == nil {
				o.ran = true
				o.err = c.cfg.Control.SetReplicas(ctx, o.a.Command)
			}
		}()
	}
	cwg.Wait()
	for _, o := range outs {
		a, err := o.a, o.err
		switch {
		case !o.ran:
		case err == nil:
			recorded[a.Segment.ID] = true
			if plan.Report.FailedReason(a.Segment.ID) == ReasonNone {
				// A set that only moved kept lost replicas behind is
				// recorded but not healed.
				rep.Healed = append(rep.Healed, a.Segment.ID)
			}
		case errors.Is(err, meta.ErrStaleReplicas):
			rep.Stale = append(rep.Stale, a.Segment.ID)
		case ctx.Err() != nil:
		default:
			rep.Failed = append(rep.Failed, Failure{Segment: a.Segment.ID, Reason: CommandFailed, Err: err.Error()})
		}
	}
	if ctx.Err() != nil {
		rep.Aborted = true
		return rep
	}
	// Segments healed by in-place resumes alone.
	for _, r := range resumed {
		if _, bad := failed[r.Segment]; !bad && !commanded[r.Segment] && !slices.Contains(rep.Healed, r.Segment) {
			rep.Healed = append(rep.Healed, r.Segment)
		}
	}

	// Phase 3: confirmations after settles, deletions after commands.
	for _, a := range plan.Actions {
		if ctx.Err() != nil {
			break
		}
		ref := CopyRef{a.Segment.ID, a.Target}
		switch {
		case a.Op == ConfirmCopy && settled[ref]:
			run(a, []meta.BrokerID{a.Target}, func(ctx context.Context) error {
				err := c.cfg.Settler.Confirm(ctx, a.Target, a.Segment)
				if err == nil {
					mu.Lock()
					rep.Confirmed = append(rep.Confirmed, ref)
					mu.Unlock()
				}
				return err
			})
		case a.Op == DeleteDroppedCopy && recorded[a.Segment.ID]:
			run(a, []meta.BrokerID{a.Target}, func(ctx context.Context) error {
				err := c.cfg.Deleter.Delete(ctx, a.Target, a.Segment.ID)
				if err == nil {
					mu.Lock()
					rep.Deleted = append(rep.Deleted, ref)
					mu.Unlock()
				}
				return err
			})
		}
	}
	wg.Wait()
	for ref := range settled {
		rep.Settled = append(rep.Settled, ref)
	}
	sortRefs(rep.Settled)
	sortRefs(rep.Confirmed)
	sortRefs(rep.Deleted)
	if ctx.Err() != nil {
		rep.Aborted = true
	}
	return rep
}

// conflicted records that a's target answered ErrSealConflict (err): a
// Conflict for the next passes (and, for a new replica, the avoid list),
// and the segment's SealConflict failure of this pass in byID. The caller
// holds execute's lock.
func (c *Coordinator) conflicted(a Action, err error, byID map[meta.SegmentID]*Failure) {
	cf := Conflict{Segment: a.Segment.ID, Broker: a.Target, Version: a.Segment.Version, Seal: sealPrint(&a.Segment), State: a.TargetState}
	if !slices.Contains(c.conflicts, cf) {
		c.conflicts = append(c.conflicts, cf)
		c.cfg.Logger.Error("heal: a copy's own seal disagrees with the metadata; the segment is left alone until an operator resolves it",
			"segment", a.Segment.ID, "broker", a.Target, "op", a.Op.String(), "err", err)
	}
	if a.Op.IsBackfill() && a.Op != ResumeShortCopy {
		// A new replica's broker holds a conflicting copy: placement
		// picks another broker for a while (the planner only holds
		// conflicts of replicas).
		if c.avoid == nil {
			c.avoid = map[CopyRef]int{}
		}
		c.avoid[CopyRef{a.Segment.ID, a.Target}] = c.pass + c.cfg.AvoidPasses
	}
	f := byID[a.Segment.ID]
	if f == nil {
		f = &Failure{Segment: a.Segment.ID, Reason: SealConflict, Err: fmt.Sprintf("%s on %d: %v", a.Op, a.Target, err)}
		byID[a.Segment.ID] = f
	}
	if !slices.Contains(f.Copies, a.Target) {
		f.Copies = append(f.Copies, a.Target)
		slices.Sort(f.Copies)
	}
}

// errDurableEnd marks a backfill that failed asking the target for its
// durable end, before the source was read.
var errDurableEnd = errors.New("durable end")

// refusal is the Refusal a failed backfill a would record.
func refusal(a Action) Refusal {
	return Refusal{Segment: a.Segment.ID, Source: a.Source, Version: a.Segment.Version, State: a.State}
}

// refusedBy decides whether the failed backfill a means its source
// refused (err wraps ErrSourceRefused, or RefuseAfter failures in a row
// from it with the segment unchanged) and, if so, records the Refusal for
// the next pass. The caller holds execute's lock.
func (c *Coordinator) refusedBy(a Action, err error) bool {
	rf := refusal(a)
	if !errors.Is(err, ErrSourceRefused) {
		if c.cfg.RefuseAfter < 0 || errors.Is(err, errDurableEnd) {
			// The target could not say where its copy ends: not the
			// source's doing.
			return false
		}
		if c.fills == nil {
			c.fills = map[Refusal]int{}
		}
		c.fills[rf]++
		if c.fills[rf] < c.cfg.RefuseAfter {
			return false
		}
	}
	delete(c.fills, rf)
	if !slices.Contains(c.refused, rf) {
		c.refused = append(c.refused, rf)
		c.cfg.Logger.Warn("heal: backfill source refused; not read again for this segment until it changes",
			"segment", a.Segment.ID, "source", a.Source, "err", err)
	}
	return true
}

// pruneFills forgets the failure counts of segments plan did not backfill
// (healed, lost, or changed).
func (c *Coordinator) pruneFills(plan Plan) {
	for rf := range c.fills {
		if !slices.ContainsFunc(plan.Actions, func(a Action) bool { return a.Op.IsBackfill() && refusal(a) == rf }) {
			delete(c.fills, rf)
		}
	}
}

func sortRefs(rs []CopyRef) {
	slices.SortFunc(rs, func(a, b CopyRef) int {
		if a.less(b) {
			return -1
		}
		if b.less(a) {
			return 1
		}
		return 0
	})
}

// watchReturns probes, every ReturnCheck until the returned stop func is
// called, the dead brokers that plan's ReplaceDeadReplica actions replace.
// For each that answers, back calls returned for every segment it was
// replaced in whose copy it reports intact, and the broker counts as seen.
func (c *Coordinator) watchReturns(ctx context.Context, plan Plan, returned func(meta.SegmentID)) (stop func()) {
	watch := map[meta.BrokerID][]*meta.Segment{}
	var order []meta.BrokerID
	for i := range plan.Actions {
		a := &plan.Actions[i]
		if a.Op == ReplaceDeadReplica && a.Replaces != 0 {
			if _, ok := watch[a.Replaces]; !ok {
				order = append(order, a.Replaces)
			}
			if s := watch[a.Replaces]; len(s) == 0 || s[len(s)-1].ID != a.Segment.ID {
				watch[a.Replaces] = append(s, &a.Segment)
			}
		}
	}
	if len(watch) == 0 || c.cfg.ReturnCheck < 0 {
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(c.cfg.ReturnCheck)
		defer t.Stop()
		for len(order) > 0 {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			rest := order[:0]
			for _, b := range order {
				pctx, pcancel := context.WithTimeout(wctx, c.cfg.ProbeTimeout)
				r, err := c.cfg.Prober.Probe(pctx, b, plan.Index)
				pcancel()
				if err != nil || r.Validate() != nil {
					rest = append(rest, b)
					continue
				}
				c.cfg.Logger.Info("heal: a replaced broker came back; its segments' backfills are cancelled", "broker", b)
				c.seenNow(b)
				for _, seg := range watch[b] {
					if !slices.ContainsFunc(r.Facts, func(f Fact) bool { return f.Segment == seg.ID && !Intact(seg, &f) }) {
						returned(seg.ID)
					}
				}
			}
			order = rest
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// seenNow records that b answered just now.
func (c *Coordinator) seenNow(b meta.BrokerID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen != nil {
		c.seen[b] = c.cfg.Now()
	}
}
