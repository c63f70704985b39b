package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

// Client calls Servers. Safe for concurrent use.
type Client struct {
	hc     *http.Client
	scheme string
	codes  Codes
	// MaxAnswer bounds an answer's body.
	maxAnswer int64
}

// NewClient returns a client presenting certs (nil: plaintext, for
// insecure mode) that decodes errors with codes. timeout bounds each call
// as a whole (0: only the caller's context does).
func NewClient(certs *pki.Certs, codes Codes, timeout time.Duration) *Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
	}
	c := &Client{hc: &http.Client{Transport: tr, Timeout: timeout}, scheme: "http", codes: codes, maxAnswer: 256 << 20}
	if certs != nil {
		tr.TLSClientConfig = certs.ClientConfig()
		c.scheme = "https"
	}
	return c
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Raw is a request body Call sends as it is, with Content-Type
// application/octet-stream, instead of encoding it as JSON: bulk bytes (a
// frame's payload) that JSON would carry as base64. The handler reads it
// from Request.Body.
type Raw []byte

// RawContentType is the Content-Type of a Raw body.
const RawContentType = "application/octet-stream"

// Call sends method path to addr with req as its JSON body (nil: no body;
// a Raw: its bytes as they are) and decodes the answer into resp (nil: discarded). A refusal comes back
// wrapping the sentinel its code names; a connection failure wraps the
// dialer's error.
func (c *Client) Call(ctx context.Context, method, addr, path string, req, resp any) error {
	return c.call(ctx, 0, method, addr, path, req, resp)
}

// CallBroker is Call to broker id: the server's certificate must name id.
func (c *Client) CallBroker(ctx context.Context, id meta.BrokerID, method, addr, path string, req, resp any) error {
	return c.call(ctx, id, method, addr, path, req, resp)
}

// ErrWrongPeer: the server's certificate names another broker than the
// one called.
var ErrWrongPeer = errors.New("rpc: wrong peer")

func (c *Client) call(ctx context.Context, want meta.BrokerID, method, addr, path string, req, resp any) error {
	var body io.Reader
	ctype := "application/json"
	if raw, ok := req.(Raw); ok {
		body, ctype = bytes.NewReader(raw), RawContentType
	} else if req != nil {
		b, err := json.Marshal(req)
		if err != nil {
			return fmt.Errorf("rpc: %s %s: encode: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	r, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+addr+path, body)
	if err != nil {
		return fmt.Errorf("rpc: %s %s: %w", method, path, err)
	}
	if req != nil {
		r.Header.Set("Content-Type", ctype)
	}
	res, err := c.hc.Do(r)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("rpc: %s %s at %s: %w", method, path, addr, ctx.Err())
		}
		return fmt.Errorf("rpc: %s %s at %s: %w", method, path, addr, err)
	}
	defer res.Body.Close()
	if want != 0 && res.TLS != nil && len(res.TLS.PeerCertificates) > 0 {
		id, err := pki.IdentityOf(res.TLS.PeerCertificates[0])
		if err != nil || id.Role != pki.RoleBroker || id.Broker != want {
			return fmt.Errorf("%w: %s answered for broker %d with the certificate of %s", ErrWrongPeer, addr, want, id)
		}
	}
	out, err := io.ReadAll(io.LimitReader(res.Body, c.maxAnswer))
	if err != nil {
		return fmt.Errorf("rpc: %s %s at %s: reading answer: %w", method, path, addr, err)
	}
	if res.StatusCode != http.StatusOK {
		return c.answerError(method, addr, path, res.StatusCode, out)
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(out, resp); err != nil {
		return fmt.Errorf("%w: %s %s at %s: decoding answer: %v", ErrRemote, method, path, addr, err)
	}
	return nil
}

// IsUnauthenticated reports whether err is a refusal of credentials, or a
// TLS handshake that failed on a certificate (either side's), as opposed
// to an unreachable peer.
func IsUnauthenticated(err error) bool {
	return errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrForbidden) || errors.Is(err, pki.ErrUntrusted) || errors.Is(err, ErrWrongPeer)
}
