package harness

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// WaitMetadata polls the leader's metadata until cond holds, within
// timeout; it fails at once when a broker exits on its own.
func (c *Cluster) WaitMetadata(ctx context.Context, timeout time.Duration, cond func(*meta.Snapshot) bool) (*meta.Snapshot, error) {
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		snap, err := c.LeaderClient(ctx).Metadata(pctx)
		cancel()
		if err == nil && cond(&snap) {
			return &snap, nil
		}
		if e := c.UnexpectedExit(); e != nil {
			return nil, e
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not within %v (last error: %v)", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitNotDead waits until the leader's heal pass no longer lists broker id
// dead, and id answers health naming the same leader as the others,
// polling every period.
func (c *Cluster) WaitNotDead(ctx context.Context, id meta.BrokerID, timeout, every time.Duration) error {
	deadline := time.Now().Add(timeout)
	b := c.Broker(id)
	for {
		p, err := c.leaderStatus(ctx)
		if err == nil {
			hctx, cancel := context.WithTimeout(ctx, time.Second)
			h, herr := b.Client.Health(hctx)
			cancel()
			switch {
			case herr != nil:
				err = herr
			case h.Leader != p.Leader:
				err = fmt.Errorf("broker %d names leader %d, the leader is %d", id, h.Leader, p.Leader)
			case slices.Contains(p.Dead, id):
				err = fmt.Errorf("heal pass %d still lists broker %d dead", p.Passes, id)
			default:
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker %d not back in the control plane after %v: %w", id, timeout, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(every)
	}
}

// Transfers is what a scan of the copies directories found of a dead
// broker's segments on brokers outside their replica sets: the targets of
// the heal pass's backfills.
type Transfers struct {
	Partial    int   // files short of the sealed size: bytes still moving
	Complete   int   // full-size files (committed, or about to be)
	Bytes      int64 // bytes on disk in the partial files
	BytesTotal int64 // their sealed sizes
}

// ScanTransfers stats the copies of segs on every running broker not in
// skip and outside the segment's replica set in segs, leaving out the
// files baseline lists with the same size: copies left behind by earlier
// stages (a paused broker keeps its old copies) are not transfers.
func (c *Cluster) ScanTransfers(segs map[meta.SegmentID]meta.Segment, baseline map[meta.BrokerID]map[meta.SegmentID]int64, skip ...meta.BrokerID) map[meta.BrokerID]Transfers {
	out := map[meta.BrokerID]Transfers{}
	for _, b := range c.Running() {
		if slices.Contains(skip, b.ID) {
			continue
		}
		var t Transfers
		for id, seg := range segs {
			if seg.HasReplica(b.ID) {
				continue
			}
			p, err := b.CopyPath(id)
			if err != nil {
				continue
			}
			fi, err := os.Stat(p)
			if err != nil {
				continue
			}
			size := fi.Size()
			if was, ok := baseline[b.ID][seg.ID]; ok && was == size {
				continue
			}
			full := seg.ByteSize + footerSize
			if size < full {
				t.Partial++
				t.Bytes += size
				t.BytesTotal += full
			} else {
				t.Complete++
			}
		}
		if t.Partial+t.Complete > 0 {
			out[b.ID] = t
		}
	}
	return out
}

// Sizes returns, for each target segment, the size of the copy on each of
// its replicas in v (0 when absent or the broker did not answer).
func (v *View) Sizes(targets []meta.SegmentID) map[meta.SegmentID]map[meta.BrokerID]int64 {
	out := map[meta.SegmentID]map[meta.BrokerID]int64{}
	for _, id := range targets {
		seg, ok := v.Snap.Segment(id)
		if !ok {
			continue
		}
		m := map[meta.BrokerID]int64{}
		for _, r := range seg.Replicas {
			if lc, ok := v.Copies[r][id]; ok {
				m[r] = lc.Size
			}
		}
		out[id] = m
	}
	return out
}

// MissingBytes is what healing the targets must have moved, from the
// copies' sizes after the fault (pre) and the final replica sets: every
// copy on a final replica that was missing or short needed the rest of its
// bytes.
func (v *View) MissingBytes(pre map[meta.SegmentID]map[meta.BrokerID]int64) int64 {
	var total int64
	for id, m := range pre {
		seg, ok := v.Snap.Segment(id)
		if !ok {
			continue
		}
		full := seg.ByteSize + footerSize
		for _, r := range seg.Replicas {
			if have := m[r]; have < full {
				total += full - have
			}
		}
	}
	return total
}

// RollingRestart gives every broker the [heal] settings extra and
// restarts the running ones one at a time, each inside a maintenance
// window (SIGTERM, start, wait up to timeout for a leader), calling
// down(b), when not nil, while b is stopped.
func (c *Cluster) RollingRestart(ctx context.Context, extra string, timeout time.Duration, down func(*Broker) error) error {
	c.SetHealExtra(extra)
	for _, b := range c.Brokers() {
		if err := c.WriteConfig(b); err != nil {
			return err
		}
	}
	for _, b := range c.Running() {
		// A maintenance window, as an operator's rolling restart has: a
		// restart that outlasts the grace delay would otherwise have its
		// replicas replaced, and the copies it comes back with would be
		// leftovers that a later heal adopts instead of moving bytes.
		if _, err := c.LeaderClient(ctx).Maintenance(ctx, b.ID, timeout); err != nil {
			return fmt.Errorf("maintenance window for broker %d's restart: %w", b.ID, err)
		}
		if err := c.Terminate(b, 10*time.Second); err != nil {
			return err
		}
		if down != nil {
			if err := down(b); err != nil {
				return err
			}
		}
		if err := c.Revive(ctx, timeout, b); err != nil {
			return err
		}
		if _, err := c.LeaderClient(ctx).EndMaintenance(ctx, b.ID); err != nil {
			return fmt.Errorf("ending broker %d's maintenance window after its restart: %w", b.ID, err)
		}
	}
	return nil
}

// DropLeftovers removes broker b's copy files (b stopped) of segments
// whose replica set in snap leaves b out; it returns how many.
func (b *Broker) DropLeftovers(snap *meta.Snapshot) (int, error) {
	files, err := b.CopyFiles()
	if err != nil {
		return 0, err
	}
	n := 0
	for id, path := range files {
		if seg, ok := snap.Segment(id); ok && !seg.HasReplica(b.ID) {
			if err := os.Remove(path); err != nil {
				return n, fmt.Errorf("harness: removing broker %d's leftover copy of %s: %w", b.ID, id, err)
			}
			n++
		}
	}
	return n, nil
}

// Frozen runs fn with b stopped (SIGSTOP), so that no heal pass sees a
// half-made fault; b is continued (SIGCONT) whatever fn returns. The pause
// is milliseconds, far below the grace delay.
func (b *Broker) Frozen(fn func() error) error {
	if err := b.Pause(); err != nil {
		return err
	}
	err := fn()
	if cerr := b.Resume(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// Frozen runs fn with every running broker stopped (SIGSTOP), so that a
// fault made of several steps (one file after another, on several brokers)
// lands as one event: no heal pass, backfill or scrubber acts between two
// of its steps. Every broker stopped is continued (SIGCONT) whatever fn
// returns.
func (c *Cluster) Frozen(fn func() error) error {
	var stopped []*Broker
	var err error
	for _, b := range c.brokers {
		if !b.Alive() {
			continue
		}
		if err = b.Pause(); err != nil {
			break
		}
		stopped = append(stopped, b)
	}
	if err == nil {
		err = fn()
	}
	for _, b := range stopped {
		if cerr := b.Resume(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}
