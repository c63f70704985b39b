package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/meta"
)

// view is one poll of the cluster: the replicated metadata, every running
// broker's local copies, and the leader's heal status.
type view struct {
	At     time.Time
	Leader meta.BrokerID
	Snap   meta.Snapshot
	// Copies by broker; a broker absent from the map did not answer.
	Copies map[meta.BrokerID]map[meta.SegmentID]admin.Copy
	// Status is the leader's /v1/status, raw.
	Status json.RawMessage
	// Unreachable names the running brokers that did not answer.
	Unreachable []string
	// MetadataOnly: the copies were not asked for (Copies is empty), so
	// only the replica sets can be judged.
	MetadataOnly bool
}

// poll builds a view. Metadata comes from the leader when it answers, else
// from any running broker. With metadataOnly the brokers' copies are not
// listed (listing stats and reads every copy's footer: a load on the
// brokers that a poll should not add while they are busy healing).
func poll(ctx context.Context, c *harness.Cluster, metadataOnly bool) (*view, error) {
	run := c.Running()
	v := &view{Copies: map[meta.BrokerID]map[meta.SegmentID]admin.Copy{}, MetadataOnly: metadataOnly}
	var mu sync.Mutex
	var wg sync.WaitGroup
	healths := map[meta.BrokerID]admin.Health{}
	for _, b := range run {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			h, herr := b.Client.Health(pctx)
			var cs []admin.Copy
			var cerr error
			if !metadataOnly {
				cs, cerr = b.Client.Copies(pctx)
			}
			mu.Lock()
			defer mu.Unlock()
			if herr == nil {
				healths[b.ID] = h
			}
			if metadataOnly {
				if herr != nil {
					v.Unreachable = append(v.Unreachable, fmt.Sprintf("broker %d (%s): %v", b.ID, b.Admin, herr))
				}
				return
			}
			if cerr != nil {
				v.Unreachable = append(v.Unreachable, fmt.Sprintf("broker %d (%s): %v", b.ID, b.Admin, cerr))
				return
			}
			m := make(map[meta.SegmentID]admin.Copy, len(cs))
			for _, lc := range cs {
				m[lc.ID] = lc
			}
			v.Copies[b.ID] = m
		}()
	}
	wg.Wait()
	sort.Strings(v.Unreachable)
	for _, h := range healths {
		if h.IsLeader {
			v.Leader = h.ID
		}
	}
	order := run
	if lb := c.Broker(v.Leader); lb != nil {
		order = append([]*harness.Broker{lb}, run...)
	}
	var lastErr error
	for _, b := range order {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		snap, err := b.Client.Metadata(pctx)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		v.Snap = snap
		lastErr = nil
		break
	}
	if lastErr != nil {
		return nil, fmt.Errorf("no running broker served /v1/metadata: %w", lastErr)
	}
	if lb := c.Broker(v.Leader); lb != nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if st, err := lb.Client.Status(pctx); err == nil {
			v.Status = st
		}
		cancel()
	}
	v.At = time.Now()
	return v, nil
}

// evaluation sums a view up against the cluster's replication factor.
type evaluation struct {
	Sealed          int
	Healthy         int
	UnderReplicated int
	Damaged         int
	// DataLoss counts segments with no intact copy on any running broker.
	DataLoss int
	// Unhealthy names every segment not healthy, with why (sorted by id).
	Unhealthy map[meta.SegmentID]string
}

func (e evaluation) OK() bool { return e.Sealed > 0 && e.Healthy == e.Sealed }

// copyCheck tells whether broker b's copy of seg is good; "" means good.
type copyCheck func(b meta.BrokerID, seg meta.Segment, lc admin.Copy, listed bool) string

// evaluate classifies every sealed segment of v. live says which brokers
// count as alive; check judges one listed copy.
func evaluate(v *view, rf int, live map[meta.BrokerID]bool, check copyCheck) evaluation {
	e := evaluation{Unhealthy: map[meta.SegmentID]string{}}
	for _, seg := range v.Snap.Segments {
		if !seg.Sealed {
			continue
		}
		e.Sealed++
		liveReplicas := 0
		var why string
		intact := 0
		for _, r := range seg.Replicas {
			if !live[r] {
				if why == "" {
					why = fmt.Sprintf("replica on dead broker %d", r)
				}
				continue
			}
			liveReplicas++
			if v.MetadataOnly {
				intact++
				continue
			}
			cs, answered := v.Copies[r]
			if !answered {
				if why == "" {
					why = fmt.Sprintf("broker %d did not list its copies", r)
				}
				continue
			}
			lc, listed := cs[seg.ID]
			if bad := check(r, seg, lc, listed); bad != "" {
				if why == "" {
					why = fmt.Sprintf("copy on broker %d: %s", r, bad)
				}
				continue
			}
			intact++
		}
		// A copy outside the replica set still holds the data.
		if intact == 0 && !v.MetadataOnly {
			for b, cs := range v.Copies {
				if !live[b] || seg.HasReplica(b) {
					continue
				}
				if lc, ok := cs[seg.ID]; ok && check(b, seg, lc, true) == "" {
					intact++
					break
				}
			}
		}
		if intact == 0 && !v.MetadataOnly {
			e.DataLoss++
		}
		switch {
		case liveReplicas < rf:
			e.UnderReplicated++
			if why == "" {
				why = fmt.Sprintf("%d replicas, replication factor %d", liveReplicas, rf)
			}
			e.Unhealthy[seg.ID] = why
		case why != "":
			e.Damaged++
			e.Unhealthy[seg.ID] = why
		default:
			e.Healthy++
		}
	}
	return e
}

// basicCheck judges a copy by what its broker says: listed, sealed, not
// latched, and exactly the sealed size (frames plus footer).
func basicCheck(seg meta.Segment, lc admin.Copy, listed bool) string {
	switch {
	case !listed:
		return "missing"
	case lc.Latched:
		return "latched"
	case lc.Size < seg.ByteSize+footerSize:
		return fmt.Sprintf("short: %d of %d bytes", lc.Size, seg.ByteSize+footerSize)
	case lc.Size > seg.ByteSize+footerSize:
		return fmt.Sprintf("overrun: %d bytes, sealed size %d", lc.Size, seg.ByteSize+footerSize)
	case !lc.Sealed:
		return "no valid seal footer"
	}
	return ""
}
