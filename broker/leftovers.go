package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// Leftover copies of a lost create (a leftover is a copy on a broker its
// segment's recorded replica set does not name): two creates of one
// segment id can race (the Kafka keeper
// on the control plane's leader and a topic's creation, or the keeper and
// a partition leader's roll). Both make copies on their sets and propose
// CreateSegment; one is recorded, the other is refused with
// meta.ErrSegmentExists and would leave an empty, active copy on every
// broker of its set that the recorded set does not name. Such a copy
// blocks that broker from receiving the segment later (a backfill target
// must not be an active copy) until heal collects it, after
// heal.leftover_delay. lockCreate keeps the creates of one id on one
// broker apart; dropLeftovers deletes what a losing create made, and
// dropLeftoversOnceRecorded what a create that failed on one of its replicas
// made on the others, once another create recorded the segment.

// createLocks serializes the creates of one segment id on this broker.
// An id's entry lives while a create holds or awaits it.
type createLocks struct {
	mu sync.Mutex
	m  map[meta.SegmentID]*createLock // protected by mu
}

type createLock struct {
	sync.Mutex
	users int // holders and waiters; protected by createLocks.mu
}

// lockCreate holds the create lock of id until the returned func runs.
func (b *Server) lockCreate(id meta.SegmentID) func() {
	cl := &b.creates
	cl.mu.Lock()
	if cl.m == nil {
		cl.m = map[meta.SegmentID]*createLock{}
	}
	l := cl.m[id]
	if l == nil {
		l = &createLock{}
		cl.m[id] = l
	}
	l.users++
	cl.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		cl.mu.Lock()
		if l.users--; l.users == 0 {
			delete(cl.m, id)
		}
		cl.mu.Unlock()
	}
}

// dropLeftovers deletes the copies of id that a create made on the brokers
// of made that the recorded set does not name. A failure is logged: the
// copy is then a leftover for heal to collect.
func (b *Server) dropLeftovers(ctx context.Context, id meta.SegmentID, made, recorded []meta.BrokerID) {
	snap := b.node.Snapshot()
	for _, r := range made {
		if slices.Contains(recorded, r) {
			continue
		}
		br, ok := snap.Broker(r)
		if !ok {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := b.post(dctx, br.AdminAddr, "/v1/internal/copies/"+string(id)+"/drop", struct{}{}, nil)
		cancel()
		ev := b.log.Info()
		if err != nil {
			ev = b.log.Warn().Err(err)
		}
		ev.Str("segment", string(id)).Uint32("leftover_on", uint32(r)).Any("recorded", recorded).
			Msg("create lost to a concurrent create of the same segment: dropping its copy outside the recorded set")
	}
}

// leftoverWait bounds how long a failed create waits for its segment to be
// recorded by another (the keeper's next turn, a retried roll) before it
// leaves its copies to heal's leftover collection.
const leftoverWait = 2 * time.Minute

// dropLeftoversOnceRecorded is dropLeftovers for a create that failed on some of
// its replicas after making copies on others (made): nothing is recorded
// yet, so it waits in the background, until leftoverWait or Close, for
// another create to record the segment, then drops what it made outside
// the recorded set. Left alone, such an empty active copy keeps its broker
// from receiving the segment (a backfill target must not be an active
// copy) until heal.leftover_delay: a roll whose create failed on a
// read-only replica left two such copies, and the segment's latched copy
// could be replaced on neither spare broker.
func (b *Server) dropLeftoversOnceRecorded(id meta.SegmentID, made []meta.BrokerID) {
	if len(made) == 0 || b.bgCtx == nil || b.bgCtx.Err() != nil {
		return
	}
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		ctx, cancel := context.WithTimeout(b.bgCtx, leftoverWait)
		defer cancel()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if seg, ok := b.node.Segment(id); ok {
				b.dropLeftovers(ctx, id, made, seg.Replicas)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// internalDrop deletes this broker's copy of a segment whose recorded set
// does not name it, only while the copy is empty and active (what a losing
// create leaves). It waits briefly for the segment to reach this broker's
// metadata; a copy of a segment not recorded, or recorded here, is
// refused. A missing copy is not an error.
func (b *Server) internalDrop(r *http.Request, body []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if err := decodeJSON(body, &struct{}{}); err != nil {
		return nil, err
	}
	seg, err := b.segment(r.Context(), id)
	if err != nil {
		return nil, fmt.Errorf("drop %s: %w", id, err)
	}
	if slices.Contains(seg.Replicas, b.self) {
		return nil, fmt.Errorf("%w: drop %s: the recorded set %v names broker %d", errBadRequest, id, seg.Replicas, b.self)
	}
	unlock := b.lockSegment(id)
	defer unlock()
	end, err := b.db.DurableEnd(id)
	if errors.Is(err, store.ErrUnknownCopy) {
		return struct{}{}, nil
	}
	if err != nil {
		return nil, err
	}
	if end.Frames > 0 || end.Footer {
		return nil, fmt.Errorf("%w: drop %s: the copy holds %d frames (sealed %v): only an empty active copy is dropped", errBadRequest, id, end.Frames, end.Footer)
	}
	if err := b.db.Delete(id); err != nil && !errors.Is(err, store.ErrUnknownCopy) {
		return nil, err
	}
	return struct{}{}, nil
}
