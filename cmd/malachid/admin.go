package main

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/malachi-log/malachi/cluster"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/retry"
	"github.com/malachi-log/malachi/internal/rpc"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/store"
)

// Errors of the admin API, by HTTP status and code.
var (
	errBadRequest = errors.New("malachid: bad request")
	errNoLeader   = errors.New("malachid: no leader reachable")
	errDisagree   = errors.New("malachid: replicas disagree")
	errNotFound   = errors.New("malachid: not found")
)

// adminCodes are the admin API's errors on the wire (package rpc adds its
// own: unauthenticated, forbidden, bad_request, deadline, canceled).
var adminCodes = rpc.Codes{
	{Name: "bad_request", Status: http.StatusBadRequest, Err: errBadRequest},
	{Name: "invalid", Status: http.StatusBadRequest, Err: meta.ErrInvalid},
	{Name: "invalid", Status: http.StatusBadRequest, Err: store.ErrInvalid},
	{Name: "not_found", Status: http.StatusNotFound, Err: errNotFound},
	{Name: "unknown_broker", Status: http.StatusNotFound, Err: meta.ErrUnknownBroker},
	{Name: "maintenance_full", Status: http.StatusConflict, Err: meta.ErrMaintenanceFull},
	{Name: "unknown_segment", Status: http.StatusNotFound, Err: meta.ErrUnknownSegment},
	{Name: "unknown_copy", Status: http.StatusNotFound, Err: store.ErrUnknownCopy},
	{Name: "segment_exists", Status: http.StatusConflict, Err: meta.ErrSegmentExists},
	{Name: "copy_exists", Status: http.StatusConflict, Err: store.ErrExists},
	{Name: "stale_replicas", Status: http.StatusConflict, Err: meta.ErrStaleReplicas},
	{Name: "sealed", Status: http.StatusConflict, Err: meta.ErrSealed},
	{Name: "sealed", Status: http.StatusConflict, Err: store.ErrSealed},
	{Name: "not_sealed", Status: http.StatusConflict, Err: meta.ErrNotSealed},
	{Name: "topic_exists", Status: http.StatusConflict, Err: meta.ErrTopicExists},
	{Name: "unknown_topic", Status: http.StatusNotFound, Err: meta.ErrUnknownTopic},
	{Name: "latched", Status: http.StatusConflict, Err: store.ErrLatched},
	{Name: "disagree", Status: http.StatusConflict, Err: errDisagree},
	{Name: "not_leader", Status: http.StatusServiceUnavailable, Err: cluster.ErrNotLeader},
	{Name: "no_leader", Status: http.StatusServiceUnavailable, Err: errNoLeader},
	{Name: "no_quorum", Status: http.StatusServiceUnavailable, Err: cluster.ErrNoQuorum},
	{Name: "leadership_lost", Status: http.StatusServiceUnavailable, Err: cluster.ErrLeadershipLost},
}

// maxAdminBody bounds an admin request body.
const maxAdminBody = 256 << 20

// decodeJSON parses body into v strictly: one JSON object, no unknown
// fields, nothing after it. An empty body leaves v as it is (every admin
// body is optional or has defaults). Errors wrap errBadRequest.
func decodeJSON(body []byte, v any) error {
	if err := rpc.DecodeOptional(body, v); err != nil {
		return fmt.Errorf("%w: %w", errBadRequest, err)
	}
	return nil
}

// parseSegmentID checks a segment id taken from a request path.
func parseSegmentID(s string) (meta.SegmentID, error) {
	id := meta.SegmentID(s)
	if err := id.Validate(); err != nil {
		return "", fmt.Errorf("path: %w", err)
	}
	return id, nil
}

// adminHandler is an admin route: the request and its body (read, bounded).
type adminHandler func(r *http.Request, body []byte) (any, error)

// routes are the admin API. Who may call what (rpc.Viewers, Operators,
// Brokers) is the README's Security section; /v1/faults/* exists only
// with fault_injection.
func (b *broker) routes() http.Handler {
	mux := http.NewServeMux()
	srv := &rpc.Server{Certs: b.certs, Insecure: b.cfg.Insecure, Codes: adminCodes, MaxBody: maxAdminBody,
		Logger: b.log.With().Str("component", "admin").Logger()}
	for _, rt := range []struct {
		pattern string
		roles   rpc.Roles
		h       adminHandler
	}{
		{"GET /v1/health", rpc.Viewers, b.health},
		{"GET /v1/metadata", rpc.Viewers, func(*http.Request, []byte) (any, error) { return b.node.Snapshot(), nil }},
		{"GET /v1/copies", rpc.Viewers, b.copies},
		{"GET /v1/status", rpc.Viewers, b.status},
		{"GET /v1/plan", rpc.Viewers, b.plan},
		{"GET /v1/passes", rpc.Viewers, b.passes},
		{"POST /v1/segments", rpc.Operators, b.createSegment},
		{"POST /v1/segments/{id}/records", rpc.Operators, b.appendRecords},
		{"POST /v1/segments/{id}/seal", rpc.Operators, b.sealSegment},
		{"POST /v1/load", rpc.Operators, b.load},
		{"POST /v1/heal/release", rpc.Operators, b.release},
		{"POST /v1/heal/acknowledge/{id}", rpc.Operators, b.acknowledge},
		// Between brokers: a follower forwards to the leader.
		{"POST /v1/internal/apply", rpc.Brokers, b.internalApply},
		{"POST /v1/internal/segments", rpc.Brokers, b.createSegment},
		{"POST /v1/internal/copies/{id}/create", rpc.Brokers, b.internalCreate},
		{"POST /v1/internal/copies/{id}/append", rpc.Brokers, b.internalAppend},
		{"POST /v1/internal/copies/{id}/seal", rpc.Brokers, b.internalSeal},
		{"POST /v1/internal/copies/{id}/drop", rpc.Brokers, b.internalDrop},
		{"POST /v1/internal/heal/release", rpc.Brokers, b.release},
		{"POST /v1/internal/heal/acknowledge/{id}", rpc.Brokers, b.acknowledge},
		{"GET /v1/internal/plan", rpc.Brokers, b.plan},
	} {
		srv.Handle(mux, rt.pattern, rt.roles, adapt(rt.h))
	}
	b.handleLifecycle(srv, mux)
	b.kafkaRoutes(srv, mux)
	if b.faults != nil {
		srv.Handle(mux, "POST /v1/faults/{kind}/{id}", rpc.Operators, adapt(b.fault))
	}
	return mux
}

func adapt(h adminHandler) rpc.Handler {
	return func(_ context.Context, r *rpc.Request) (any, error) { return h(r.HTTP, r.Body) }
}

// Health is the answer of GET /v1/health.
type Health struct {
	ID       meta.BrokerID `json:"id"`
	Leader   meta.BrokerID `json:"leader"`
	IsLeader bool          `json:"is_leader"`
	Heal     bool          `json:"heal"`
	Index    uint64        `json:"index"`
	// Quorum is what this broker's node knows of the voters: Error is
	// cluster.Quorum.Err's text ("cluster: no quorum: 2 of 5 voters
	// reachable ..."), empty while a quorum is heard.
	Quorum QuorumHealth `json:"quorum"`
}

// QuorumHealth is cluster.Quorum as /v1/health serves it.
type QuorumHealth struct {
	Voters    int             `json:"voters"`
	Reachable []meta.BrokerID `json:"reachable"`
	Error     string          `json:"error,omitempty"`
}

func quorumHealth(q cluster.Quorum) QuorumHealth {
	h := QuorumHealth{Voters: q.Voters, Reachable: q.Reachable}
	if err := q.Err(); err != nil {
		h.Error = err.Error()
	}
	return h
}

func (b *broker) health(*http.Request, []byte) (any, error) {
	id, _ := b.node.Leader()
	return Health{ID: b.self, Leader: id, IsLeader: b.node.IsLeader(), Heal: b.heal != nil, Index: b.node.Snapshot().Index, Quorum: quorumHealth(b.node.Quorum())}, nil
}

type applyRequest struct {
	Command json.RawMessage `json:"command"`
}

type applyResponse struct {
	Index uint64 `json:"index"`
}

// apply commits c through raft: here when this broker leads, else through
// the leader's admin API (onLeader: retried across an election, bounded by
// ctx and by the quorum). Every command this broker proposes is safe to
// retry: register and seal are idempotent, a create that did land comes
// back as ErrSegmentExists and is checked by the caller.
func (b *broker) apply(ctx context.Context, c meta.Command) (uint64, error) {
	enc, err := meta.EncodeCommand(c)
	if err != nil {
		return 0, err
	}
	var resp applyResponse
	err = b.onLeader(ctx, leaderRequest{
		what: "apply " + c.Op(), method: http.MethodPost, path: "/v1/internal/apply",
		req: applyRequest{Command: enc}, resp: &resp,
		here: func() (bool, error) {
			idx, err := b.node.Apply(ctx, c)
			if notLeader(err) {
				return false, nil
			}
			resp.Index = idx
			return true, err
		},
	})
	return resp.Index, err
}

// parseApply decodes and checks the body of POST /v1/internal/apply.
func parseApply(body []byte) (meta.Command, error) {
	var req applyRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if len(req.Command) == 0 {
		return nil, fmt.Errorf("%w: body: no command", errBadRequest)
	}
	c, err := meta.DecodeCommand(req.Command)
	if err != nil {
		return nil, fmt.Errorf("%w: command: %w", errBadRequest, err)
	}
	return c, nil
}

func (b *broker) internalApply(r *http.Request, body []byte) (any, error) {
	c, err := parseApply(body)
	if err != nil {
		return nil, err
	}
	idx, err := b.node.Apply(r.Context(), c)
	if err != nil {
		return nil, err
	}
	return applyResponse{Index: idx}, nil
}

// ---- the write path ----

// CreateRequest is the body of POST /v1/segments.
type CreateRequest struct {
	ID          meta.SegmentID  `json:"id"`
	StartOffset uint64          `json:"start_offset"`
	Replicas    []meta.BrokerID `json:"replicas,omitempty"` // optional: chosen by the leader when empty
}

// parseCreate decodes and checks the body of POST /v1/segments.
func parseCreate(body []byte) (CreateRequest, error) {
	var req CreateRequest
	if err := decodeJSON(body, &req); err != nil {
		return CreateRequest{}, err
	}
	if err := req.ID.Validate(); err != nil {
		return CreateRequest{}, err
	}
	if err := meta.ValidateReplicas(req.Replicas); err != nil {
		return CreateRequest{}, fmt.Errorf("replicas: %w", err)
	}
	return req, nil
}

func (b *broker) createSegment(r *http.Request, body []byte) (any, error) {
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
// set (dropStrays), so that no broker keeps an active copy the metadata
// does not assign to it. A placed create that loses answers the recorded
// segment; one with its own replicas answers it only when the sets match.
func (b *broker) create(ctx context.Context, req CreateRequest) (meta.Segment, error) {
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
		rs, err := b.place()
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
		b.dropStraysOnceRecorded(req.ID, on)
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
			b.dropStrays(ctx, req.ID, seg.Replicas, cur.Replicas)
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
func (b *broker) forwardCreate(ctx context.Context, req CreateRequest) (seg meta.Segment, done bool, err error) {
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
// rotating over the candidates from segment to segment.
func (b *broker) place() ([]meta.BrokerID, error) {
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
	if b.heal != nil {
		c.Unplaceable = b.heal.Unplaceable()
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

// RecordsRequest is the body of POST /v1/segments/{id}/records: either
// Count generated records of Size bytes from Seed, or explicit Records.
type RecordsRequest struct {
	Count   int      `json:"count,omitempty"`
	Size    int      `json:"size,omitempty"`
	Seed    uint64   `json:"seed,omitempty"`
	Records []string `json:"records,omitempty"` // base64
}

// AppendResponse is the answer of an append: the next offset.
type AppendResponse struct {
	NextOffset uint64 `json:"next_offset"`
	Records    int    `json:"records"`
}

func (rr *RecordsRequest) check() error {
	if len(rr.Records) > 0 && rr.Count > 0 {
		return fmt.Errorf("%w: records: give count/size/seed or records, not both", errBadRequest)
	}
	if rr.Count < 0 || rr.Count > 1<<20 {
		return fmt.Errorf("%w: count = %d: want 0 to %d", errBadRequest, rr.Count, 1<<20)
	}
	if rr.Count > 0 && (rr.Size < 0 || rr.Size > 16<<20) {
		return fmt.Errorf("%w: size = %d: want 0 to %d", errBadRequest, rr.Size, 16<<20)
	}
	for i, s := range rr.Records {
		if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			return fmt.Errorf("%w: records[%d]: %v", errBadRequest, i, err)
		}
	}
	return nil
}

// payloads yields the records of rr, generated deterministically.
func (rr *RecordsRequest) payloads(fn func(p []byte) error) error {
	if len(rr.Records) > 0 {
		for _, s := range rr.Records {
			p, _ := base64.StdEncoding.DecodeString(s)
			if err := fn(p); err != nil {
				return err
			}
		}
		return nil
	}
	// One random block per request; record i is the block rotated by i
	// words with i in its first 8 bytes: distinct, deterministic, cheap.
	n := rr.Size
	block := make([]byte, n+8)
	g := rand.NewPCG(rr.Seed, 0x6d616c616368)
	for j := 0; j < n; j += 8 {
		binary.LittleEndian.PutUint64(block[j:], g.Uint64())
	}
	block = block[:n]
	buf := make([]byte, n)
	for i := 0; i < rr.Count; i++ {
		if n > 0 {
			r := (i * 8) % n
			copy(buf, block[r:])
			copy(buf[n-r:], block[:r])
			var idx [8]byte
			binary.LittleEndian.PutUint64(idx[:], uint64(i))
			copy(buf, idx[:])
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
	return nil
}

func (b *broker) lockSegment(id meta.SegmentID) func() {
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

// segment returns the segment from this broker's metadata, waiting briefly
// for it to arrive (a follower may lag the create).
func (b *broker) segment(ctx context.Context, id meta.SegmentID) (meta.Segment, error) {
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

// parseRecords decodes and checks the path id and the body of POST
// /v1/segments/{id}/records (and of its internal twin).
func parseRecords(pathID string, body []byte) (meta.SegmentID, RecordsRequest, error) {
	id, err := parseSegmentID(pathID)
	if err != nil {
		return "", RecordsRequest{}, err
	}
	var req RecordsRequest
	if err := decodeJSON(body, &req); err != nil {
		return "", RecordsRequest{}, err
	}
	if err := req.check(); err != nil {
		return "", RecordsRequest{}, err
	}
	return id, req, nil
}

func (b *broker) appendRecords(r *http.Request, body []byte) (any, error) {
	id, req, err := parseRecords(r.PathValue("id"), body)
	if err != nil {
		return nil, err
	}
	return b.append(r.Context(), id, req)
}

// append writes the records on every replica (each syncs before it
// answers) and checks that they agree on the next offset.
func (b *broker) append(ctx context.Context, id meta.SegmentID, req RecordsRequest) (AppendResponse, error) {
	if err := req.check(); err != nil {
		return AppendResponse{}, err
	}
	seg, err := b.segment(ctx, id)
	if err != nil {
		return AppendResponse{}, err
	}
	if seg.Sealed {
		return AppendResponse{}, fmt.Errorf("%w: segment %s", meta.ErrSealed, id)
	}
	unlock := b.lockSegment(id)
	defer unlock()
	res, err := onReplicas[AppendResponse](ctx, b, seg, "append", req)
	if err != nil {
		return AppendResponse{}, err
	}
	for i := range res {
		if res[i] != res[0] {
			return AppendResponse{}, fmt.Errorf("%w: append to %s: broker %d at %+v, broker %d at %+v", errDisagree, id, seg.Replicas[0], res[0], seg.Replicas[i], res[i])
		}
	}
	return res[0], nil
}

// onReplicas posts req to /v1/internal/copies/<id>/<op> on every replica
// of seg at once and returns their answers in replica order; the first
// error cancels the others.
func onReplicas[T any](ctx context.Context, b *broker, seg meta.Segment, op string, req any) ([]T, error) {
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

func (b *broker) sealSegment(r *http.Request, _ []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return b.seal(r.Context(), id)
}

// SealResponse is what every replica sealed and the metadata recorded.
type SealResponse struct {
	Segment meta.Segment `json:"segment"`
}

// seal seals every replica, checks that they agree, then commits
// SealSegment through raft.
func (b *broker) seal(ctx context.Context, id meta.SegmentID) (SealResponse, error) {
	seg, err := b.segment(ctx, id)
	if err != nil {
		return SealResponse{}, err
	}
	unlock := b.lockSegment(id)
	defer unlock()
	seals, err := onReplicas[sealResult](ctx, b, seg, "seal", struct{}{})
	if err != nil {
		return SealResponse{}, err
	}
	for i := range seals {
		if seals[i] != seals[0] {
			return SealResponse{}, fmt.Errorf("%w: seal %s: broker %d sealed %+v, broker %d sealed %+v", errDisagree, id, seg.Replicas[0], seals[0], seg.Replicas[i], seals[i])
		}
	}
	s := seals[0]
	if s.StartOffset != seg.StartOffset {
		return SealResponse{}, fmt.Errorf("%w: seal %s: copies start at %d, metadata at %d", errDisagree, id, s.StartOffset, seg.StartOffset)
	}
	if _, err := b.apply(ctx, meta.SealSegment{ID: id, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum}); err != nil {
		return SealResponse{}, err
	}
	seg.Length, seg.ByteSize, seg.Checksum, seg.Sealed = s.Length, s.ByteSize, s.Checksum, true
	return SealResponse{Segment: seg}, nil
}

// LoadRequest is the body of POST /v1/load: create, write and seal
// Segments segments named Prefix-NNNNN (Prefix NNNNN when Prefix ends in
// "-"), numbered from First; without First (absent or 0), from one past
// the highest number any segment of that prefix has, so that a second
// load makes new ids instead of failing with segment_exists (two loads of
// one prefix at the same moment may still collide: one fails).
type LoadRequest struct {
	Segments          int    `json:"segments"`
	RecordsPerSegment int    `json:"records_per_segment"`
	RecordSize        int    `json:"record_size"`
	Prefix            string `json:"prefix"`
	Concurrency       int    `json:"concurrency,omitempty"`
	First             int    `json:"first,omitempty"`
}

// LoadResponse reports a load.
type LoadResponse struct {
	Segments int `json:"segments"`
	// First and Last are the ids of the first and last segment made.
	First   meta.SegmentID `json:"first"`
	Last    meta.SegmentID `json:"last"`
	Bytes   int64          `json:"bytes"`
	Seconds float64        `json:"seconds"`
}

// parseLoad decodes and checks the body of POST /v1/load, filling in the
// defaults; every segment id it names is valid.
func parseLoad(body []byte) (LoadRequest, error) {
	req := LoadRequest{Segments: 1, RecordsPerSegment: 256, RecordSize: 4096, Prefix: "s"}
	if err := decodeJSON(body, &req); err != nil {
		return LoadRequest{}, err
	}
	if req.Segments < 1 || req.Segments > 1_000_000 {
		return LoadRequest{}, fmt.Errorf("%w: segments = %d: want 1 to 1000000", errBadRequest, req.Segments)
	}
	if req.RecordsPerSegment < 1 || req.RecordsPerSegment > 1<<20 {
		return LoadRequest{}, fmt.Errorf("%w: records_per_segment = %d: want 1 to %d", errBadRequest, req.RecordsPerSegment, 1<<20)
	}
	if req.RecordSize < 0 || req.RecordSize > 16<<20 {
		return LoadRequest{}, fmt.Errorf("%w: record_size = %d: want 0 to %d", errBadRequest, req.RecordSize, 16<<20)
	}
	if req.First < 0 || req.First > math.MaxInt32 {
		return LoadRequest{}, fmt.Errorf("%w: first = %d: want 0 to %d", errBadRequest, req.First, math.MaxInt32)
	}
	if req.Concurrency < 0 || req.Concurrency > 1024 {
		return LoadRequest{}, fmt.Errorf("%w: concurrency = %d: want 0 (8) to 1024", errBadRequest, req.Concurrency)
	}
	if req.Concurrency == 0 {
		req.Concurrency = 8
	}
	// Only the digits differ between the ids: the first and the last
	// (the longest) stand for all.
	for _, n := range []int{req.First, req.First + req.Segments - 1} {
		if err := loadID(req.Prefix, n).Validate(); err != nil {
			return LoadRequest{}, fmt.Errorf("%w: prefix = %q: %w", errBadRequest, req.Prefix, err)
		}
	}
	return req, nil
}

// loadID is the id of the n-th segment of a load: prefix, one "-" (none
// when prefix ends in one), then n in five digits or more.
func loadID(prefix string, n int) meta.SegmentID {
	if !strings.HasSuffix(prefix, "-") {
		prefix += "-"
	}
	return meta.SegmentID(fmt.Sprintf("%s%05d", prefix, n))
}

// nextLoadNumber is one past the highest n of any segment in v named
// loadID(prefix, n), 0 when there is none. O(log segments + those of the
// prefix): ids are in order in v.
func nextLoadNumber(v *meta.View, prefix string) int {
	head := string(loadID(prefix, 0))
	head = head[:len(head)-5]
	next := 0
	i, _ := v.Find(meta.SegmentID(head))
	for ; i < v.Len(); i++ {
		rest, ok := strings.CutPrefix(string(v.At(i).ID), head)
		if !ok {
			break
		}
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 && len(rest) >= 5 && n >= next {
			next = n + 1
		}
	}
	return next
}

func (b *broker) load(r *http.Request, body []byte) (any, error) {
	req, err := parseLoad(body)
	if err != nil {
		return nil, err
	}
	if req.First == 0 {
		req.First = nextLoadNumber(b.node.View(), req.Prefix)
		if err := loadID(req.Prefix, req.First+req.Segments-1).Validate(); err != nil {
			return nil, fmt.Errorf("%w: prefix = %q from number %d: %w", errBadRequest, req.Prefix, req.First, err)
		}
	}
	start := time.Now()
	var mu sync.Mutex
	var total int64
	g, ctx := errgroup.WithContext(r.Context())
	g.SetLimit(req.Concurrency)
	for i := 0; i < req.Segments; i++ {
		id := loadID(req.Prefix, req.First+i)
		g.Go(func() error {
			if _, err := b.create(ctx, CreateRequest{ID: id}); err != nil {
				return err
			}
			rr := RecordsRequest{Count: req.RecordsPerSegment, Size: req.RecordSize, Seed: uint64(req.First + i + 1)}
			if _, err := b.append(ctx, id, rr); err != nil {
				return err
			}
			s, err := b.seal(ctx, id)
			if err != nil {
				return err
			}
			mu.Lock()
			total += s.Segment.ByteSize
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return LoadResponse{Segments: req.Segments, First: loadID(req.Prefix, req.First), Last: loadID(req.Prefix, req.First+req.Segments-1), Bytes: total, Seconds: time.Since(start).Seconds()}, nil
}

// ---- internal copy operations, on the replica ----

type copyCreate struct {
	StartOffset uint64 `json:"start_offset"`
}

type sealResult struct {
	StartOffset uint64        `json:"start_offset"`
	Length      uint64        `json:"length"`
	ByteSize    int64         `json:"byte_size"`
	Checksum    meta.Checksum `json:"checksum"`
}

func (b *broker) internalCreate(r *http.Request, body []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	var req copyCreate
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if err := b.db.Create(id, req.StartOffset); err != nil {
		// A retried create: an empty copy at the same start offset is it.
		if errors.Is(err, store.ErrExists) {
			if end, eerr := b.db.DurableEnd(id); eerr == nil && end.Frames == 0 && !end.Footer && (end.NextOffset == req.StartOffset || end.NextOffset == 0) {
				return struct{}{}, nil
			}
		}
		return nil, err
	}
	return struct{}{}, nil
}

func (b *broker) internalAppend(r *http.Request, body []byte) (any, error) {
	id, req, err := parseRecords(r.PathValue("id"), body)
	if err != nil {
		return nil, err
	}
	var next uint64
	n := 0
	err = req.payloads(func(p []byte) error {
		off, err := b.db.Append(id, p)
		next, n = off+1, n+1
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := b.db.Sync(id); err != nil {
		return nil, err
	}
	if n == 0 {
		end, err := b.db.DurableEnd(id)
		if err != nil {
			return nil, err
		}
		next = end.NextOffset
	}
	return AppendResponse{NextOffset: next, Records: n}, nil
}

func (b *broker) internalSeal(r *http.Request, body []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if err := decodeJSON(body, &struct{}{}); err != nil {
		return nil, err
	}
	s, err := b.db.Seal(id)
	if err != nil {
		return nil, err
	}
	return sealResult{StartOffset: s.StartOffset, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum}, nil
}

// ---- inspection, status and faults ----

// Copy is one local copy in GET /v1/copies.
type Copy struct {
	ID      meta.SegmentID `json:"id"`
	Size    int64          `json:"size"`
	Latched bool           `json:"latched"`
	Sealed  bool           `json:"sealed"`
	// LatchError is the error that latched the copy (store.DB.LatchErr).
	LatchError string `json:"latch_error,omitempty"`
}

func (b *broker) copies(r *http.Request, _ []byte) (any, error) {
	out := []Copy{}
	for _, id := range b.db.List() {
		c := Copy{ID: id}
		if err := b.db.LatchErr(id); err != nil {
			c.Latched, c.LatchError = true, err.Error()
		}
		if t, err := b.db.Tail(id); err == nil {
			c.Size, c.Sealed = t.Size, t.Footer
		}
		out = append(out, c)
	}
	return out, nil
}

func (b *broker) status(r *http.Request, _ []byte) (any, error) {
	if b.heal == nil {
		return map[string]string{"heal": "disabled"}, nil
	}
	return b.heal.Status(), nil
}

// passes answers this broker's pass history (plugin.PassHistory): the
// heal passes it ran as the coordinator after ?since=N, at most ?limit.
// Every broker answers its own; the leader's is the current one.
func (b *broker) passes(r *http.Request, _ []byte) (any, error) {
	if b.heal == nil {
		return nil, fmt.Errorf("%w: heal is disabled on broker %d", errNotFound, b.self)
	}
	since, limit, err := plugin.ParsePassQuery(r.URL.Query())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return b.heal.Passes(since, limit), nil
}

// release lifts a mass-failure hold on the coordinator: here when this
// broker runs it, else on the leader.
func (b *broker) release(r *http.Request, _ []byte) (any, error) {
	return b.onCoordinator(r, "/v1/internal/heal/release", b.healRelease, map[string]any{"released": true, "broker": b.self})
}

// acknowledge marks a lost segment acknowledged by an operator: the
// reports keep it, marked so.
func (b *broker) acknowledge(r *http.Request, _ []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	ack := func() error {
		err := b.heal.Acknowledge(id)
		switch {
		case errors.Is(err, heal.ErrInvalid):
			return fmt.Errorf("%w: %v", errBadRequest, err)
		case errors.Is(err, heal.ErrNotLost):
			return fmt.Errorf("%w: %v", errNotFound, err)
		}
		return err
	}
	return b.onCoordinator(r, "/v1/internal/heal/acknowledge/"+string(id), ack, map[string]any{"acknowledged": id, "broker": b.self})
}

func (b *broker) healRelease() error { return b.heal.Release() }

// onCoordinator runs fn here when this broker runs the coordinator, else
// posts path to the leader's admin API (onLeader) and returns its answer.
func (b *broker) onCoordinator(r *http.Request, path string, fn func() error, ok any) (any, error) {
	if b.heal == nil {
		return nil, fmt.Errorf("%w: heal is disabled on broker %d", errNotFound, b.self)
	}
	var out map[string]any
	served := false
	err := b.onLeader(r.Context(), leaderRequest{
		what: "POST " + path, method: http.MethodPost, path: path, req: struct{}{}, resp: &out,
		here: func() (bool, error) {
			var err error
			served, err = b.coordinatorHere(fn())
			return served, err
		},
	})
	switch {
	case err != nil:
		return nil, err
	case served:
		return ok, nil
	}
	return out, nil
}

// coordinatorHere says what err, from a call to the coordinator, means
// for its request: served is false when the coordinator does not run here
// (plugin.ErrNotCoordinator) and another broker leads, which serves it; a
// leader whose coordinator has not started answers errNoLeader.
func (b *broker) coordinatorHere(err error) (served bool, _ error) {
	switch {
	case !errors.Is(err, plugin.ErrNotCoordinator):
		return true, err
	case b.node.IsLeader():
		return true, fmt.Errorf("%w: %v", errNoLeader, err)
	}
	return false, nil
}

// plan answers the dry run of the next heal pass (heal.Plan as JSON),
// computed by the coordinator: here when this broker leads, else by the
// leader (onLeader).
func (b *broker) plan(r *http.Request, _ []byte) (any, error) {
	if b.heal == nil {
		return nil, fmt.Errorf("%w: heal is disabled on broker %d", errNotFound, b.self)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var here heal.Plan
	var out json.RawMessage
	served := false
	err := b.onLeader(ctx, leaderRequest{
		what: "plan", method: http.MethodGet, path: "/v1/internal/plan", resp: &out,
		here: func() (bool, error) {
			var err error
			here, err = b.heal.DryRun(ctx)
			served, err = b.coordinatorHere(err)
			return served, err
		},
	})
	switch {
	case err != nil:
		return nil, err
	case served:
		return here, nil
	}
	return out, nil
}

// faultKinds are the faults POST /v1/faults/{kind}/{id} injects: only
// the latch, which needs the store to see an I/O error. Every fault done
// to a copy's file (delete, truncate, extend, bit flip) is done by the
// test harness (testbed/harness) on the file itself.
var faultKinds = []string{"latch"}

// parseFault checks the path of POST /v1/faults/{kind}/{id}; the body
// must be empty or {}.
func parseFault(kind, pathID string, body []byte) (string, meta.SegmentID, error) {
	if !slices.Contains(faultKinds, kind) {
		return "", "", fmt.Errorf("%w: fault %q: want latch (file faults are done by the test harness)", errBadRequest, kind)
	}
	id, err := parseSegmentID(pathID)
	if err != nil {
		return "", "", err
	}
	var req struct{}
	if err := decodeJSON(body, &req); err != nil {
		return "", "", err
	}
	return kind, id, nil
}

// fault latches a local copy: its next I/O fails as a failing disk's
// would (fault_injection only).
func (b *broker) fault(r *http.Request, body []byte) (any, error) {
	kind, id, err := parseFault(r.PathValue("kind"), r.PathValue("id"), body)
	if err != nil {
		return nil, err
	}
	path := b.db.Path(id)
	if _, serr := os.Stat(path); serr != nil {
		return nil, fmt.Errorf("%w: copy %s: %v", errNotFound, id, serr)
	}
	b.faults.arm(path)
	_, _ = b.db.DurableEnd(id)
	if b.db.LatchErr(id) == nil {
		return nil, fmt.Errorf("malachid: latch %s: the copy did not latch", id)
	}
	b.log.Warn().Str("fault", kind).Str("segment", string(id)).Msg("fault injected")
	return map[string]string{"fault": kind, "segment": string(id)}, nil
}
