package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/store"
)

// Errors a client returns besides the store's sentinels, which cross the
// wire by code (see errCodes) so that errors.Is(err, store.ErrLatched)
// works on the caller's side.
var (
	// ErrUnknownBroker: the metadata names no control address for the
	// broker (not registered, or its plugin is disabled).
	ErrUnknownBroker = errors.New("plugin: unknown broker")
	// ErrRemote: the remote instance failed the request for a reason that
	// has no sentinel of its own.
	ErrRemote = rpc.ErrRemote
	// ErrUnauthenticated: the request or its answer carried no
	// certificate the cluster CA vouches for, or a role that may not call
	// the RPC (rpc.ErrForbidden also matches rpc.IsUnauthenticated).
	ErrUnauthenticated = rpc.ErrUnauthenticated
	// ErrLagging: the broker's metadata did not reach the requested index
	// in time. It wraps heal.ErrBehind: the coordinator counts a broker
	// that answers it seen, not dead.
	ErrLagging = fmt.Errorf("plugin: metadata lagging: %w", heal.ErrBehind)
	// ErrClosed: the plugin was stopped.
	ErrClosed = errors.New("plugin: stopped")
)

// errCodes maps the sentinels that cross the wire to their codes and HTTP
// statuses (package rpc adds unauthenticated, forbidden, bad_request,
// deadline and canceled).
var errCodes = rpc.Codes{
	{Name: "source_refused", Status: http.StatusConflict, Err: heal.ErrSourceRefused},
	{Name: "seal_conflict", Status: http.StatusConflict, Err: store.ErrSealConflict},
	{Name: "no_durable_end", Status: http.StatusConflict, Err: heal.ErrNoDurableEnd},
	{Name: "lagging", Status: http.StatusServiceUnavailable, Err: ErrLagging},
	{Name: "latched", Status: http.StatusConflict, Err: store.ErrLatched},
	{Name: "unknown_copy", Status: http.StatusNotFound, Err: store.ErrUnknownCopy},
	{Name: "short", Status: http.StatusConflict, Err: store.ErrShort},
	{Name: "corrupt", Status: http.StatusConflict, Err: store.ErrCorrupt},
	{Name: "not_sealed", Status: http.StatusConflict, Err: store.ErrNotSealed},
	{Name: "sealed", Status: http.StatusConflict, Err: store.ErrSealed},
	{Name: "busy", Status: http.StatusConflict, Err: store.ErrBusy},
	{Name: "store_closed", Status: http.StatusServiceUnavailable, Err: store.ErrClosed},
	{Name: "invalid", Status: http.StatusBadRequest, Err: store.ErrInvalid},
	{Name: "invalid", Status: http.StatusBadRequest, Err: meta.ErrInvalid},
	{Name: "unknown_segment", Status: http.StatusNotFound, Err: meta.ErrUnknownSegment},
	{Name: "stale_replicas", Status: http.StatusConflict, Err: meta.ErrStaleReplicas},
	{Name: "stopped", Status: http.StatusServiceUnavailable, Err: ErrClosed},
}

// maxBody bounds an RPC request or response body.
const maxBody = 64 << 20

// handler is one RPC: it decodes its own request from body.
type handler func(ctx context.Context, body []byte) (any, error)

// decode parses an RPC request strictly: one JSON object, no unknown
// fields, nothing after it. The error wraps store.ErrInvalid.
func decode(body []byte, v any) error {
	if err := rpc.Decode(body, v); err != nil {
		return fmt.Errorf("%w: request: %w", store.ErrInvalid, err)
	}
	return nil
}
