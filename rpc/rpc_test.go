package rpc

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/testbed/testlog"
)

var errThing = errors.New("test: thing happened")

var testCodes = Codes{{"thing", http.StatusConflict, errThing}}

type fixture struct {
	addr    string
	calls   atomic.Int64
	logs    *testlog.Buffer
	local   pki.Local
	server  *pki.Certs
	refused atomic.Int64
}

// serve starts a server of broker 1 with one route per role class.
func serve(t *testing.T) *fixture {
	t.Helper()
	l, err := pki.CreateLocal(t.TempDir(), []meta.BrokerID{1, 2}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{logs: &testlog.Buffer{}, local: l}
	if f.server, err = pki.LoadBroker(l.BrokerDir(1)); err != nil {
		t.Fatal(err)
	}
	s := &Server{Certs: f.server, Codes: testCodes, MaxBody: 1 << 10, Logger: zerolog.New(f.logs),
		Refused: func(string) { f.refused.Add(1) }}
	mux := http.NewServeMux()
	echo := func(_ context.Context, r *Request) (any, error) {
		f.calls.Add(1)
		var in struct{ N int }
		if err := DecodeOptional(r.Body, &in); err != nil {
			return nil, err
		}
		if in.N < 0 {
			return nil, errThing
		}
		return map[string]any{"n": in.N, "peer": r.Peer.Name}, nil
	}
	s.Handle(mux, "POST /brokers", Brokers, echo)
	s.Handle(mux, "POST /operators", Operators, echo)
	s.Handle(mux, "GET /viewers", Viewers, echo)
	ln, err := Listen("127.0.0.1:0", f.server)
	if err != nil {
		t.Fatal(err)
	}
	hs := NewHTTPServer(mux, zerolog.New(f.logs))
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	f.addr = ln.Addr().String()
	return f
}

func (f *fixture) client(t *testing.T, who string) *Client {
	t.Helper()
	var c *pki.Certs
	var err error
	switch who {
	case "broker":
		c, err = pki.LoadBroker(f.local.BrokerDir(2))
	case "operator", "viewer":
		c, err = pki.LoadClient(f.local.ClientDir(), who)
	}
	if err != nil {
		t.Fatal(err)
	}
	return NewClient(c, testCodes, 5*time.Second)
}

func TestRolesMatrix(t *testing.T) {
	f := serve(t)
	routes := []struct {
		method, path string
		allowed      []string
	}{
		{"POST", "/brokers", []string{"broker"}},
		{"POST", "/operators", []string{"operator"}},
		{"GET", "/viewers", []string{"viewer", "operator"}},
	}
	for _, rt := range routes {
		for _, who := range []string{"broker", "operator", "viewer"} {
			before := f.calls.Load()
			var req any
			if rt.method == "POST" {
				req = map[string]int{"N": 1}
			}
			err := f.client(t, who).Call(context.Background(), rt.method, f.addr, rt.path, req, nil)
			want := false
			for _, a := range rt.allowed {
				want = want || a == who
			}
			ran := f.calls.Load() > before
			switch {
			case want && (err != nil || !ran):
				t.Errorf("%s %s as %s: %v (handler ran %v), want allowed", rt.method, rt.path, who, err, ran)
			case !want && (!errors.Is(err, ErrForbidden) || ran):
				t.Errorf("%s %s as %s: %v (handler ran %v), want ErrForbidden", rt.method, rt.path, who, err, ran)
			case !want && !strings.Contains(err.Error(), "needs a certificate of role"):
				t.Errorf("refusal does not say what was missing: %v", err)
			case !want && strings.Count(err.Error(), "rpc: forbidden") != 1:
				t.Errorf("refusal repeats its prefix: %v", err)
			}
		}
	}
}

func TestNoCertificateAndPlaintextRefused(t *testing.T) {
	f := serve(t)
	// A TLS client that trusts the server but has no certificate.
	viewer, _ := pki.LoadClient(f.local.ClientDir(), "viewer")
	cfg := viewer.ClientConfig()
	cfg.GetClientCertificate = nil
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	res, err := hc.Get("https://" + f.addr + "/viewers")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.ReadFrom(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(buf.String(), "no client certificate") {
		t.Fatalf("no certificate: HTTP %d %s, want 401 naming the missing certificate", res.StatusCode, buf.String())
	}
	// Plaintext on a TLS listener: no handler runs.
	if _, err := http.Get("http://" + f.addr + "/viewers"); err == nil {
		res.Body.Close()
	}
	if f.calls.Load() != 0 {
		t.Fatalf("%d handler calls without credentials", f.calls.Load())
	}
	if f.refused.Load() == 0 {
		t.Fatal("the refusal was not counted")
	}
	if !strings.Contains(f.logs.String(), "request refused") {
		t.Fatalf("the refusal was not logged: %s", f.logs)
	}
}

func TestOtherCARefusedBothWays(t *testing.T) {
	f := serve(t)
	other, err := pki.CreateLocal(t.TempDir(), []meta.BrokerID{1}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	oc, _ := pki.LoadClient(other.ClientDir(), "operator")
	err = NewClient(oc, testCodes, 5*time.Second).Call(context.Background(), "POST", f.addr, "/operators", map[string]int{}, nil)
	if !IsUnauthenticated(err) || !strings.Contains(err.Error(), "another CA") {
		t.Fatalf("a client of another CA: %v, want refused naming the CA", err)
	}
	if f.calls.Load() != 0 {
		t.Fatal("a handler ran")
	}
}

func TestErrorsRoundTripAndStrictBodies(t *testing.T) {
	f := serve(t)
	c := f.client(t, "broker")
	ctx := context.Background()
	if err := c.Call(ctx, "POST", f.addr, "/brokers", map[string]int{"N": -1}, nil); !errors.Is(err, errThing) {
		t.Fatalf("sentinel did not round-trip: %v", err)
	}
	if err := c.Call(ctx, "POST", f.addr, "/brokers", map[string]any{"N": 1, "extra": 2}, nil); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("unknown field: %v", err)
	}
	big := map[string]string{"pad": strings.Repeat("x", 2<<10)}
	if err := c.Call(ctx, "POST", f.addr, "/brokers", big, nil); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "over 1024 bytes") {
		t.Fatalf("oversized body: %v", err)
	}
	var out struct {
		N    int
		Peer string
	}
	if err := c.CallBroker(ctx, 1, "POST", f.addr, "/brokers", map[string]int{"N": 7}, &out); err != nil || out.N != 7 || out.Peer != "broker-2" {
		t.Fatalf("call: %+v %v", out, err)
	}
	if err := c.CallBroker(ctx, 3, "POST", f.addr, "/brokers", map[string]int{"N": 7}, nil); !errors.Is(err, ErrWrongPeer) {
		t.Fatalf("broker 1 answering for broker 3: %v, want ErrWrongPeer", err)
	}
}

func TestInsecureOnlyWhenAsked(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		s := &Server{Insecure: insecure}
		mux := http.NewServeMux()
		var ran atomic.Bool
		s.Handle(mux, "GET /x", Operators, func(context.Context, *Request) (any, error) { ran.Store(true); return "ok", nil })
		ln, err := Listen("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		hs := NewHTTPServer(mux, zerolog.Nop())
		go hs.Serve(ln)
		err = NewClient(nil, nil, 5*time.Second).Call(context.Background(), "GET", ln.Addr().String(), "/x", nil, nil)
		hs.Close()
		if insecure != (err == nil) || insecure != ran.Load() {
			t.Fatalf("insecure=%v: %v, ran %v", insecure, err, ran.Load())
		}
	}
}
