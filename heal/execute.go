package heal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// Result is what executing one action came to. The executor only
// classifies errors; what a failure means for later passes (a refusal,
// an avoided target, a conflict) is decided by Step.
type Result uint8

const (
	// NotRun: not started (gated by the plan's contract, or the pass was
	// cancelled first).
	NotRun Result = iota
	// Succeeded: the step returned nil.
	Succeeded
	// Failed: any error not classified below.
	Failed
	// SourceRefused: a backfill whose error wraps ErrSourceRefused.
	SourceRefused
	// NoDurableEnd: a backfill whose target could not say where its copy
	// ends (the source was not read).
	NoDurableEnd
	// SealConflicted: the target answered ErrSealConflict.
	SealConflicted
	// Cancelled: a backfill cancelled because a dead replica it replaces
	// came back (Outcomes.Returned).
	Cancelled
	// Interrupted: the step failed because the pass was cancelled.
	Interrupted
	// StaleSet: a SetReplicas found another replica set
	// (meta.ErrStaleReplicas).
	StaleSet
)

// Outcome is the result of one action.
type Outcome struct {
	Result Result `json:"result"`
	// Err is the error text of a failed step.
	Err string `json:"err,omitempty"`
	// Bytes is what a backfill transferred.
	Bytes int64 `json:"bytes,omitempty"`
}

// Outcomes is what executing a Plan did: a value the next Step folds into
// the State and Report turns into the pass's Report.
type Outcomes struct {
	Plan Plan `json:"plan"`
	// Of is parallel to Plan.Actions.
	Of []Outcome `json:"of"`
	// Returned are the segments, sorted, whose backfills were cancelled
	// because a dead replica they replace answered with an intact copy.
	Returned []meta.SegmentID `json:"returned,omitempty"`
	// Seen are brokers that answered while the plan ran.
	Seen []Seen `json:"seen,omitempty"`
	// Aborted says the pass was cancelled (leadership lost).
	Aborted bool `json:"aborted,omitempty"`
}

func (o *Outcomes) of(i int) Outcome {
	if i < len(o.Of) {
		return o.Of[i]
	}
	return Outcome{}
}

func (o *Outcomes) returned(seg meta.SegmentID) bool {
	_, ok := slices.BinarySearch(o.Returned, seg)
	return ok
}

// unready returns the segments with a backfill that did not Succeed (one
// not run, cancelled or interrupted is no copy on its target): their
// SetReplicas may not run. One pass over the plan; nil when every
// backfill succeeded.
func (o *Outcomes) unready() map[meta.SegmentID]bool {
	var out map[meta.SegmentID]bool
	for k := range o.Plan.Actions {
		b := &o.Plan.Actions[k]
		if b.Op.IsBackfill() && o.of(k).Result != Succeeded {
			if out == nil {
				out = map[meta.SegmentID]bool{}
			}
			out[b.Segment.ID] = true
		}
	}
	return out
}

// ready reports whether the SetReplicas at i may run: no backfill of its
// segment is in unready (o.unready()), and no replica it replaces came
// back.
func (o *Outcomes) ready(i int, unready map[meta.SegmentID]bool) bool {
	a := &o.Plan.Actions[i]
	return a.Op == SetReplicas && !unready[a.Segment.ID] && !o.returned(a.Segment.ID)
}

// Ready returns the commands whose backfills all Succeeded, in plan
// order: what the seed's heal returns "for the caller to apply through
// the control plane" (Healing.Commands, Report.Ready). On an aborted pass
// it holds only those whose backfills had all succeeded. O(actions).
func (o *Outcomes) Ready() []meta.SetSegmentReplicas {
	var out []meta.SetSegmentReplicas
	unready := o.unready()
	for i := range o.Plan.Actions {
		if o.ready(i, unready) {
			out = append(out, o.Plan.Actions[i].Command)
		}
	}
	return out
}

// executor runs one plan by the contract documented on Plan and records
// each action's Outcome; it decides nothing beyond that contract.
type executor struct {
	c        *Coordinator
	ctx      context.Context
	out      *Outcomes
	lim      *limiter
	mu       sync.Mutex
	wg       sync.WaitGroup
	segCtx   map[meta.SegmentID]context.Context
	cancels  map[meta.SegmentID]context.CancelFunc
	returned map[meta.SegmentID]bool
}

// executor returns an executor of out's plan within ctx.
func (c *Coordinator) executor(ctx context.Context, out *Outcomes) *executor {
	return &executor{c: c, ctx: ctx, out: out,
		lim:    &limiter{all: make(chan struct{}, c.cfg.Concurrency), per: c.cfg.PerBroker, by: map[meta.BrokerID]chan struct{}{}},
		segCtx: map[meta.SegmentID]context.Context{}, cancels: map[meta.SegmentID]context.CancelFunc{}, returned: map[meta.SegmentID]bool{}}
}

// backfillAndSettle runs plan's backfills in risk order and each broker's
// settles in one batch, and returns their outcomes; it applies no command
// and confirms or deletes nothing (apply does, after it).
func (c *Coordinator) backfillAndSettle(ctx context.Context, plan Plan) *Outcomes {
	x := c.executor(ctx, &Outcomes{Plan: plan, Of: make([]Outcome, len(plan.Actions))})
	defer func() {
		for _, cancel := range x.cancels {
			cancel()
		}
	}()
	stop := c.watchReturns(ctx, plan, x.comeBack)
	x.batches(SettleOverrun, func(int) bool { return true }, c.cfg.Settler.Settle)
	for i, a := range plan.Actions {
		if ctx.Err() != nil {
			break
		}
		switch a.Op {
		case ReplaceDeadReplica, ReplaceLatchedCopy, ReplaceCorruptCopy, AddMissingReplica, ResumeShortCopy, MoveReplica, RebalanceReplica:
			x.run(i, []meta.BrokerID{a.Target, a.Source}, x.backfill)
		case SetReplicas, SettleOverrun, ConfirmCopy, DeleteDroppedCopy, ReportFailed, DeleteLeftoverCopy:
		default:
			panic(fmt.Sprintf("heal: Coordinator: action with unknown op %d", a.Op))
		}
	}
	x.wg.Wait()
	stop()
	x.out.Seen = c.takeSeen()
	x.mu.Lock()
	for seg := range x.returned {
		x.out.Returned = append(x.out.Returned, seg)
	}
	x.mu.Unlock()
	slices.Sort(x.out.Returned)
	x.out.Aborted = ctx.Err() != nil
	return x.out
}

// apply is the caller's half of a pass (the seed's HealCoordinator): it
// applies h's commands through the ControlPlane, confirms the copies h
// settled (a batch per broker), then deletes each dropped copy whose
// command was recorded and the leftovers the plan names. It records their
// outcomes in h's Outcomes.
func (c *Coordinator) apply(ctx context.Context, h *Healing) {
	x := c.executor(ctx, h.out)
	plan := &h.out.Plan
	x.commands()
	recorded := x.recorded()
	settled := make(map[CopyRef]bool, len(h.Settled))
	for _, r := range h.Settled {
		settled[r] = true
	}
	x.batches(ConfirmCopy, func(i int) bool {
		a := &plan.Actions[i]
		return settled[CopyRef{a.Segment.ID, a.Target}]
	}, c.cfg.Settler.Confirm)
	for i, a := range plan.Actions {
		if ctx.Err() != nil {
			break
		}
		switch {
		case a.Op == DeleteDroppedCopy && recorded[a.Segment.ID]:
			x.run(i, []meta.BrokerID{a.Target}, func(ctx context.Context, a *Action) (int64, error) {
				return 0, c.cfg.Deleter.Delete(ctx, a.Target, a.Segment.ID)
			})
		case a.Op == DeleteLeftoverCopy:
			x.run(i, []meta.BrokerID{a.Target}, func(ctx context.Context, a *Action) (int64, error) {
				return 0, deleteLeftover(ctx, c.cfg.Deleter, a, plan.Index)
			})
		}
	}
	x.wg.Wait()
	h.out.Aborted = h.out.Aborted || ctx.Err() != nil
}

// recorded returns the segments whose SetReplicas succeeded in this plan
// (one pass over it; the commands have all ended), or nil when the plan
// drops no copy (nothing asks then).
func (x *executor) recorded() map[meta.SegmentID]bool {
	drops := false
	for i := range x.out.Plan.Actions {
		drops = drops || x.out.Plan.Actions[i].Op == DeleteDroppedCopy
	}
	if !drops {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	out := map[meta.SegmentID]bool{}
	for i := range x.out.Plan.Actions {
		if a := &x.out.Plan.Actions[i]; a.Op == SetReplicas && x.out.Of[i].Result == Succeeded {
			out[a.Segment.ID] = true
		}
	}
	return out
}

// batchStep is a Settler method: one request for a broker's copies.
type batchStep func(ctx context.Context, broker meta.BrokerID, segs []meta.Segment, errs []error) error

// batches starts, for each broker, one step over the plan's op actions
// on it that ok admits (in plan order), within the limits, and records
// each action's outcome.
func (x *executor) batches(op Op, ok func(i int) bool, step batchStep) {
	by := map[meta.BrokerID][]int{}
	var order []meta.BrokerID
	for i := range x.out.Plan.Actions {
		a := &x.out.Plan.Actions[i]
		if a.Op != op || !ok(i) {
			continue
		}
		if _, seen := by[a.Target]; !seen {
			order = append(order, a.Target)
		}
		by[a.Target] = append(by[a.Target], i)
	}
	for _, b := range order {
		if x.ctx.Err() != nil {
			return
		}
		release, err := x.lim.acquire(x.ctx, b)
		if err != nil {
			return
		}
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			defer release()
			x.runBatch(b, by[b], step)
		}()
	}
}

// runBatch runs step for broker b's actions idx and records the outcomes.
func (x *executor) runBatch(b meta.BrokerID, idx []int, step batchStep) {
	segs := make([]meta.Segment, len(idx))
	errs := make([]error, len(idx))
	for k, i := range idx {
		segs[k] = x.out.Plan.Actions[i].Segment
	}
	if err := step(x.ctx, b, segs, errs); err != nil {
		for k := range errs {
			errs[k] = err
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for k, i := range idx {
		a := &x.out.Plan.Actions[i]
		x.out.Of[i] = x.classify(a, errs[k])
		if x.out.Of[i].Result == Failed {
			x.c.cfg.Logger.Warn().Str("op", a.Op.String()).Str("copy", CopyRef{a.Segment.ID, a.Target}.String()).Err(errs[k]).Msg("heal: step failed")
		}
	}
}

// backfill asks the target for its durable end and copies the rest.
func (x *executor) backfill(ctx context.Context, a *Action) (int64, error) {
	from, err := x.c.cfg.Backfiller.DurableEnd(ctx, a.Target, a.Segment)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errDurableEnd, err)
	}
	return x.c.cfg.Backfiller.Backfill(ctx, a.Target, a.Source, a.Segment, from)
}

// commands runs the ready SetReplicas concurrently, bounded by
// Concurrency (a consensus engine batches concurrent proposals).
func (x *executor) commands() {
	sem := make(chan struct{}, x.c.cfg.Concurrency)
	var wg sync.WaitGroup
	// The backfills have all ended: only the commands' outcomes change
	// from here, and no command's outcome makes another ready or not.
	x.mu.Lock()
	unready := x.out.unready()
	x.mu.Unlock()
	for i := range x.out.Plan.Actions {
		if x.ctx.Err() != nil {
			break
		}
		if !x.out.ready(i, unready) {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if x.ctx.Err() != nil {
				return
			}
			err := x.c.cfg.Control.SetReplicas(x.ctx, x.out.Plan.Actions[i].Command)
			o := Outcome{Result: Succeeded}
			switch {
			case err == nil:
			case errors.Is(err, meta.ErrStaleReplicas):
				o = Outcome{Result: StaleSet, Err: err.Error()}
			case x.ctx.Err() != nil:
				o = Outcome{Result: Interrupted, Err: err.Error()}
			default:
				o = Outcome{Result: Failed, Err: err.Error()}
			}
			x.mu.Lock()
			x.out.Of[i] = o
			x.mu.Unlock()
		}()
	}
	wg.Wait()
}

// stepCtx is the context of action a: a backfill's is its segment's,
// cancelled when a replica it replaces comes back.
func (x *executor) stepCtx(a *Action) context.Context {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !a.Op.IsBackfill() {
		return x.ctx
	}
	sc, ok := x.segCtx[a.Segment.ID]
	if !ok {
		var cancel context.CancelFunc
		sc, cancel = context.WithCancel(x.ctx)
		x.segCtx[a.Segment.ID], x.cancels[a.Segment.ID] = sc, cancel
		if x.returned[a.Segment.ID] {
			cancel()
		}
	}
	return sc
}

// comeBack records that a dead replica of seg came back.
func (x *executor) comeBack(seg meta.SegmentID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.returned[seg] = true
	if cancel, ok := x.cancels[seg]; ok {
		cancel()
	}
}

// run starts action i's step within the limits and records its outcome.
func (x *executor) run(i int, bs []meta.BrokerID, step func(context.Context, *Action) (int64, error)) {
	a := &x.out.Plan.Actions[i]
	release, err := x.lim.acquire(x.ctx, bs...)
	if err != nil {
		return
	}
	sctx := x.stepCtx(a)
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		defer release()
		if sctx.Err() != nil {
			return
		}
		n, err := step(sctx, a)
		x.mu.Lock()
		defer x.mu.Unlock()
		o := x.classify(a, err)
		o.Bytes = n
		x.out.Of[i] = o
		if o.Result == Failed && !a.Op.IsBackfill() {
			x.c.cfg.Logger.Warn().Str("op", a.Op.String()).Str("copy", CopyRef{a.Segment.ID, a.Target}.String()).Err(err).Msg("heal: step failed")
		}
	}()
}

// classify turns a step's error into a Result. The caller holds x.mu.
func (x *executor) classify(a *Action, err error) Outcome {
	switch {
	case err == nil:
		return Outcome{Result: Succeeded}
	case a.Op.IsBackfill() && x.returned[a.Segment.ID]:
		return Outcome{Result: Cancelled, Err: err.Error()}
	case x.ctx.Err() != nil:
		return Outcome{Result: Interrupted, Err: err.Error()}
	case errors.Is(err, ErrSealConflict):
		return Outcome{Result: SealConflicted, Err: err.Error()}
	case a.Op.IsBackfill() && errors.Is(err, ErrSourceRefused):
		return Outcome{Result: SourceRefused, Err: err.Error()}
	case a.Op.IsBackfill() && errors.Is(err, errDurableEnd):
		return Outcome{Result: NoDurableEnd, Err: err.Error()}
	}
	return Outcome{Result: Failed, Err: err.Error()}
}

// errDurableEnd marks a backfill that failed asking the target for its
// durable end, before the source was read.
var errDurableEnd = errors.New("durable end")

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

// watchReturns probes, every ReturnCheck (on the injected clock) until the
// returned stop func is called, the dead brokers that plan's
// ReplaceDeadReplica actions replace. For each that answers, back is
// called for every segment it was replaced in whose copy it reports
// intact, and the broker is recorded seen in x's outcomes.
func (c *Coordinator) watchReturns(ctx context.Context, plan Plan, back func(meta.SegmentID)) (stop func()) {
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
		for len(order) > 0 {
			select {
			case <-wctx.Done():
				return
			case <-c.cfg.After(c.cfg.ReturnCheck):
			}
			order = c.probeReturns(wctx, plan.Index, order, watch, back)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// probeReturns probes each of order once and returns those still silent.
func (c *Coordinator) probeReturns(ctx context.Context, index uint64, order []meta.BrokerID, watch map[meta.BrokerID][]*meta.Segment, back func(meta.SegmentID)) []meta.BrokerID {
	rest := order[:0]
	for _, b := range order {
		pctx, pcancel := context.WithTimeout(ctx, c.cfg.ProbeTimeout)
		r, err := c.cfg.Prober.Probe(pctx, b, index)
		pcancel()
		if err != nil || r.Validate() != nil {
			rest = append(rest, b)
			continue
		}
		c.cfg.Logger.Info().Uint32("peer", uint32(b)).Msg("heal: a replaced broker came back; its segments' backfills are cancelled")
		c.returnSeen(Seen{Broker: b, At: c.cfg.Now()})
		for _, seg := range watch[b] {
			if !slices.ContainsFunc(r.Facts, func(f Fact) bool { return f.Segment == seg.ID && !Intact(seg, &f) }) {
				back(seg.ID)
			}
		}
	}
	return rest
}

// after is time.After; the Coordinator's default clock.
func after(d time.Duration) <-chan time.Time { return time.After(d) }
