package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// The write path's first step, on the broker that coordinates it: placing
// a new segment (heal.PlaceNew), creating its copies on every replica,
// then committing CreateSegment. A create that loses to another leaves
// its copies to leftovers.go.

// parseCreate decodes and checks the body of POST /v1/segments.
func parseCreate(body []byte) (admin.CreateRequest, error) {
	var req admin.CreateRequest
	if err := decodeJSON(body, &req); err != nil {
		return admin.CreateRequest{}, err
	}
	if err := req.ID.Validate(); err != nil {
		return admin.CreateRequest{}, err
	}
	if err := meta.ValidateReplicas(req.Replicas); err != nil {
		return admin.CreateRequest{}, fmt.Errorf("replicas: %w", err)
	}
	return req, nil
}

func (b *Server) createSegment(r *http.Request, body []byte) (any, error) {
	req, err := parseCreate(body)
	if err != nil {
		return nil, err
	}
	return b.create(r.Context(), req)
}

// create makes the segment's copies on its replica set and commits
// CreateSegment. Replicas are chosen by the leader; a follower forwards.
// Creates of one id on this broker run one at a time (lockCreate), so two
// callers that place the same segment (the Kafka keeper and a topic's
// creation) agree on one set; a create that loses to a segment recorded
// by another broker deletes the empty copies it made outside the recorded
// set (dropLeftovers), so that no broker keeps an active copy the metadata
// does not assign to it. A placed create that loses answers the recorded
// segment; one with its own replicas answers it only when the sets match.
func (b *Server) create(ctx context.Context, req admin.CreateRequest) (meta.Segment, error) {
	if err := req.ID.Validate(); err != nil {
		return meta.Segment{}, err
	}
	if len(req.Replicas) == 0 && !b.node.IsLeader() {
		if seg, done, err := b.forwardCreate(ctx, req); done {
			return seg, err
		}
	}
	unlock := b.lockCreate(req.ID)
	defer unlock()
	placed := len(req.Replicas) == 0
	if placed {
		// A retried create whose first attempt landed under a previous
		// leader, or a concurrent one that placed it first, finds its
		// segment: answer it, do not place it again.
		if err := b.node.Barrier(ctx); err != nil {
			return meta.Segment{}, err
		}
		if cur, ok := b.node.Segment(req.ID); ok {
			if cur.Sealed || cur.StartOffset != req.StartOffset {
				return meta.Segment{}, fmt.Errorf("%w: %s (sealed %v, start offset %d)", meta.ErrSegmentExists, req.ID, cur.Sealed, cur.StartOffset)
			}
			return cur, nil
		}
		rs, err := b.place(req.Exclude)
		if err != nil {
			return meta.Segment{}, err
		}
		req.Replicas = rs
	} else if cur, ok := b.node.Segment(req.ID); ok && !meta.SameReplicas(cur.Replicas, req.Replicas) {
		return meta.Segment{}, fmt.Errorf("%w: %s on %v, not %v", meta.ErrSegmentExists, req.ID, cur.Replicas, req.Replicas)
	}
	if err := meta.ValidateReplicas(req.Replicas); err != nil {
		return meta.Segment{}, err
	}
	snap := b.node.Snapshot()
	g, gctx := errgroup.WithContext(ctx)
	made := make([]bool, len(req.Replicas))
	for i, rb := range req.Replicas {
		br, ok := snap.Broker(rb)
		if !ok || br.AdminAddr == "" {
			return meta.Segment{}, fmt.Errorf("%w: replica %d is not registered", errBadRequest, rb)
		}
		g.Go(func() error {
			err := b.post(gctx, br.AdminAddr, "/v1/internal/copies/"+string(req.ID)+"/create", copyCreate{StartOffset: req.StartOffset}, nil)
			made[i] = err == nil
			return err
		})
	}
	if err := g.Wait(); err != nil {
		var on []meta.BrokerID
		for i, ok := range made {
			if ok {
				on = append(on, req.Replicas[i])
			}
		}
		b.dropLeftoversOnceRecorded(req.ID, on)
		return meta.Segment{}, fmt.Errorf("create %s on %v: %w", req.ID, req.Replicas, err)
	}
	seg := meta.Segment{ID: req.ID, StartOffset: req.StartOffset, Replicas: req.Replicas}
	if _, err := b.apply(ctx, meta.CreateSegment{Segment: seg}); err != nil {
		if !errors.Is(err, meta.ErrSegmentExists) {
			return meta.Segment{}, err
		}
		// Recorded already: by a retried create whose first attempt
		// landed, or by a concurrent one. This broker's metadata may lag
		// the leader's refusal.
		cur, serr := b.segment(ctx, req.ID)
		if serr != nil {
			return meta.Segment{}, fmt.Errorf("%w (and reading it back: %w)", err, serr)
		}
		if !meta.SameReplicas(cur.Replicas, seg.Replicas) {
			b.dropLeftovers(ctx, req.ID, seg.Replicas, cur.Replicas)
		}
		if cur.Sealed || cur.StartOffset != seg.StartOffset || (!placed && !meta.SameReplicas(cur.Replicas, seg.Replicas)) {
			return meta.Segment{}, err
		}
		return cur, nil
	}
	seg.Version = 1
	return seg, nil
}

// forwardCreate sends a create to be placed to the leader (onLeader).
// done is false when this broker became the leader meanwhile: the caller
// places the segment itself.
func (b *Server) forwardCreate(ctx context.Context, req admin.CreateRequest) (seg meta.Segment, done bool, err error) {
	leads := false
	err = b.onLeader(ctx, leaderRequest{
		what: "create " + string(req.ID), method: http.MethodPost, path: "/v1/internal/segments", req: req, resp: &seg,
		here: func() (bool, error) {
			leads = b.node.IsLeader()
			return leads, nil
		},
	})
	return seg, !leads, err
}

// place picks the replica set of a new segment by heal's rule
// (heal.PlaceNew), from the registered brokers, the control plane's last
// contact with each and the coordinator's dead and suspect brokers,
// rotating over the candidates from segment to segment; exclude are left
// out too (a roll's replicas that failed its last write).
func (b *Server) place(exclude []meta.BrokerID) ([]meta.BrokerID, error) {
	snap := b.node.Snapshot()
	rf := snap.ReplicationFactor
	if rf < 1 {
		rf = b.cfg.ReplicationFactor
	}
	c := heal.Candidates{
		Brokers: snap.Brokers, Self: b.self, Heard: b.lastContact(), Now: time.Now(), Factor: rf,
		// Heard from within five heartbeats (at least 2 s): a loaded
		// follower is not left out of new replica sets, a dead one soon is.
		Horizon: max(5*b.cfg.Raft.HeartbeatTimeout, 2*time.Second),
	}
	// The raft leader hears a broker back on an empty data directory
	// seconds before its metadata has caught up and it answers heal's
	// probes: a segment placed on it then would be re-replicated at once.
	c.Unplaceable = map[meta.BrokerID]bool{}
	if b.heal != nil {
		maps.Copy(c.Unplaceable, b.heal.Unplaceable())
	}
	for _, id := range exclude {
		c.Unplaceable[id] = true
	}
	b.placeMu.Lock()
	c.Rotate = b.cursor
	b.cursor++
	b.placeMu.Unlock()
	rs, err := heal.PlaceNew(c)
	if errors.Is(err, heal.ErrNoBroker) {
		return nil, fmt.Errorf("%w: %w", errNoLeader, err)
	}
	return rs, err
}
