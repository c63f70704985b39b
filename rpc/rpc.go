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
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/internal/ratelog"
	"github.com/malachi-log/malachi/pki"
)

// Errors of the layer itself. Every Codes table includes them.
var (
	// ErrUnauthenticated: the peer presented no certificate, or one the
	// cluster CA does not vouch for (HTTP 401).
	ErrUnauthenticated = errors.New("rpc: unauthenticated")
	// ErrForbidden: the peer's certificate is valid but its role may not
	// call the route (HTTP 403).
	ErrForbidden = errors.New("rpc: forbidden")
	// ErrBadRequest: the request is malformed (HTTP 400).
	ErrBadRequest = errors.New("rpc: bad request")
	// ErrRemote: the remote failed for a reason with no code of its own.
	ErrRemote = errors.New("rpc: remote error")
)

// Code maps a sentinel to its wire name and HTTP status.
type Code struct {
	Name   string
	Status int
	Err    error
}

// Codes is a table of codes; the first entry an error matches names it,
// and a name decodes to the first entry with that name.
type Codes []Code

// base are the codes of the layer, appended to every table.
var base = Codes{
	{"unauthenticated", http.StatusUnauthorized, ErrUnauthenticated},
	{"forbidden", http.StatusForbidden, ErrForbidden},
	{"bad_request", http.StatusBadRequest, ErrBadRequest},
	{"deadline", http.StatusServiceUnavailable, context.DeadlineExceeded},
	{"canceled", http.StatusServiceUnavailable, context.Canceled},
}

func (cs Codes) all() Codes { return append(slices.Clip(cs), base...) }

// Encode names err: its code and HTTP status ("internal", 500 when no
// entry matches).
func (cs Codes) Encode(err error) (string, int) {
	for _, c := range cs.all() {
		if errors.Is(err, c.Err) {
			return c.Name, c.Status
		}
	}
	return "internal", http.StatusInternalServerError
}

// Decode rebuilds an error from a wire code and message: it wraps the
// code's sentinel, or ErrRemote for an unknown code. The sentinel's own
// text is not repeated when the message starts with it.
func (cs Codes) Decode(code, msg string) error {
	for _, c := range cs.all() {
		if c.Name == code {
			return fmt.Errorf("%w: %s", c.Err, strings.TrimPrefix(msg, c.Err.Error()+": "))
		}
	}
	return fmt.Errorf("%w: %s: %s", ErrRemote, code, msg)
}

// wireError is the body of a failed call. Message is also under "error"
// for the admin API's existing readers.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

// Roles is the set of roles a route allows.
type Roles []pki.Role

// The route classes of the cluster (see the README's Security section).
var (
	// Brokers: between brokers only (/rpc/*, /v1/internal/*).
	Brokers = Roles{pki.RoleBroker}
	// Operators: what changes state from outside (load, release, ...).
	Operators = Roles{pki.RoleOperator}
	// Viewers: reads; operators may read too.
	Viewers = Roles{pki.RoleViewer, pki.RoleOperator}
)

func (rs Roles) String() string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

// Request is what a handler gets: the HTTP request, its body (read and
// bounded) and the authenticated peer.
type Request struct {
	HTTP *http.Request
	Body []byte
	Peer pki.Identity
}

// Handler answers one request; its answer is encoded as JSON.
type Handler func(ctx context.Context, r *Request) (any, error)

// DefaultMaxBody bounds a request body when Server.MaxBody is 0.
const DefaultMaxBody = 64 << 20

// Server authenticates, authorizes and dispatches requests. Set the fields,
// then Handle routes; do not change the fields afterwards.
type Server struct {
	// Certs verifies peers; nil is insecure mode (Insecure must be set).
	Certs *pki.Certs
	// Insecure accepts every peer when Certs is nil. A Server with neither
	// refuses every request (a configuration error, logged).
	Insecure bool
	// Codes maps the handlers' errors to wire codes.
	Codes Codes
	// MaxBody bounds a request body; 0 means DefaultMaxBody.
	MaxBody int64
	// Logger receives refusals (rate-limited) and failures.
	Logger zerolog.Logger
	// Refused, when set, is called for every authentication or
	// authorization refusal (a metric).
	Refused func(reason string)

	limit ratelog.Limiter
}

// Handle registers h for pattern on mux behind authentication for roles.
func (s *Server) Handle(mux *http.ServeMux, pattern string, roles Roles, h Handler) {
	mux.HandleFunc(pattern, s.wrap(roles, h))
}

// Wrap returns h as an http.Handler behind authentication for roles.
func (s *Server) Wrap(roles Roles, h Handler) http.Handler { return s.wrap(roles, h) }

// WrapHTTP returns h behind authentication for roles, for an answer that
// is not JSON (a Prometheus exposition): h sees only authorized requests.
func (s *Server) WrapHTTP(roles Roles, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.authorize(r, roles); err != nil {
			s.refuse(r, err)
			s.writeError(w, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) wrap(roles Roles, h Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		peer, err := s.authorize(r, roles)
		if err != nil {
			s.refuse(r, err)
			s.writeError(w, err)
			return
		}
		max := s.MaxBody
		if max <= 0 {
			max = DefaultMaxBody
		}
		body, err := readBody(r, max)
		if err != nil {
			s.writeError(w, fmt.Errorf("%w: reading body: %v", ErrBadRequest, err))
			return
		}
		if int64(len(body)) > max {
			s.writeError(w, fmt.Errorf("%w: body over %d bytes", ErrBadRequest, max))
			return
		}
		resp, err := h(r.Context(), &Request{HTTP: r, Body: body, Peer: peer})
		if err != nil {
			s.writeError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}
}

// readBody reads r's body, at most max bytes (one more when it is
// longer, for the caller to refuse). A body of a known length is read
// into a buffer of that size at once: io.ReadAll would grow one from 512
// bytes, copying a megabyte frame many times over.
func readBody(r *http.Request, max int64) ([]byte, error) {
	if n := r.ContentLength; n >= 0 && n <= max {
		body := make([]byte, n)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	return io.ReadAll(io.LimitReader(r.Body, max+1))
}

// authorize returns the peer of r if its role is in roles.
func (s *Server) authorize(r *http.Request, roles Roles) (pki.Identity, error) {
	if s.Certs == nil {
		if s.Insecure {
			return pki.Identity{Name: "insecure"}, nil
		}
		return pki.Identity{}, fmt.Errorf("%w: this listener has no certificates and is not in insecure mode", ErrUnauthenticated)
	}
	if r.TLS == nil {
		return pki.Identity{}, fmt.Errorf("%w: plaintext request: this listener speaks TLS only", ErrUnauthenticated)
	}
	id, err := s.Certs.VerifyPeer(r.TLS.PeerCertificates)
	if err != nil {
		return pki.Identity{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if !slices.Contains(roles, id.Role) {
		return id, fmt.Errorf("%w: %s %s needs a certificate of role %s; %s has role %s", ErrForbidden, r.Method, r.URL.Path, roles, id, id.Role)
	}
	return id, nil
}

func (s *Server) refuse(r *http.Request, err error) {
	reason := "unauthenticated"
	if errors.Is(err, ErrForbidden) {
		reason = "forbidden"
	}
	if s.Refused != nil {
		s.Refused(reason)
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	if ok, n := s.limit.Allow(host, time.Now()); ok {
		s.Logger.Error().Err(err).Str("remote", r.RemoteAddr).Int("suppressed_since_last", n).Msg("rpc: request refused")
	}
}

func (s *Server) writeError(w http.ResponseWriter, err error) {
	code, status := s.Codes.Encode(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(wireError{Code: code, Message: err.Error(), Error: err.Error()})
}

// Decode parses a request body strictly into v: one JSON object, no
// unknown fields, nothing after it. Errors wrap ErrBadRequest.
func Decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: empty body, want a JSON object", ErrBadRequest)
		}
		return fmt.Errorf("%w: body: %v", ErrBadRequest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: body: data after the JSON object at byte %d", ErrBadRequest, dec.InputOffset())
	}
	return nil
}

// DecodeOptional is Decode, but an empty body leaves v as it is.
func DecodeOptional(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return Decode(body, v)
}
