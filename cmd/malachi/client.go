package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/malachi-log/malachi/internal/rpc"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

// Errors of the admin client. Match with errors.Is.
var (
	// errUnreachable: the broker's address did not answer (no connection,
	// no answer in time).
	errUnreachable = errors.New("malachi: broker unreachable")
	// errAdmin: the broker answered with an error, refused the CLI's
	// certificate (or its role), or presented one the CLI does not trust.
	// The error also wraps rpc's sentinel (rpc.ErrUnauthenticated,
	// rpc.ErrForbidden, rpc.ErrBadRequest, rpc.ErrRemote) or the CLI's own
	// (errUnavailable).
	errAdmin = errors.New("malachi: admin request refused")
	// errUnavailable: the broker cannot serve the request now (no leader,
	// a leader change, a deadline on its side: HTTP 503); a retry may
	// succeed. Always wrapped with errAdmin.
	errUnavailable = errors.New("malachi: broker unavailable (no leader, or a leader change)")
)

// adminCodes decodes the admin API's error codes the CLI acts on
// (cmd/malachid's table); other codes decode to rpc.ErrRemote with their
// name. They come before rpc's own, so a remote deadline is a retryable
// errUnavailable here, not the caller's context.DeadlineExceeded.
var adminCodes = rpc.Codes{
	{Name: "not_leader", Status: http.StatusServiceUnavailable, Err: errUnavailable},
	{Name: "no_leader", Status: http.StatusServiceUnavailable, Err: errUnavailable},
	{Name: "leadership_lost", Status: http.StatusServiceUnavailable, Err: errUnavailable},
	{Name: "deadline", Status: http.StatusServiceUnavailable, Err: errUnavailable},
	{Name: "canceled", Status: http.StatusServiceUnavailable, Err: errUnavailable},
}

// adminClient talks to one broker's admin API (MALACHID_API.md), or to a
// plugin's rpc_listen for GetRaw, through the one RPC layer (internal/rpc).
type adminClient struct {
	addr string // host:port
	rpc  *rpc.Client
	// insecure: rc speaks plaintext without a certificate.
	insecure bool
}

// newAdminClient returns a client of addr over rc; insecure says rc was
// made without certificates (it only shapes error messages).
func newAdminClient(addr string, rc *rpc.Client, insecure bool) *adminClient {
	return &adminClient{addr: addr, rpc: rc, insecure: insecure}
}

// connFlags are the flags of every command that talks to a broker: who
// the CLI is to the cluster.
type connFlags struct {
	certsDir string
	user     string
	insecure bool
	fs       *flag.FlagSet
}

func addConnFlags(fs *flag.FlagSet) *connFlags {
	f := &connFlags{fs: fs}
	fs.StringVar(&f.certsDir, "certs-dir", defaultCertsDir(), "directory of ca.crt and client.NAME.crt/.key (env "+certsDirEnv+")")
	fs.StringVar(&f.user, "user", "", "client certificate NAME to present (client.NAME.crt; default: the only one in --certs-dir)")
	fs.BoolVar(&f.insecure, "insecure", false, "plaintext, no certificates: for a cluster run with insecure = true (loopback only)")
	return f
}

// client builds the RPC client the flags describe, each call bounded by
// timeout. Call it after the flags are parsed.
func (f *connFlags) client(cmd string, timeout time.Duration) (*rpc.Client, error) {
	if f.insecure {
		var given []string
		f.fs.Visit(func(fl *flag.Flag) {
			if fl.Name == "certs-dir" || fl.Name == "user" {
				given = append(given, "--"+fl.Name)
			}
		})
		if len(given) > 0 {
			return nil, usageErr("%s: --insecure uses no certificates: drop %s", cmd, given[0])
		}
		return rpc.NewClient(nil, adminCodes, timeout), nil
	}
	certs, err := pki.LoadClient(f.certsDir, f.user)
	if err != nil {
		return nil, fmt.Errorf("%s: --certs-dir %s: %w (a cluster in insecure mode takes --insecure instead)", cmd, f.certsDir, err)
	}
	return rpc.NewClient(certs, adminCodes, timeout), nil
}

// validateAddr checks a host:port flag value before anything is sent.
func validateAddr(flagName, addr string) error {
	if addr == "" {
		return fmt.Errorf("--%s is required (host:port of a broker's admin API)", flagName)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s %q: want host:port: %v", flagName, addr, err)
	}
	if host == "" || port == "" {
		return fmt.Errorf("--%s %q: want host:port with both parts", flagName, addr)
	}
	return nil
}

// health is GET /v1/health.
type health struct {
	ID       meta.BrokerID `json:"id"`
	Leader   meta.BrokerID `json:"leader"`
	IsLeader bool          `json:"is_leader"`
}

// localCopy is one row of GET /v1/copies: {id, size, latched, sealed}, and
// confirmed when the broker says whether it confirmed the copy (nil when
// the broker does not say).
type localCopy struct {
	ID        meta.SegmentID `json:"id"`
	Size      int64          `json:"size"`
	Latched   bool           `json:"latched"`
	Sealed    bool           `json:"sealed"`
	Confirmed *bool          `json:"confirmed,omitempty"`
}

// loadRequest is POST /v1/load.
type loadRequest struct {
	Segments          int    `json:"segments"`
	RecordsPerSegment int    `json:"records_per_segment"`
	RecordSize        int    `json:"record_size"`
	Prefix            string `json:"prefix,omitempty"`
	// First numbers the first segment: ids are Prefix-NNNNN from First.
	First int `json:"first,omitempty"`
	// Concurrency bounds the segments loaded at once (broker default 16).
	Concurrency int `json:"concurrency,omitempty"`
}

// do sends method path with body (nil: none) and decodes the answer into
// out (nil: discarded; a *json.RawMessage takes it as served). Errors wrap
// errUnreachable or errAdmin (see them) and name the broker and request.
func (c *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	return c.classify(ctx, method, path, c.rpc.Call(ctx, method, c.addr, path, body, out))
}

// GetRaw fetches path as served (not JSON: a plugin's /metrics).
func (c *adminClient) GetRaw(ctx context.Context, path string) ([]byte, error) {
	b, err := c.rpc.GetRaw(ctx, c.addr, path)
	return b, c.classify(ctx, http.MethodGet, path, err)
}

// classify wraps an rpc error into the CLI's sentinels with the broker and
// request named, and a hint where the cause is a mode mismatch (a
// plaintext broker asked over TLS).
func (c *adminClient) classify(ctx context.Context, method, path string, err error) error {
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("broker %s: %s %s", c.addr, method, path)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", where, ctx.Err())
	case errors.Is(err, rpc.ErrForbidden):
		return fmt.Errorf("%w: %s: refused the certificate's role (--user chooses the client certificate): %w", errAdmin, where, err)
	case errors.Is(err, rpc.ErrUnauthenticated):
		return fmt.Errorf("%w: %s: refused the CLI's credentials: %w", errAdmin, where, err)
	case errors.Is(err, pki.ErrUntrusted), errors.Is(err, rpc.ErrWrongPeer):
		return fmt.Errorf("%w: %s: the broker's certificate is not trusted by --certs-dir: %w", errAdmin, where, err)
	case errors.Is(err, http.ErrSchemeMismatch):
		return fmt.Errorf("%w: %s: the broker speaks plaintext (insecure = true): ask it with --insecure: %w", errAdmin, where, err)
	case errors.Is(err, rpc.ErrRemote), errors.Is(err, rpc.ErrBadRequest), errors.Is(err, errUnavailable):
		return fmt.Errorf("%w: %s: %w", errAdmin, where, err)
	}
	var ue *url.Error
	if errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: %w", errUnreachable, where, err)
	}
	return fmt.Errorf("%s: %w", where, err) // the answer could not be decoded
}

func (c *adminClient) Health(ctx context.Context) (health, error) {
	var h health
	err := c.do(ctx, http.MethodGet, "/v1/health", nil, &h)
	return h, err
}

func (c *adminClient) Metadata(ctx context.Context) (meta.Snapshot, error) {
	var s meta.Snapshot
	err := c.do(ctx, http.MethodGet, "/v1/metadata", nil, &s)
	return s, err
}

func (c *adminClient) Copies(ctx context.Context) ([]localCopy, error) {
	var cs []localCopy
	err := c.do(ctx, http.MethodGet, "/v1/copies", nil, &cs)
	return cs, err
}

// Status returns the plugin's /status JSON as the broker served it.
func (c *adminClient) Status(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &raw)
	return raw, err
}

// Plan returns the dry run of the next heal pass as the broker served it
// (any broker forwards it to the leader).
func (c *adminClient) Plan(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, "/v1/plan", nil, &raw)
	return raw, err
}

func (c *adminClient) Load(ctx context.Context, req loadRequest) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodPost, "/v1/load", req, &raw)
	return raw, err
}

// Release lifts a mass-failure hold for the next heal pass.
func (c *adminClient) Release(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/heal/release", struct{}{}, nil)
}

// Acknowledge marks segment id's reported loss as seen by an operator.
func (c *adminClient) Acknowledge(ctx context.Context, id meta.SegmentID) error {
	return c.do(ctx, http.MethodPost, "/v1/heal/acknowledge/"+url.PathEscape(string(id)), struct{}{}, nil)
}

func (c *adminClient) Latch(ctx context.Context, id meta.SegmentID) error {
	return c.do(ctx, http.MethodPost, "/v1/faults/latch/"+url.PathEscape(string(id)), nil, nil)
}
