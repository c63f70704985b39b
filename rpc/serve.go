package rpc

import (
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/internal/ratelog"
	"github.com/malachi-log/malachi/pki"
)

// Listen binds addr; with certs, the listener speaks TLS 1.3 only with
// certs' server config (a plaintext client fails its handshake).
func Listen(addr string, certs *pki.Certs) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if certs != nil {
		l = tls.NewListener(l, certs.ServerConfig())
	}
	return l, nil
}

// NewHTTPServer returns an http.Server for h whose own errors (failed TLS
// handshakes: garbage, plaintext, a client refusing this server's
// certificate) go to log at error level, at most once per remote host per
// minute.
func NewHTTPServer(h http.Handler, logger zerolog.Logger) *http.Server {
	w := &handshakeLog{log: logger}
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(w, "", 0)}
}

// handshakeLog is the http.Server's ErrorLog writer.
type handshakeLog struct {
	log   zerolog.Logger
	limit ratelog.Limiter
}

func (h *handshakeLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	key := msg
	// "http: TLS handshake error from 10.0.0.1:4321: ...": one key per host.
	if _, rest, ok := strings.Cut(msg, " from "); ok {
		if hostport, _, ok := strings.Cut(rest, ": "); ok {
			if host, _, err := net.SplitHostPort(hostport); err == nil {
				key = host
			}
		}
	}
	if ok, n := h.limit.Allow(key, time.Now()); ok {
		h.log.Error().Int("suppressed_since_last", n).Msg(msg)
	}
	return len(p), nil
}
