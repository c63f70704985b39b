package pass

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// executor runs one plan by the contract documented on Plan and records
// each action's Outcome; it decides nothing beyond that contract.
type executor struct {
	c        *Coordinator
	ctx      context.Context
	out      *heal.Outcomes
	lim      *limiter
	mu       sync.Mutex
	wg       sync.WaitGroup
	segCtx   map[meta.SegmentID]context.Context
	cancels  map[meta.SegmentID]context.CancelFunc
	returned map[meta.SegmentID]bool
}

// executor returns an executor of out's plan within ctx.
func (c *Coordinator) executor(ctx context.Context, out *heal.Outcomes) *executor {
	return &executor{c: c, ctx: ctx, out: out,
		lim:    &limiter{all: make(chan struct{}, c.cfg.Concurrency), per: c.cfg.PerBroker, by: map[meta.BrokerID]chan struct{}{}},
		segCtx: map[meta.SegmentID]context.Context{}, cancels: map[meta.SegmentID]context.CancelFunc{}, returned: map[meta.SegmentID]bool{}}
}

// backfillAndSettle runs plan's backfills in risk order and each broker's
// settles in one batch, and returns their outcomes; it applies no command
// and confirms or deletes nothing (apply does, after it).
func (c *Coordinator) backfillAndSettle(ctx context.Context, plan heal.Plan) *heal.Outcomes {
	x := c.executor(ctx, &heal.Outcomes{Plan: plan, Of: make([]heal.Outcome, len(plan.Actions))})
	defer func() {
		for _, cancel := range x.cancels {
			cancel()
		}
	}()
	stop := c.watchReturns(ctx, plan, x.comeBack)
	x.batches(heal.SettleOverrun, func(int) bool { return true }, c.cfg.Settler.Settle)
	for i, a := range plan.Actions {
		if ctx.Err() != nil {
			break
		}
		switch a.Op {
		case heal.ReplaceDeadReplica, heal.ReplaceLatchedCopy, heal.ReplaceCorruptCopy, heal.AddMissingReplica, heal.ResumeShortCopy, heal.MoveReplica, heal.RebalanceReplica:
			x.run(i, []meta.BrokerID{a.Target, a.Source}, x.backfill)
		case heal.SetReplicas, heal.SettleOverrun, heal.ConfirmCopy, heal.DeleteDroppedCopy, heal.ReportFailed, heal.DeleteLeftoverCopy:
		default:
			panic(fmt.Sprintf("pass: Coordinator: action with unknown op %d", a.Op))
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
// applies what HealSealed returned and nothing else: h's Commands through
// the Metadata, the confirmations of h's Settled copies (a batch per
// broker), then the deletions of h's Dropped copies whose command was
// recorded and of h's Leftovers. It records their outcomes in h's
// Outcomes, at the actions they came from.
func (c *Coordinator) apply(ctx context.Context, h *Healing) {
	x := c.executor(ctx, h.out)
	plan := &h.out.Plan
	recorded := x.commands(h)
	settled := make(map[heal.CopyRef]bool, len(h.Settled))
	for _, r := range h.Settled {
		settled[r] = true
	}
	x.batches(heal.ConfirmCopy, func(i int) bool {
		a := &plan.Actions[i]
		return settled[heal.CopyRef{Segment: a.Segment.ID, Broker: a.Target}]
	}, c.cfg.Settler.Confirm)
	for k, ref := range h.Dropped {
		if ctx.Err() != nil {
			break
		}
		if recorded[ref.Segment] {
			x.run(h.droppedAt[k], []meta.BrokerID{ref.Broker}, func(ctx context.Context, a *heal.Action) (int64, error) {
				return 0, c.cfg.Deleter.Delete(ctx, a.Target, a.Segment.ID)
			})
		}
	}
	for k, ref := range h.Leftovers {
		if ctx.Err() != nil {
			break
		}
		x.run(h.leftoverAt[k], []meta.BrokerID{ref.Broker}, func(ctx context.Context, a *heal.Action) (int64, error) {
			return 0, deleteLeftover(ctx, c.cfg.Deleter, a, plan.Index)
		})
	}
	x.wg.Wait()
	h.out.Aborted = h.out.Aborted || ctx.Err() != nil
}

// batchStep is a Settler method: one request for a broker's copies.
type batchStep func(ctx context.Context, broker meta.BrokerID, segs []meta.Segment, errs []error) error

// batches starts, for each broker, one step over the plan's op actions
// on it that ok admits (in plan order), within the limits, and records
// each action's outcome.
func (x *executor) batches(op heal.Op, ok func(i int) bool, step batchStep) {
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
		if x.out.Of[i].Result == heal.Failed {
			x.c.cfg.Logger.Warn().Str("op", a.Op.String()).Str("copy", heal.CopyRef{Segment: a.Segment.ID, Broker: a.Target}.String()).Err(errs[k]).Msg("heal: step failed")
		}
	}
}

// backfill asks the target to copy what its copy lacks from the source:
// one request, the target resuming at its own durable end.
func (x *executor) backfill(ctx context.Context, a *heal.Action) (int64, error) {
	return x.c.cfg.Backfiller.Backfill(ctx, a.Target, a.Source, a.Segment)
}

// commands applies h's Commands concurrently, bounded by Concurrency (a
// consensus engine batches concurrent proposals), records each one's
// outcome at its SetReplicas action, and returns the segments whose
// command was recorded, or nil when h drops no copy (nothing asks then:
// the pass that finds a broker dead would build a set of 20,000 for
// nothing).
func (x *executor) commands(h *Healing) map[meta.SegmentID]bool {
	sem := make(chan struct{}, x.c.cfg.Concurrency)
	var wg sync.WaitGroup
	for k, cmd := range h.Commands {
		if x.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if x.ctx.Err() != nil {
				return
			}
			err := x.c.cfg.Metadata.SetReplicas(x.ctx, cmd)
			o := heal.Outcome{Result: heal.Succeeded}
			switch {
			case err == nil:
			case errors.Is(err, meta.ErrStaleReplicas):
				o = heal.Outcome{Result: heal.StaleSet, Err: err.Error()}
			case x.ctx.Err() != nil:
				o = heal.Outcome{Result: heal.Interrupted, Err: err.Error()}
			default:
				o = heal.Outcome{Result: heal.Failed, Err: err.Error()}
			}
			x.mu.Lock()
			x.out.Of[h.commandAt[k]] = o
			x.mu.Unlock()
		}()
	}
	wg.Wait()
	if len(h.Dropped) == 0 {
		return nil
	}
	recorded := map[meta.SegmentID]bool{}
	for k, cmd := range h.Commands {
		if x.out.Of[h.commandAt[k]].Result == heal.Succeeded {
			recorded[cmd.ID] = true
		}
	}
	return recorded
}

// stepCtx is the context of action a: a backfill's is its segment's,
// cancelled when a replica it replaces comes back.
func (x *executor) stepCtx(a *heal.Action) context.Context {
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
func (x *executor) run(i int, bs []meta.BrokerID, step func(context.Context, *heal.Action) (int64, error)) {
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
		if o.Result == heal.Failed && !a.Op.IsBackfill() {
			x.c.cfg.Logger.Warn().Str("op", a.Op.String()).Str("copy", heal.CopyRef{Segment: a.Segment.ID, Broker: a.Target}.String()).Err(err).Msg("heal: step failed")
		}
	}()
}

// classify turns a step's error into a Result. The caller holds x.mu.
func (x *executor) classify(a *heal.Action, err error) heal.Outcome {
	switch {
	case err == nil:
		return heal.Outcome{Result: heal.Succeeded}
	case a.Op.IsBackfill() && x.returned[a.Segment.ID]:
		return heal.Outcome{Result: heal.Cancelled, Err: err.Error()}
	case x.ctx.Err() != nil:
		return heal.Outcome{Result: heal.Interrupted, Err: err.Error()}
	case errors.Is(err, heal.ErrSealConflict):
		return heal.Outcome{Result: heal.SealConflicted, Err: err.Error()}
	case a.Op.IsBackfill() && errors.Is(err, heal.ErrSourceRefused):
		return heal.Outcome{Result: heal.SourceRefused, Err: err.Error()}
	case a.Op.IsBackfill() && errors.Is(err, heal.ErrNoDurableEnd):
		return heal.Outcome{Result: heal.NoDurableEnd, Err: err.Error()}
	}
	return heal.Outcome{Result: heal.Failed, Err: err.Error()}
}

// deleteLeftover runs a DeleteLeftoverCopy through d, which must also be
// a LeftoverDeleter.
func deleteLeftover(ctx context.Context, d Deleter, a *heal.Action, index uint64) error {
	ld, ok := d.(LeftoverDeleter)
	if !ok {
		return fmt.Errorf("%w: delete leftover %s on %d: the Deleter (%T) cannot delete leftovers", heal.ErrInvalid, a.Segment.ID, a.Target, d)
	}
	return ld.DeleteLeftover(ctx, a.Target, a.Segment.ID, index)
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

// watchReturns probes, every ReturnCheck (on the injected clock) until the
// returned stop func is called, the dead brokers that plan's
// ReplaceDeadReplica actions replace. For each that answers, back is
// called for every segment it was replaced in whose copy it reports
// intact, and the broker is recorded seen in x's outcomes.
func (c *Coordinator) watchReturns(ctx context.Context, plan heal.Plan, back func(meta.SegmentID)) (stop func()) {
	watch := map[meta.BrokerID][]*meta.Segment{}
	var order []meta.BrokerID
	for i := range plan.Actions {
		a := &plan.Actions[i]
		if a.Op == heal.ReplaceDeadReplica && a.Replaces != 0 {
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
		c.returnSeen(heal.Seen{Broker: b, At: c.cfg.Now()})
		for _, seg := range watch[b] {
			if !slices.ContainsFunc(r.Facts, func(f heal.Fact) bool { return f.Segment == seg.ID && !heal.Intact(seg, &f) }) {
				back(seg.ID)
			}
		}
	}
	return rest
}

// after is time.After; the Coordinator's default clock.
func after(d time.Duration) <-chan time.Time { return time.After(d) }
