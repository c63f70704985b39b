package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
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
	ErrRemote = errors.New("plugin: remote error")
	// ErrLagging: the broker's metadata did not reach the requested index
	// in time.
	ErrLagging = errors.New("plugin: metadata lagging")
	// ErrClosed: the plugin was stopped.
	ErrClosed = errors.New("plugin: stopped")
)

// errCodes maps the sentinels that cross the wire to their codes.
var errCodes = []struct {
	code string
	err  error
}{
	{"unauthenticated", ErrUnauthenticated},
	{"source_refused", heal.ErrSourceRefused},
	{"seal_conflict", store.ErrSealConflict},
	{"lagging", ErrLagging},
	{"latched", store.ErrLatched},
	{"unknown_copy", store.ErrUnknownCopy},
	{"short", store.ErrShort},
	{"corrupt", store.ErrCorrupt},
	{"not_sealed", store.ErrNotSealed},
	{"sealed", store.ErrSealed},
	{"busy", store.ErrBusy},
	{"store_closed", store.ErrClosed},
	{"invalid", store.ErrInvalid},
	{"invalid", meta.ErrInvalid},
	{"unknown_segment", meta.ErrUnknownSegment},
	{"stale_replicas", meta.ErrStaleReplicas},
	{"deadline", context.DeadlineExceeded},
	{"canceled", context.Canceled},
	{"stopped", ErrClosed},
}

// wireError is the body of a failed RPC.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func codeOf(err error) string {
	for _, c := range errCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "internal"
}

func errOf(code string) error {
	for _, c := range errCodes {
		if c.code == code {
			return c.err
		}
	}
	return ErrRemote
}

// maxBody bounds an RPC request or response body.
const maxBody = 64 << 20

// handler is one RPC: it decodes its own request from body.
type handler func(ctx context.Context, body []byte) (any, error)

// rpcHandler wraps h with authentication, body limits and error encoding.
func rpcHandler(secret []byte, now func() time.Time, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%w: reading body: %v", store.ErrInvalid, err))
			return
		}
		if err := verify(r, secret, now(), body); err != nil {
			writeErr(w, http.StatusUnauthorized, err)
			return
		}
		resp, err := h(r.Context(), body)
		if err != nil {
			status := http.StatusInternalServerError
			switch codeOf(err) {
			case "invalid":
				status = http.StatusBadRequest
			case "unknown_copy", "unknown_segment":
				status = http.StatusNotFound
			case "latched", "short", "corrupt", "not_sealed", "sealed", "busy", "stale_replicas", "source_refused", "seal_conflict":
				status = http.StatusConflict
			case "lagging", "deadline", "canceled", "stopped", "store_closed":
				status = http.StatusServiceUnavailable
			}
			writeErr(w, status, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}
}

func writeErr(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(wireError{Code: codeOf(err), Message: err.Error()})
}

// decode parses an RPC request strictly: one JSON object, no unknown
// fields, nothing after it. The error wraps store.ErrInvalid.
func decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: request: empty body, want a JSON object", store.ErrInvalid)
		}
		return fmt.Errorf("%w: request: %v", store.ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: request: data after the JSON object at byte %d", store.ErrInvalid, dec.InputOffset())
	}
	return nil
}

// call posts req to path on addr, signed with secret, and decodes the
// answer into resp. A remote failure comes back wrapping the sentinel its
// code names (or ErrRemote), with the broker and the remote message.
func call(ctx context.Context, hc *http.Client, secret []byte, broker meta.BrokerID, addr, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("plugin: %s to broker %d: encode: %w", path, broker, err)
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("plugin: %s to broker %d: %w", path, broker, err)
	}
	r.Header.Set("Content-Type", "application/json")
	sign(r, secret, time.Now(), body)
	res, err := hc.Do(r)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("plugin: %s to broker %d at %s: %w", path, broker, addr, ctx.Err())
		}
		return fmt.Errorf("plugin: %s to broker %d at %s: %w", path, broker, addr, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		return fmt.Errorf("plugin: %s to broker %d at %s: reading answer: %w", path, broker, addr, err)
	}
	if res.StatusCode != http.StatusOK {
		var we wireError
		if json.Unmarshal(b, &we) != nil || we.Code == "" {
			return fmt.Errorf("%w: %s to broker %d at %s: HTTP %d: %.200s", ErrRemote, path, broker, addr, res.StatusCode, b)
		}
		return fmt.Errorf("%w: %s to broker %d: %s", errOf(we.Code), path, broker, we.Message)
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(b, resp); err != nil {
		return fmt.Errorf("%w: %s to broker %d: decoding answer: %v", ErrRemote, path, broker, err)
	}
	return nil
}
