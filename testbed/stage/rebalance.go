package stage

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
)

// The rebalance stage empties a follower (decommission, then cancel) and
// waits for the rebalancer to bring every broker within 10% of the mean.

// stageRebalance empties a follower through decommission-then-cancel and
// measures the rebalancer filling it.
func (e *Env) stageRebalance(ctx context.Context, fr *Report) error {
	off, err := e.setHealKey(ctx, "rebalance = false", "rebalance = true")
	if err != nil {
		return e.fail(ctx, fr, err)
	}
	defer func() {
		if err := off(); err != nil && fr.Error == "" {
			fr.Error = "turning the rebalancer off again: " + err.Error()
		}
	}()
	cl := e.C.LeaderClient(ctx)
	leader, _ := e.C.AgreedLeader(ctx, false)
	// The drain must reach zero replicas: a broker holding a partition's
	// active segment would keep it until the partition rolls. The restart
	// just done took partitions over and rolled them onto new sets, so
	// the last view is stale: read the metadata as it is now.
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	now, err := cl.Metadata(mctx)
	cancel()
	if err != nil {
		return e.fail(ctx, fr, fmt.Errorf("reading the metadata after the restart: %w", err))
	}
	var b *harness.Broker
	for _, x := range e.C.Running() {
		if x.ID != leader && !unsealedOn(&now, x.ID) {
			b = x
		}
	}
	if b == nil {
		fr.notInjected("no running follower to empty that holds no unsealed segment (a decommission never moves one)")
		return nil
	}
	fr.Broker = b.ID
	fr.What = fmt.Sprintf("empty broker %d, refill", b.ID)
	fig := &Figures{Broker: b.ID}
	e.logf("stage rebalance: decommission broker %d until drained, cancel it, and wait for the rebalancer to fill it", b.ID)
	start := time.Now()
	if err := e.decommission(ctx, fr, b, false); err != nil {
		return e.fail(ctx, fr, err)
	}
	fr.Injected = true
	snap, err := e.C.WaitMetadata(ctx, e.StageTimeout, func(s *meta.Snapshot) bool { return harness.HeldBy(s, b.ID) == 0 })
	if err != nil {
		fr.Error = "decommission: " + err.Error() + e.stillHeld(ctx, b.ID)
		_, _ = cl.CancelDecommission(ctx, b.ID)
		return fatal(ctx, err, e)
	}
	fig.SecondsToDrain = Seconds(time.Since(start))
	if err := e.decommission(ctx, fr, b, true); err != nil {
		return e.fail(ctx, fr, err)
	}
	cancelled := time.Now()
	err = e.waitBalanced(ctx, fr, fig, snap, cancelled)
	fr.Figures = fig
	return err
}

// waitBalanced waits until every broker is within 10% of the mean and
// the cluster healthy, and fills in fig and fr.
func (e *Env) waitBalanced(ctx context.Context, fr *Report, fig *Figures, snap *meta.Snapshot, cancelled time.Time) error {
	run := e.C.Running()
	before := harness.Spread(snap, run)
	fig.Before = &before
	prev := snap
	final, err := e.C.WaitMetadata(ctx, e.StageTimeout, func(s *meta.Snapshot) bool {
		fig.Moves += harness.AddedReplicas(prev, s)
		prev = s
		return harness.Spread(s, run).Within && e.lastBalanced(ctx)
	})
	if err != nil {
		fr.Error = "rebalance: " + err.Error()
		addNote(fr, "broker %d holds %d replicas; %s", fig.Broker, harness.HeldBy(prev, fig.Broker), harness.Spread(prev, run))
		return nil // not healed: the run stops after it
	}
	balanced := Seconds(time.Since(cancelled))
	after := harness.Spread(final, run)
	fig.After = &after
	fig.Received = harness.HeldBy(final, fig.Broker)
	fr.Detected = true
	if _, err := e.settle(ctx, "balanced", cancelled); err != nil {
		return e.fail(ctx, fr, err)
	}
	fr.Healed = true
	fr.SecondsToHeal = balanced
	addNote(fr, "drained in %.1fs; %d moves (%d onto broker %d) balanced in %.1fs; before %s; after %s",
		*fig.SecondsToDrain, fig.Moves, fig.Received, fig.Broker, *balanced, before, after)
	e.logf("stage rebalance: %s", fr.Note)
	return nil
}

// lastBalanced reports whether the leader's last heal pass found the
// brokers balanced (or reported no rebalance: it is off).
func (e *Env) lastBalanced(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := e.C.LeaderClient(ctx).Status(pctx)
	if err != nil {
		return false
	}
	st, ok := admin.DecodeStatus(raw)
	return ok && st.LastPass != nil && (st.LastPass.Rebalance == nil || st.LastPass.Rebalance.Balanced)
}

// setHealKey restarts the brokers with from replaced by to in [heal];
// the func returned puts it back.
func (e *Env) setHealKey(ctx context.Context, from, to string) (func() error, error) {
	if err := e.restartWith(ctx, from, to, to, nil); err != nil {
		return func() error { return nil }, err
	}
	return func() error { return e.restartWith(ctx, to, from, from, nil) }, nil
}

// restartWith restarts the brokers one at a time with from replaced by to
// in their [heal] settings (what says the change in words), calling down
// on each while it is down (nil: nothing).
func (e *Env) restartWith(ctx context.Context, from, to, what string, down func(*harness.Broker) error) error {
	old := e.C.Config().HealExtra
	if !strings.Contains(old, from) {
		return fmt.Errorf("the brokers' [heal] settings carry no %q", from)
	}
	e.logf("  %s: restarting the brokers one at a time", what)
	return e.C.RollingRestart(ctx, strings.Replace(old, from, to, 1), e.StageTimeout, down)
}

// stillHeld names the segments broker id still holds, sealed or active,
// for an error that says why its drain did not end ("" when none, or the
// metadata cannot be read).
func (e *Env) stillHeld(ctx context.Context, id meta.BrokerID) string {
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	snap, err := e.C.LeaderClient(ctx).Metadata(mctx)
	if err != nil {
		return ""
	}
	var held []string
	for _, s := range snap.Segments {
		if s.HasReplica(id) {
			state := "sealed"
			if !s.Sealed {
				state = "active"
			}
			held = append(held, fmt.Sprintf("%s (%s)", s.ID, state))
		}
	}
	if len(held) == 0 {
		return ""
	}
	return fmt.Sprintf("; broker %d still holds %s", id, strings.Join(held, ", "))
}
