package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/malachi-log/malachi/internal/retry"
	"github.com/malachi-log/malachi/meta"
)

// What the write path shares: one writer per segment on a broker
// (lockSegment), a segment read from the metadata as it arrives, and a
// request sent to every replica at once.

func (b *Server) lockSegment(id meta.SegmentID) func() {
	b.segMu.Lock()
	m := b.segLock[id]
	if m == nil {
		m = &sync.Mutex{}
		b.segLock[id] = m
	}
	b.segMu.Unlock()
	m.Lock()
	return m.Unlock
}

// setFence fences (on) or unfences the local copy of id: a fenced copy
// takes no frame (appendFrame). The caller holds id's lockSegment. A fence
// lives in memory: a restart drops it, which a fenced seal_at notices.
func (b *Server) setFence(id meta.SegmentID, on bool) {
	b.segMu.Lock()
	defer b.segMu.Unlock()
	if on {
		b.fences[id] = true
	} else {
		delete(b.fences, id)
	}
}

// fenced reports whether the local copy of id is fenced.
func (b *Server) fenced(id meta.SegmentID) bool {
	b.segMu.Lock()
	defer b.segMu.Unlock()
	return b.fences[id]
}

// segment returns the segment from this broker's metadata, waiting briefly
// for it to arrive (a follower may lag the create).
func (b *Server) segment(ctx context.Context, id meta.SegmentID) (meta.Segment, error) {
	if err := id.Validate(); err != nil {
		return meta.Segment{}, err
	}
	deadline := time.Now().Add(2 * time.Second)
	bo := retry.Backoff{Initial: 5 * time.Millisecond, Max: 5 * time.Millisecond}
	for {
		if seg, ok := b.node.Segment(id); ok {
			return seg, nil
		}
		if time.Now().After(deadline) {
			return meta.Segment{}, fmt.Errorf("%w: %s", meta.ErrUnknownSegment, id)
		}
		if err := bo.Wait(ctx); err != nil {
			return meta.Segment{}, err
		}
	}
}

// onReplicas posts req to /v1/internal/copies/<id>/<op> on every replica
// of seg at once and returns their answers in replica order; the first
// error cancels the others.
func onReplicas[T any](ctx context.Context, b *Server, seg meta.Segment, op string, req any) ([]T, error) {
	res := make([]T, len(seg.Replicas))
	snap := b.node.Snapshot()
	g, gctx := errgroup.WithContext(ctx)
	for i, rb := range seg.Replicas {
		br, ok := snap.Broker(rb)
		if !ok {
			return nil, fmt.Errorf("%w: replica %d of %s is not registered", errNotFound, rb, seg.ID)
		}
		g.Go(func() error {
			return b.post(gctx, br.AdminAddr, "/v1/internal/copies/"+string(seg.ID)+"/"+op, req, &res[i])
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, seg.ID, err)
	}
	return res, nil
}
