package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/malachi-log/malachi/cluster"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/store"
)

// The admin API's routes (who may call each: rpc.Viewers, Operators,
// Brokers), its error codes on the wire, and the strict decoding every
// request body and path id goes through before anything is touched.

// Errors of the admin API, by HTTP status and code.
var (
	errBadRequest = errors.New("malachid: bad request")
	errNoLeader   = errors.New("malachid: no leader reachable")
	errDisagree   = errors.New("malachid: replicas disagree")
	errNotFound   = errors.New("malachid: not found")
	errFenced     = errors.New("malachid: copy fenced for a takeover's seal")
)

// adminCodes are the admin API's errors on the wire (package rpc adds its
// own: unauthenticated, forbidden, bad_request, deadline, canceled).
var adminCodes = rpc.Codes{
	{Name: "bad_request", Status: http.StatusBadRequest, Err: errBadRequest},
	{Name: "invalid", Status: http.StatusBadRequest, Err: meta.ErrInvalid},
	{Name: "invalid", Status: http.StatusBadRequest, Err: store.ErrInvalid},
	{Name: "not_found", Status: http.StatusNotFound, Err: errNotFound},
	{Name: "fault_injection_off", Status: http.StatusForbidden, Err: errFaultInjectionOff},
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
	{Name: "fenced", Status: http.StatusConflict, Err: errFenced},
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
func (b *Server) routes() http.Handler {
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
	// Always routed, so that a broker without fault_injection says so.
	srv.Handle(mux, "POST /v1/faults/hold-produce/{topic}/{partition}", rpc.Operators, adapt(b.armHold))
	srv.Handle(mux, "GET /v1/faults/hold-produce/{topic}/{partition}", rpc.Operators, adapt(b.waitHold))
	return mux
}

func adapt(h adminHandler) rpc.Handler {
	return func(_ context.Context, r *rpc.Request) (any, error) { return h(r.HTTP, r.Body) }
}
