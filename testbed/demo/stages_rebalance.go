package demo

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
)

// The rebalance stage. The harness cannot add a broker
// to a running cluster, so an empty one is made with the operator's
// lifecycle: a follower is decommissioned until no replica set names it
// (its copies moved and deleted), then the decommission is cancelled. It
// is then an active broker holding nothing, as a new one would be, and
// the rebalancer fills it until every broker's replicas, by count and by
// bytes, are within 10% of the mean.

// RebalanceFigures are the rebalance stage's figures.
type RebalanceFigures struct {
	// Broker is the broker emptied and refilled.
	Broker meta.BrokerID `json:"broker"`
	// Before and After are the spreads over the running brokers when the
	// emptied broker came back, and once balanced.
	Before LoadSpread `json:"before"`
	After  LoadSpread `json:"after"`
	// Moves counts the replicas added to a set (each a move) seen while
	// balancing; Received those the emptied broker got.
	Moves    int `json:"moves"`
	Received int `json:"received"`
	// DrainSeconds is the decommission's time to drained;
	// SecondsToBalance from the cancel to every broker within 10%.
	DrainSeconds     float64 `json:"drain_seconds"`
	SecondsToBalance float64 `json:"seconds_to_balance"`
}

// LoadSpread is the min, mean and max of the replicas and replica bytes
// of sealed segments per running broker.
type LoadSpread struct {
	CountMin  int     `json:"count_min"`
	CountMean float64 `json:"count_mean"`
	CountMax  int     `json:"count_max"`
	BytesMin  int64   `json:"bytes_min"`
	BytesMean float64 `json:"bytes_mean"`
	BytesMax  int64   `json:"bytes_max"`
	// Within says every broker is within max(10% of the mean, one
	// replica; one mean replica's bytes) of the mean, by both.
	Within bool `json:"within"`
}

func (s LoadSpread) String() string {
	return fmt.Sprintf("replicas %d/%.1f/%d, bytes %d/%.0f/%d (min/mean/max)", s.CountMin, s.CountMean, s.CountMax, s.BytesMin, s.BytesMean, s.BytesMax)
}

// spread computes the load spread of the brokers in bs over snap.
func spread(snap *meta.Snapshot, bs []*harness.Broker) LoadSpread {
	cnt, byt := map[meta.BrokerID]int{}, map[meta.BrokerID]int64{}
	for _, b := range bs {
		cnt[b.ID], byt[b.ID] = 0, 0
	}
	var tc, tb float64
	for _, s := range snap.Segments {
		if !s.Sealed {
			continue
		}
		for _, r := range s.Replicas {
			if _, ok := cnt[r]; ok {
				cnt[r]++
				byt[r] += s.ByteSize
				tc++
				tb += float64(s.ByteSize)
			}
		}
	}
	out := LoadSpread{CountMin: math.MaxInt, BytesMin: math.MaxInt64}
	if len(cnt) == 0 || tc == 0 {
		return LoadSpread{}
	}
	k := float64(len(cnt))
	out.CountMean, out.BytesMean = tc/k, tb/k
	bc, bb := max(0.1*out.CountMean, 1), max(0.1*out.BytesMean, tb/tc)
	out.Within = true
	for id, c := range cnt {
		out.CountMin, out.CountMax = min(out.CountMin, c), max(out.CountMax, c)
		out.BytesMin, out.BytesMax = min(out.BytesMin, byt[id]), max(out.BytesMax, byt[id])
		out.Within = out.Within && math.Abs(float64(c)-out.CountMean) <= bc && math.Abs(float64(byt[id])-out.BytesMean) <= bb
	}
	return out
}

// stageRebalance empties a follower through decommission-then-cancel and
// measures the rebalancer filling it.
func (d *demo) stageRebalance(ctx context.Context) (FaultReport, error) {
	fr := FaultReport{Stage: "rebalance"}
	if err := d.reviveAll(ctx); err != nil {
		return fr, fatal(ctx, err, d)
	}
	off, err := d.setHealKey(ctx, "rebalance = false", "rebalance = true")
	if err != nil {
		fr.Error = err.Error()
		return fr, fatal(ctx, err, d)
	}
	defer func() {
		if err := off(); err != nil && fr.Error == "" {
			fr.Error = "turning the rebalancer off again: " + err.Error()
		}
	}()
	cl := d.leaderClient(ctx)
	leader, _ := d.c.Leader(ctx, false)
	var b *harness.Broker
	for _, x := range d.c.Running() {
		if x.ID != leader {
			b = x
		}
	}
	if b == nil {
		fr.notInjected("no running follower to empty")
		return fr, nil
	}
	fr.Broker = b.ID
	fr.What = fmt.Sprintf("empty broker %d, refill", b.ID)
	fig := &RebalanceFigures{Broker: b.ID}
	d.logf("stage rebalance: decommission broker %d until drained, cancel it, and wait for the rebalancer to fill it", b.ID)
	start := time.Now()
	if _, err := cl.Decommission(ctx, b.ID); err != nil {
		fr.Error = err.Error()
		return fr, fatal(ctx, err, d)
	}
	fr.Injected = true
	snap, err := d.waitSnap(ctx, func(s *meta.Snapshot) bool { return heldBy(s, b.ID) == 0 })
	if err != nil {
		fr.Error = "decommission: " + err.Error()
		_, _ = cl.CancelDecommission(ctx, b.ID)
		return fr, fatal(ctx, err, d)
	}
	fig.DrainSeconds = time.Since(start).Seconds()
	if _, err := d.leaderClient(ctx).CancelDecommission(ctx, b.ID); err != nil {
		fr.Error = err.Error()
		return fr, fatal(ctx, err, d)
	}
	cancelled := time.Now()
	err = d.waitBalanced(ctx, &fr, fig, snap, cancelled)
	fr.Rebalance = fig
	return fr, err
}

// waitBalanced waits, from the cancel of the decommission of fig.Broker
// at cancelled (snap the metadata then), until every running broker is
// within 10% of the mean and the cluster healthy, and fills in fig and
// fr's verdict.
func (d *demo) waitBalanced(ctx context.Context, fr *FaultReport, fig *RebalanceFigures, snap *meta.Snapshot, cancelled time.Time) error {
	run := d.c.Running()
	fig.Before = spread(snap, run)
	prev := snap
	final, err := d.waitSnap(ctx, func(s *meta.Snapshot) bool {
		fig.Moves += addedReplicas(prev, s)
		prev = s
		return spread(s, run).Within && d.lastBalanced(ctx)
	})
	if err != nil {
		fr.Error = "rebalance: " + err.Error()
		fr.Note = fmt.Sprintf("broker %d holds %d replicas; %s", fig.Broker, heldBy(prev, fig.Broker), spread(prev, run))
		return nil // not healed: the demo stops after it
	}
	fig.SecondsToBalance = time.Since(cancelled).Seconds()
	fig.After = spread(final, run)
	fig.Received = heldBy(final, fig.Broker)
	fr.Detected = true
	tmp := FaultReport{Stage: "rebalance-check"}
	if err := d.waitHealed(ctx, &tmp, "balanced", cancelled, nil, d.o.StageTimeout); err != nil {
		fr.Error = err.Error()
		return fatal(ctx, err, d)
	}
	fr.Healed = tmp.Healed
	secs := fig.SecondsToBalance
	fr.SecondsToHeal = &secs
	fr.Note = fmt.Sprintf("drained in %.1fs; %d moves (%d onto broker %d) balanced in %.1fs; before %s; after %s",
		fig.DrainSeconds, fig.Moves, fig.Received, fig.Broker, secs, fig.Before, fig.After)
	d.logf("stage rebalance: %s", fr.Note)
	return nil
}

// heldBy counts the segments whose replica set in snap names id.
func heldBy(snap *meta.Snapshot, id meta.BrokerID) int {
	n := 0
	for _, s := range snap.Segments {
		if s.HasReplica(id) {
			n++
		}
	}
	return n
}

// addedReplicas counts the replicas in next's sets that prev's did not
// name.
func addedReplicas(prev, next *meta.Snapshot) int {
	n := 0
	for _, s := range next.Segments {
		p, ok := prev.Segment(s.ID)
		if !ok {
			continue
		}
		for _, r := range s.Replicas {
			if !p.HasReplica(r) {
				n++
			}
		}
	}
	return n
}

// lastBalanced reports whether the leader's last heal pass found the
// brokers balanced (or reported no rebalance: it is off).
func (d *demo) lastBalanced(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := d.leaderClient(ctx).Status(pctx)
	if err != nil {
		return false
	}
	st, ok := admin.DecodeStatus(raw)
	return ok && st.LastPass != nil && (st.LastPass.Rebalance == nil || st.LastPass.Rebalance.Balanced)
}

// waitSnap polls the leader's metadata until cond holds, within the stage
// timeout.
func (d *demo) waitSnap(ctx context.Context, cond func(*meta.Snapshot) bool) (*meta.Snapshot, error) {
	deadline := time.Now().Add(d.o.StageTimeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		snap, err := d.leaderClient(ctx).Metadata(pctx)
		cancel()
		if err == nil && cond(&snap) {
			return &snap, nil
		}
		if e := d.c.UnexpectedExit(); e != nil {
			return nil, e
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not within %v (last error: %v)", d.o.StageTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// setHealKey replaces from by to in every broker's [heal] settings and
// restarts the running brokers one at a time with it; the func it returns
// puts from back the same way. The demo runs with the rebalancer off and
// turns it on for the rebalance stage only.
func (d *demo) setHealKey(ctx context.Context, from, to string) (func() error, error) {
	swap := func(a, b string) error {
		old := d.c.Config().HealExtra
		if !strings.Contains(old, a) {
			return fmt.Errorf("the brokers' [heal] settings carry no %q", a)
		}
		d.logf("  %s: restarting the brokers one at a time", b)
		return d.restartWith(ctx, strings.Replace(old, a, b, 1), nil)
	}
	if err := swap(from, to); err != nil {
		return func() error { return nil }, err
	}
	return func() error { return swap(to, from) }, nil
}
