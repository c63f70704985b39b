package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/rpc"
)

// Errors of the admin client. Match with errors.Is.
var (
	// ErrUnreachable: the broker's address did not answer (no connection,
	// no answer in time).
	ErrUnreachable = errors.New("malachi: broker unreachable")
	// ErrRefused: the broker answered with an error, refused the CLI's
	// certificate (or its role), or presented one the CLI does not trust.
	// The error also wraps rpc's sentinel (rpc.ErrUnauthenticated,
	// rpc.ErrForbidden, rpc.ErrBadRequest, rpc.ErrRemote) or this package's
	// ErrUnavailable.
	ErrRefused = errors.New("malachi: admin request refused")
	// ErrUnavailable: the broker cannot serve the request now (no leader,
	// a leader change, a deadline on its side: HTTP 503); a retry may
	// succeed. Always wrapped with ErrRefused, whose text names the
	// command: its own has no prefix.
	ErrUnavailable = errors.New("broker unavailable (no leader, no quorum, or a leader change)")
)

// Codes decodes the admin API's error codes the CLI acts on
// (package broker's table, routes.go); other codes decode to rpc.ErrRemote with their
// name. They come before rpc's own, so a remote deadline is a retryable
// ErrUnavailable here, not the caller's context.DeadlineExceeded.
var Codes = rpc.Codes{
	{Name: "not_leader", Status: http.StatusServiceUnavailable, Err: ErrUnavailable},
	{Name: "no_leader", Status: http.StatusServiceUnavailable, Err: ErrUnavailable},
	{Name: "no_quorum", Status: http.StatusServiceUnavailable, Err: ErrUnavailable},
	{Name: "leadership_lost", Status: http.StatusServiceUnavailable, Err: ErrUnavailable},
	{Name: "deadline", Status: http.StatusServiceUnavailable, Err: ErrUnavailable},
	{Name: "canceled", Status: http.StatusServiceUnavailable, Err: ErrUnavailable},
}

// Client talks to one broker's admin API (the routes package broker's doc.go lists), or to a
// plugin's rpc_listen for GetRaw, through the one RPC layer (rpc).
type Client struct {
	addr string // host:port
	rpc  *rpc.Client
	// insecure: rc speaks plaintext without a certificate.
	insecure bool
}

// New returns a client of addr over rc; insecure says rc was
// made without certificates (it only shapes error messages).
func New(addr string, rc *rpc.Client, insecure bool) *Client {
	return &Client{addr: addr, rpc: rc, insecure: insecure}
}

// do sends method path with body (nil: none) and decodes the answer into
// out (nil: discarded; a *json.RawMessage takes it as served). Errors wrap
// ErrUnreachable or ErrRefused (see them) and name the broker and request.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	return c.classify(ctx, method, path, c.rpc.Call(ctx, method, c.addr, path, body, out))
}

// Call sends method path with body (nil: none) to the broker and decodes
// the answer into out (nil: discarded), for the routes without a method
// of their own here. Errors are as do's.
func (c *Client) Call(ctx context.Context, method, path string, body, out any) error {
	return c.do(ctx, method, path, body, out)
}

// Addr is the host:port the client calls.
func (c *Client) Addr() string { return c.addr }

// GetRaw fetches path as served (not JSON: a plugin's /metrics).
func (c *Client) GetRaw(ctx context.Context, path string) ([]byte, error) {
	b, err := c.rpc.GetRaw(ctx, c.addr, path)
	return b, c.classify(ctx, http.MethodGet, path, err)
}

// classify wraps an rpc error into the CLI's sentinels with the broker and
// request named, and a hint where the cause is a mode mismatch (a
// plaintext broker asked over TLS).
func (c *Client) classify(ctx context.Context, method, path string, err error) error {
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("broker %s: %s %s", c.addr, method, path)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", where, ctx.Err())
	case errors.Is(err, rpc.ErrForbidden):
		return fmt.Errorf("%w: %s: refused the certificate's role (--user chooses the client certificate): %w", ErrRefused, where, err)
	case errors.Is(err, rpc.ErrUnauthenticated):
		return fmt.Errorf("%w: %s: refused the CLI's credentials: %w", ErrRefused, where, err)
	case errors.Is(err, pki.ErrUntrusted), errors.Is(err, rpc.ErrWrongPeer):
		return fmt.Errorf("%w: %s: the broker's certificate is not trusted by --certs-dir: %w", ErrRefused, where, err)
	case errors.Is(err, http.ErrSchemeMismatch):
		return fmt.Errorf("%w: %s: the broker speaks plaintext (insecure = true): ask it with --insecure: %w", ErrRefused, where, err)
	case errors.Is(err, rpc.ErrRemote), errors.Is(err, rpc.ErrBadRequest), errors.Is(err, ErrUnavailable):
		return fmt.Errorf("%w: %s: %w", ErrRefused, where, err)
	}
	var ue *url.Error
	if errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, where, err)
	}
	return fmt.Errorf("%s: %w", where, err) // the answer could not be decoded
}

func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodGet, "/v1/health", nil, &h)
	return h, err
}

func (c *Client) Metadata(ctx context.Context) (meta.Snapshot, error) {
	var s meta.Snapshot
	err := c.do(ctx, http.MethodGet, "/v1/metadata", nil, &s)
	return s, err
}

func (c *Client) Copies(ctx context.Context) ([]Copy, error) {
	var cs []Copy
	err := c.do(ctx, http.MethodGet, "/v1/copies", nil, &cs)
	return cs, err
}

// Status returns the plugin's /status JSON as the broker served it.
func (c *Client) Status(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &raw)
	return raw, err
}

// Passes returns the broker's pass history after pass since (at most
// limit passes; 0: the broker's default): the heal passes it ran as the
// coordinator, oldest first.
func (c *Client) Passes(ctx context.Context, since uint64, limit int) (plugin.PassHistory, error) {
	q := url.Values{"since": {strconv.FormatUint(since, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var h plugin.PassHistory
	err := c.do(ctx, http.MethodGet, "/v1/passes?"+q.Encode(), nil, &h)
	return h, err
}

// Plan returns the dry run of the next heal pass as the broker served it
// (any broker forwards it to the leader).
func (c *Client) Plan(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, "/v1/plan", nil, &raw)
	return raw, err
}

func (c *Client) Load(ctx context.Context, req LoadRequest) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodPost, "/v1/load", req, &raw)
	return raw, err
}

// Release lifts a mass-failure hold for the next heal pass.
func (c *Client) Release(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/heal/release", struct{}{}, nil)
}

// Acknowledge marks segment id's reported loss as seen by an operator.
func (c *Client) Acknowledge(ctx context.Context, id meta.SegmentID) error {
	return c.do(ctx, http.MethodPost, "/v1/heal/acknowledge/"+url.PathEscape(string(id)), struct{}{}, nil)
}

// Latch has the broker's store fail its next I/O on its copy of segment
// id, as a failing disk would: the copy latches (fault_injection only).
// It is the one fault a broker injects itself; every other fault is done
// to the copy's file by testbed/harness.
func (c *Client) Latch(ctx context.Context, id meta.SegmentID) error {
	return c.do(ctx, http.MethodPost, "/v1/faults/latch/"+url.PathEscape(string(id)), nil, nil)
}
