package harness

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
)

// What a poll of the brokers sees and how healthy it is: the one health
// check of the demo and the e2e tests.

// View is one Poll of the cluster: the replicated metadata, every running
// broker's local copies, and the leader's heal status.
type View struct {
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
	// StateSince is the earliest metadata index at which a Poll of the
	// cluster saw its heal state (Snap without Index and the consumer
	// groups' committed offsets) as it is in Snap: a heal pass at or after
	// it judged this state, however far Kafka offset commits, which heal
	// does not read, advanced the index since.
	StateSince uint64
}

// stateMark remembers the heal state Poll saw last and the earliest index
// it saw it at.
type stateMark struct {
	mu    sync.Mutex
	sum   [sha256.Size]byte // of the state; protected by mu
	index uint64            // protected by mu
}

// since notes snap and returns the earliest index at which the state in
// snap was seen (snap.Index without a mark).
func (m *stateMark) since(snap meta.Snapshot) uint64 {
	if m == nil {
		return snap.Index
	}
	st := snap
	st.Index, st.Groups = 0, nil
	b, err := json.Marshal(st)
	if err != nil {
		return snap.Index
	}
	sum := sha256.Sum256(b)
	m.mu.Lock()
	defer m.mu.Unlock()
	if sum != m.sum || snap.Index < m.index {
		m.sum, m.index = sum, snap.Index
	}
	return m.index
}

// Poll builds a View. Metadata comes from the leader when it answers, else
// from any running broker. With metadataOnly the brokers' copies are not
// listed (listing stats and reads every copy's footer: a load on the
// brokers that a Poll should not add while they are busy healing).
func Poll(ctx context.Context, c *Cluster, metadataOnly bool) (*View, error) {
	run := c.Running()
	v := &View{Copies: map[meta.BrokerID]map[meta.SegmentID]admin.Copy{}, MetadataOnly: metadataOnly}
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
			v.Copies[b.ID] = CopiesByID(cs)
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
		order = append([]*Broker{lb}, run...)
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
		v.StateSince = c.mark.since(snap)
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

// Evaluation sums a View up against the cluster's replication factor.
type Evaluation struct {
	Sealed          int
	Healthy         int
	UnderReplicated int
	Damaged         int
	// DataLoss counts segments with no intact copy on any running broker.
	DataLoss int
	// Unhealthy names every segment not healthy, with why (sorted by id).
	Unhealthy map[meta.SegmentID]string
}

func (e Evaluation) OK() bool { return e.Sealed > 0 && e.Healthy == e.Sealed }

// CopyCheck tells whether broker b's copy of seg is good; "" means good.
type CopyCheck func(b meta.BrokerID, seg meta.Segment, lc admin.Copy, listed bool) string

// Evaluate classifies every sealed segment of v. live says which brokers
// count as alive; check judges one listed copy.
func Evaluate(v *View, rf int, live map[meta.BrokerID]bool, check CopyCheck) Evaluation {
	e := Evaluation{Unhealthy: map[meta.SegmentID]string{}}
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

// CheckCopy judges a copy by what its broker lists (GET /v1/copies):
// listed, sealed, not latched, and exactly the sealed size (frames plus
// footer); "" when good.
func CheckCopy(seg meta.Segment, lc admin.Copy, listed bool) string {
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

// CopiesByID indexes a broker's listing of its copies (GET /v1/copies).
func CopiesByID(cs []admin.Copy) map[meta.SegmentID]admin.Copy {
	m := make(map[meta.SegmentID]admin.Copy, len(cs))
	for _, lc := range cs {
		m[lc.ID] = lc
	}
	return m
}

// HealWait says what WaitHealed waits for.
type HealWait struct {
	RF int
	// Check judges each listed copy (nil: CheckCopy alone).
	Check CopyCheck
	// Live are the brokers that count as alive (nil: the running ones).
	Live func() map[meta.BrokerID]bool
	// Every is the poll period (0: 100 ms).
	Every time.Duration
	// Seen, when set, is given every view polled and its evaluation.
	Seen func(v *View, e Evaluation)
	// Pending, when set, is asked of a view that found every segment
	// healthy: "" agrees it is healed, else it says what is still pending
	// (a verification, a count).
	Pending func(v *View, e Evaluation) string
}

// WaitHealed polls c until every sealed segment is healthy on a view with
// every running broker answering and Pending has nothing left, and returns
// that view. While segments are under-replicated it polls the metadata
// alone (listing copies loads brokers that are busy healing). It fails at
// timeout saying what was still wrong, and at once when a broker exits on
// its own or ctx ends.
func WaitHealed(ctx context.Context, c *Cluster, w HealWait, timeout time.Duration) (*View, error) {
	check, live, every := w.Check, w.Live, w.Every
	if check == nil {
		check = func(_ meta.BrokerID, seg meta.Segment, lc admin.Copy, listed bool) string {
			return CheckCopy(seg, lc, listed)
		}
	}
	if live == nil {
		live = c.Live
	}
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	deadline := time.Now().Add(timeout)
	why := "not polled"
	for {
		if err := c.UnexpectedExit(); err != nil {
			return nil, err
		}
		v, err := Poll(ctx, c, true)
		if err == nil && Evaluate(v, w.RF, live(), check).UnderReplicated == 0 {
			v, err = Poll(ctx, c, false)
		}
		if err != nil {
			why = err.Error()
		} else if why = healthWhy(v, w, live(), check); why == "" {
			return v, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not healthy after %v: %s", timeout, why)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(every):
		}
	}
}

// healthWhy evaluates v for WaitHealed: "" when healed, else why not.
func healthWhy(v *View, w HealWait, live map[meta.BrokerID]bool, check CopyCheck) string {
	e := Evaluate(v, w.RF, live, check)
	if w.Seen != nil {
		w.Seen(v, e)
	}
	switch {
	case len(e.Unhealthy) > 0:
		ids := slices.Sorted(maps.Keys(e.Unhealthy))
		return fmt.Sprintf("%d segments unhealthy, e.g. %s: %s", len(ids), ids[0], e.Unhealthy[ids[0]])
	case v.MetadataOnly:
		return "copies not listed"
	case len(v.Unreachable) > 0:
		return v.Unreachable[0]
	case !e.OK():
		return "no sealed segment"
	case w.Pending != nil:
		return w.Pending(v, e)
	}
	return ""
}

// PassClean says the leader's latest heal report, at or after the index
// at which the view's heal state was first seen (StateSince), found
// nothing left to do. Without a report (no plugin
// status yet) it is false: verification is not assumed.
func (v *View) PassClean() (bool, string) {
	r, _, _, ok := admin.LastPass(v.Status)
	if !ok {
		return false, "no heal report in the leader's /v1/status"
	}
	switch {
	case r.Index < v.StateSince:
		return false, fmt.Sprintf("latest heal pass at index %d, the cluster's state as of %d (metadata at %d)", r.Index, v.StateSince, v.Snap.Index)
	case r.UnderReplicated > 0:
		return false, fmt.Sprintf("heal pass: %d under-replicated", r.UnderReplicated)
	case len(r.Failed) > 0:
		return false, fmt.Sprintf("heal pass: %d failed (%s: %s)", len(r.Failed), r.Failed[0].Segment, r.Failed[0].Reason)
	case len(r.Unsettled) > 0:
		return false, fmt.Sprintf("heal pass: %d copies not yet confirmed", len(r.Unsettled))
	case r.HoldReason != "" && !r.HoldReleased:
		return false, "heal pass on hold: " + r.HoldReason
	case r.Backfills > 0 || r.Commands > 0 || r.Deferred > 0:
		return false, fmt.Sprintf("heal pass planned %d backfills and %d commands (%d deferred)", r.Backfills, r.Commands, r.Deferred)
	}
	return true, ""
}

// WaitSettled waits, polling every period up to timeout, for a heal pass
// started after since that left nothing to do (View.PassClean): copies
// moved or rewritten since are confirmed again. It returns that view.
func (c *Cluster) WaitSettled(ctx context.Context, since time.Time, timeout, every time.Duration) (*View, error) {
	deadline := time.Now().Add(timeout)
	why := "no heal pass seen"
	for time.Now().Before(deadline) {
		v, err := Poll(ctx, c, false)
		if err != nil {
			why = err.Error()
		} else if _, started, _, ok := admin.LastPass(v.Status); !ok {
			why = "no heal report in the leader's /v1/status"
		} else if started.IsZero() || !started.After(since) {
			why = "no heal pass started since the copies moved"
		} else if clean, cwhy := v.PassClean(); !clean {
			why = cwhy
		} else {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(every):
		}
	}
	return nil, fmt.Errorf("copies not confirmed again after %v: %s", timeout, why)
}
