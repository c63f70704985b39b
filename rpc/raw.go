package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// GetRaw sends GET path to addr, as Call does (the same certificate, the
// same checks of the server), and returns the answer's body as served, for
// what is not JSON: the plugin's /metrics, a Prometheus text exposition.
// The body is bounded as Call bounds an answer. Failures are Call's: a
// refusal or an error answer wraps the sentinel its code names, an answer
// without a code (a 404 of an unknown path) wraps ErrRemote with its HTTP
// status, a connection failure wraps the dialer's error.
func (c *Client) GetRaw(ctx context.Context, addr, path string) ([]byte, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+"://"+addr+path, nil)
	if err != nil {
		return nil, fmt.Errorf("rpc: GET %s: %w", path, err)
	}
	res, err := c.hc.Do(r)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rpc: GET %s at %s: %w", path, addr, ctx.Err())
		}
		return nil, fmt.Errorf("rpc: GET %s at %s: %w", path, addr, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(io.LimitReader(res.Body, c.maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("rpc: GET %s at %s: reading answer: %w", path, addr, err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, c.answerError(http.MethodGet, addr, path, res.StatusCode, out)
	}
	return out, nil
}

// answerError decodes a failed answer: the error its code names, or
// ErrRemote with the HTTP status and the start of the body.
func (c *Client) answerError(method, addr, path string, status int, body []byte) error {
	var we wireError
	if json.Unmarshal(body, &we) != nil || we.Code == "" {
		return fmt.Errorf("%w: %s %s at %s: HTTP %d: %.200s", ErrRemote, method, path, addr, status, body)
	}
	return c.codes.Decode(we.Code, we.Message)
}
