package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/kafkaload"
)

// The nemesis's observers: the writer (one segment per WriteEvery through
// the leader's POST /v1/load, every acknowledgement recorded), the watcher
// (every broker's pass history and the metadata's replica sets, every
// watchEvery) and the quiescent check.

const (
	// WriteEvery is the writer's period: a runner sizes a copies disk
	// by it.
	WriteEvery = 300 * time.Millisecond
	watchEvery = 100 * time.Millisecond
)

// leader is the leader as the running brokers no fault holds see it
// (harness.Cluster.Leader), nil when none names one.
func (n *runner) leader(ctx context.Context) *harness.Broker {
	n.mu.Lock()
	skip := slices.Collect(maps.Keys(n.active))
	n.mu.Unlock()
	return n.c.Leader(ctx, skip...)
}

// write loads one segment every WriteEvery until ctx ends.
func (n *runner) write(ctx context.Context) {
	recs, rsize := n.o.Records, n.o.RecordSize
	t := time.NewTicker(WriteEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.mu.Lock()
		serial := n.writeSerial
		n.writeSerial++
		n.rep.SegmentsWritten++
		inQuorumLoss := n.quorumLoss
		n.writing = serial
		close(n.writeBegun)
		n.writeBegun = make(chan struct{})
		n.mu.Unlock()
		var err error
		if lb := n.leader(ctx); lb == nil {
			err = fmt.Errorf("no leader")
		} else {
			lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_, err = lb.Client.Load(lctx, admin.LoadRequest{Segments: 1, RecordsPerSegment: recs, RecordSize: rsize, Prefix: "nem", First: serial, Concurrency: 1})
			cancel()
		}
		n.mu.Lock()
		n.writing = -1
		if err == nil {
			n.obs.Acked = append(n.obs.Acked, meta.SegmentID(fmt.Sprintf("nem-%05d", serial)))
			n.rep.SegmentsAcknowledged++
		} else if ctx.Err() == nil {
			n.rep.WriteFailures++
			if inQuorumLoss || n.quorumLoss { // began or ended in the window
				n.rep.WriteFailuresQuorumLoss++
			}
		} else {
			n.rep.SegmentsWritten-- // cut short by the end of the epoch: not an attempt
		}
		n.mu.Unlock()
	}
}

// watch records every heal pass the brokers' pass histories hold and
// every change of a segment's replica set, until ctx ends.
func (n *runner) watch(ctx context.Context) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.readAllPasses(ctx, 500*time.Millisecond)
		lb := n.leader(ctx)
		if lb == nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		snap, merr := lb.Client.Metadata(pctx)
		cancel()
		if merr == nil {
			n.mu.Lock()
			n.noteSets(snap, time.Now())
			n.mu.Unlock()
		}
	}
}

// passCursor is how far the nemesis read one broker's pass history.
type passCursor struct {
	began time.Time
	last  uint64
}

// readAllPasses reads every running, unpaused broker's pass history past
// what was read; a broker that does not answer within timeout is read on
// a later call (its history keeps the passes). It returns the errors.
func (n *runner) readAllPasses(ctx context.Context, timeout time.Duration) error {
	n.mu.Lock()
	paused := map[meta.BrokerID]bool{}
	for b, k := range n.active {
		paused[b] = k == harness.KindPause
	}
	n.mu.Unlock()
	var errs []error
	for _, b := range n.c.Running() {
		if paused[b.ID] {
			continue
		}
		if err := n.readPasses(ctx, b, timeout); err != nil {
			errs = append(errs, fmt.Errorf("broker %d's pass history: %w", b.ID, err))
		}
	}
	return errors.Join(errs...)
}

// readPasses reads broker b's pass history past what was read, page by
// page.
func (n *runner) readPasses(ctx context.Context, b *harness.Broker, timeout time.Duration) error {
	for {
		n.mu.Lock()
		since := n.cursors[b.ID].last
		n.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, timeout)
		h, err := b.Client.Passes(pctx, since, 0)
		cancel()
		if err != nil {
			return err
		}
		n.mu.Lock()
		more := n.notePasses(b.ID, h)
		n.mu.Unlock()
		if !more {
			return nil
		}
	}
}

// notePasses records the passes of h not recorded yet and says whether
// the history holds more. A history that began anew (the broker's data
// directory was replaced) is read from its start; passes its bound
// dropped before they were read are counted unseen. Callers hold mu.
func (n *runner) notePasses(id meta.BrokerID, h plugin.PassHistory) bool {
	cur := n.cursors[id]
	if !cur.began.IsZero() && !h.Began.Equal(cur.began) {
		cur = passCursor{}
	}
	cur.began = h.Began
	unseen := h.Dropped
	for _, p := range h.Passes {
		if p.Seq <= cur.last {
			continue
		}
		n.obs.Passes = append(n.obs.Passes, PassObs{Leader: id, Number: p.Seq, Started: p.Started, Ended: p.Ended, Report: p.Report, Unseen: unseen})
		unseen = 0
		cur.last = p.Seq
	}
	n.cursors[id] = cur
	return h.More && len(h.Passes) > 0
}

// notePassHistory records what a stopped broker's history in dataDir
// holds (read before its directory is replaced).
func (n *runner) notePassHistory(id meta.BrokerID, dataDir string) error {
	h, err := plugin.ReadPassHistory(dataDir, id)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.notePasses(id, h)
	return nil
}

// noteSets appends each sealed segment's replica set when it changed.
// Callers hold mu.
func (n *runner) noteSets(snap meta.Snapshot, now time.Time) {
	for _, s := range snap.Segments {
		if !s.Sealed {
			continue
		}
		hist := n.obs.Sets[s.ID]
		if len(hist) > 0 && slices.Equal(hist[len(hist)-1].Replicas, s.Replicas) {
			continue
		}
		n.obs.Sets[s.ID] = append(hist, SetObs{At: now, Version: s.Version, Replicas: slices.Clone(s.Replicas)})
	}
}

// healBound is how long the heal after the epoch begun at began may take:
// Options.Timeout, plus, under a catch-up cap, the bytes that the epoch's
// swaps emptied (every sealed copy the metadata places on a swapped
// broker) over the cap: at worst the whole heal goes through one broker's
// cap. Without a cap, or when the metadata cannot be read, Timeout.
func (n *runner) healBound(ctx context.Context, label string, began time.Time) time.Duration {
	if n.o.BackfillRate <= 0 {
		return n.o.Timeout
	}
	n.mu.Lock()
	var swapped []meta.BrokerID
	for _, f := range n.obs.Faults {
		if f.Kind == harness.KindSwap && !f.Start.Before(began) {
			swapped = append(swapped, f.Brokers...)
		}
	}
	n.mu.Unlock()
	if len(swapped) == 0 {
		return n.o.Timeout
	}
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	snap, err := n.env.LeaderClient(ctx).Metadata(mctx)
	if err != nil {
		n.env.Logf("  nemesis: %s: no metadata for the heal bound (%v): %v", label, err, n.o.Timeout)
		return n.o.Timeout
	}
	lost := lostBytes(snap, swapped)
	bound := n.o.Timeout + time.Duration(float64(lost)/float64(n.o.BackfillRate)*float64(time.Second))
	n.env.Logf("  nemesis: %s: heal bound %v: %v, and %d bytes on the swapped brokers %v at %d bytes/s", label, bound.Round(time.Second), n.o.Timeout, lost, swapped, n.o.BackfillRate)
	return bound
}

// lostBytes sums the sealed copies snap places on the brokers in lost,
// one segment's bytes per broker holding it.
func lostBytes(snap meta.Snapshot, lost []meta.BrokerID) int64 {
	var n int64
	for _, s := range snap.Segments {
		if !s.Sealed {
			continue
		}
		for _, r := range s.Replicas {
			if slices.Contains(lost, r) {
				n += s.ByteSize
			}
		}
	}
	return n
}

// snapshot copies the observations for the checker.
func (n *runner) snapshot() Observations {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := n.obs
	o.Acked = slices.Clone(n.obs.Acked)
	o.Faults = slices.Clone(n.obs.Faults)
	o.Passes = slices.Clone(n.obs.Passes)
	slices.SortStableFunc(o.Passes, func(a, b PassObs) int { return a.Ended.Compare(b.Ended) })
	o.Checks = slices.Clone(n.obs.Checks)
	o.Sets = make(map[meta.SegmentID][]SetObs, len(n.obs.Sets))
	for k, v := range n.obs.Sets {
		o.Sets[k] = slices.Clone(v)
	}
	return o
}

// quiesce is a quiescent point after the epoch begun at began: every
// broker running, the heal waited for (to healBound: a bound that expires
// is recorded as not healed), then every replica copy of every
// acknowledged segment read and verified.
func (n *runner) quiesce(ctx context.Context, label string, began time.Time) error {
	var down []*harness.Broker
	for _, b := range n.c.Brokers() {
		if !b.Alive() {
			down = append(down, b)
		}
	}
	if len(down) > 0 {
		n.env.Logf("  nemesis: %d brokers still down at the quiescent point: restarting them", len(down))
		if err := n.c.Revive(ctx, n.o.Timeout, down...); err != nil {
			return fmt.Errorf("%s: restarting brokers: %w", label, err)
		}
	}
	bound := n.healBound(ctx, label, began)
	last, herr := n.env.WaitHealed(ctx, "nemesis: healing "+label, bound)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	q := QuiescentObs{Label: label, At: time.Now(), Healed: herr == nil, Running: n.env.Live(),
		Segments: map[meta.SegmentID]meta.Segment{}, Verified: map[meta.SegmentID]map[meta.BrokerID]string{}}
	if herr != nil {
		q.Why = herr.Error()
		n.env.Logf("  nemesis: %s: NOT healthy within %v: %v", label, bound, herr)
	}
	snap, err := n.env.LeaderClient(ctx).Metadata(ctx)
	if err != nil {
		if last == nil {
			return fmt.Errorf("%s: no metadata: %w", label, err)
		}
		snap = *last
	}
	n.mu.Lock()
	q.Acked = slices.Clone(n.obs.Acked)
	n.noteSets(snap, q.At)
	n.mu.Unlock()
	for _, s := range snap.Segments {
		q.Segments[s.ID] = s
	}
	verified := 0
	for _, id := range q.Acked {
		seg, ok := q.Segments[id]
		if !ok {
			continue
		}
		q.Verified[id] = map[meta.BrokerID]string{}
		for _, b := range seg.Replicas {
			q.Verified[id][b] = n.verifyCopy(b, seg)
			if q.Verified[id][b] == "" {
				verified++
			}
		}
	}
	n.mu.Lock()
	n.obs.Checks = append(n.obs.Checks, q)
	n.rep.CopiesVerified += verified
	n.rep.ChecksRun++
	n.mu.Unlock()
	n.env.Logf("  nemesis: %s: %d acknowledged segments, %d copies read and verified", label, len(q.Acked), verified)
	return nil
}

// verifyCopy reads b's copy of seg in full: every frame's CRC and offset,
// the footer, the frames' checksum against the metadata. "" is good.
func (n *runner) verifyCopy(b meta.BrokerID, seg meta.Segment) string {
	br := n.c.Broker(b)
	if br == nil {
		return "unknown broker"
	}
	path, err := br.CopyPath(seg.ID)
	if err != nil || path == "" {
		return fmt.Sprintf("no copy file (%v)", err)
	}
	if err := harness.AuditCopy(path, seg); err != nil {
		if os.IsNotExist(err) {
			return "no copy file"
		}
		return "audit: " + err.Error()
	}
	return ""
}

// finish fills the report's figures from the observations.
func (n *runner) finish() {
	o := n.snapshot()
	n.rep.PassesObserved = len(o.Passes)
	for _, f := range o.Faults {
		n.rep.FaultWindows = append(n.rep.FaultWindows, kafkaload.Window{Kind: string(f.Kind), Start: f.Start, End: f.End})
	}
	for _, p := range o.Passes {
		n.rep.PassesUnseen += int(p.Unseen)
		if p.Report.HoldReason != "" {
			n.rep.HoldsSeen++
		}
	}
	for _, sets := range o.Sets {
		for i := 1; i < len(sets); i++ {
			if !harness.SameSet(sets[i-1].Replicas, sets[i].Replicas) {
				n.rep.SetChangesSeen++
			}
		}
	}
	if len(o.Checks) > 0 {
		last := o.Checks[len(o.Checks)-1]
		for _, id := range last.Acked {
			good := false
			for _, why := range last.Verified[id] {
				good = good || why == ""
			}
			if !good {
				n.rep.SegmentsLost++
			}
		}
		n.env.Checked(last.Segments)
	}
}
