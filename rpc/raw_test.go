package rpc

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/pki"
)

// serveText serves a Prometheus-like text body at GET /metrics behind the
// viewer roles, over TLS with broker 1's certificate of f's cluster.
func serveText(t *testing.T, f *fixture, body string) string {
	t.Helper()
	s := &Server{Certs: f.server, Codes: testCodes, Logger: zerolog.Nop()}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.authorize(r, Viewers); err != nil {
			s.writeError(w, err)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(body))
	}))
	ln, err := Listen("127.0.0.1:0", f.server)
	if err != nil {
		t.Fatal(err)
	}
	hs := NewHTTPServer(mux, zerolog.Nop())
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

func TestGetRaw(t *testing.T) {
	f := serve(t)
	const exposition = "# TYPE x_total counter\nx_total 42\n"
	addr := serveText(t, f, exposition)
	ctx := context.Background()

	got, err := f.client(t, "viewer").GetRaw(ctx, addr, "/metrics")
	if err != nil || string(got) != exposition {
		t.Fatalf("viewer GET /metrics: %q %v, want the body as served", got, err)
	}
	// A refusal decodes to its sentinel and says what was missing.
	_, err = f.client(t, "broker").GetRaw(ctx, addr, "/metrics")
	if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "needs a certificate of role viewer or operator") {
		t.Fatalf("broker GET /metrics: %v, want ErrForbidden naming the roles", err)
	}
	// An answer without a code (the mux's 404) is ErrRemote with the status.
	_, err = f.client(t, "viewer").GetRaw(ctx, addr, "/nowhere")
	if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("GET /nowhere: %v, want ErrRemote with HTTP 404", err)
	}
	// A JSON route's answer comes back raw too.
	got, err = f.client(t, "viewer").GetRaw(ctx, f.addr, "/viewers")
	if err != nil || !strings.Contains(string(got), `"peer":"viewer"`) {
		t.Fatalf("GET /viewers: %q %v", got, err)
	}
	// A client of another CA refuses the server before anything is sent.
	other, err := pki.CreateLocal(t.TempDir(), nil, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	oc, err := pki.LoadClient(other.ClientDir(), "viewer")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewClient(oc, testCodes, 5*time.Second).GetRaw(ctx, addr, "/metrics"); !IsUnauthenticated(err) {
		t.Fatalf("client of another CA: %v, want a certificate refusal", err)
	}
}

// TestRawBody: a Raw request body reaches the handler byte for byte, with
// Content-Type application/octet-stream, behind the same authorization as
// a JSON one.
func TestRawBody(t *testing.T) {
	f := serve(t)
	s := &Server{Certs: f.server, Codes: testCodes, Logger: zerolog.Nop()}
	mux := http.NewServeMux()
	s.Handle(mux, "POST /raw", Brokers, func(_ context.Context, r *Request) (any, error) {
		return map[string]any{"type": r.HTTP.Header.Get("Content-Type"), "body": r.Body, "q": r.HTTP.URL.Query().Get("offset")}, nil
	})
	ln, err := Listen("127.0.0.1:0", f.server)
	if err != nil {
		t.Fatal(err)
	}
	hs := NewHTTPServer(mux, zerolog.Nop())
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	body := Raw{0, 1, 2, 0xff, '{', '"'}
	var got struct {
		Type string
		Body []byte
		Q    string
	}
	if err := f.client(t, "broker").Call(context.Background(), http.MethodPost, ln.Addr().String(), "/raw?offset=7", body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Type != RawContentType || string(got.Body) != string(body) || got.Q != "7" {
		t.Fatalf("handler saw %+v, want type %q, body %v, offset 7", got, RawContentType, []byte(body))
	}
	if err := f.client(t, "operator").Call(context.Background(), http.MethodPost, ln.Addr().String(), "/raw", body, nil); !errors.Is(err, ErrForbidden) {
		t.Fatalf("operator POST /raw: %v, want ErrForbidden", err)
	}
}
