package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// Errors of the admin client. Match with errors.Is.
var (
	// errUnreachable: the broker's admin address did not answer.
	errUnreachable = errors.New("malachi: broker unreachable")
	// errAdmin: the broker answered with an error status.
	errAdmin = errors.New("malachi: admin request refused")
)

// adminClient talks to one broker's admin API (MALACHID_API.md).
type adminClient struct {
	addr string // host:port
	http *http.Client
}

func newAdminClient(addr string, timeout time.Duration) *adminClient {
	return &adminClient{addr: addr, http: &http.Client{Timeout: timeout}}
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

func (c *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	u := url.URL{Scheme: "http", Host: c.addr, Path: path}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return fmt.Errorf("broker %s: %s %s: %w", c.addr, method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("broker %s: %s %s: %w", c.addr, method, path, ctx.Err())
		}
		return fmt.Errorf("%w: broker %s: %s %s: %v", errUnreachable, c.addr, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("%w: broker %s: %s %s: reading the answer: %v", errUnreachable, c.addr, method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(data))
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		return fmt.Errorf("%w: broker %s: %s %s: %s: %s", errAdmin, c.addr, method, path, resp.Status, msg)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = append((*raw)[:0], data...)
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("broker %s: %s %s: decoding the answer: %w", c.addr, method, path, err)
	}
	return nil
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

func (c *adminClient) Load(ctx context.Context, req loadRequest) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodPost, "/v1/load", req, &raw)
	return raw, err
}

func (c *adminClient) Latch(ctx context.Context, id meta.SegmentID) error {
	return c.do(ctx, http.MethodPost, "/v1/faults/latch/"+url.PathEscape(string(id)), nil, nil)
}

// Get fetches any admin path raw (for endpoints the contract may add).
func (c *adminClient) Get(ctx context.Context, path string) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, path, nil, &raw)
	return raw, err
}
