package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/rpc"
)

var errFakeNotLeader = errors.New("fake: not the leader")

// fakeBroker serves the admin routes `malachi status` and `release` use,
// as broker 1 of l (nil: insecure mode), and returns its address. POST
// /v1/load always answers not_leader.
func fakeBroker(t *testing.T, l *pki.Local) string {
	t.Helper()
	return fakeBrokerWith(t, l, meta.Snapshot{Index: 7, ReplicationFactor: 1}, map[string]string{"heal": "disabled"})
}

// fakeBrokerWith is fakeBroker serving the leader broker 1 with metadata
// snap and /v1/status status.
func fakeBrokerWith(t *testing.T, l *pki.Local, snap meta.Snapshot, status any) string {
	t.Helper()
	srv := &rpc.Server{Insecure: l == nil, Logger: zerolog.Nop(),
		Codes: rpc.Codes{{Name: "not_leader", Status: http.StatusServiceUnavailable, Err: errFakeNotLeader}}}
	if l != nil {
		certs, err := pki.LoadBroker(l.BrokerDir(1))
		if err != nil {
			t.Fatal(err)
		}
		srv.Certs = certs
	}
	answer := func(v any) rpc.Handler {
		return func(context.Context, *rpc.Request) (any, error) { return v, nil }
	}
	mux := http.NewServeMux()
	srv.Handle(mux, "GET /v1/health", rpc.Viewers, answer(admin.Health{ID: 1, Leader: 1, IsLeader: true}))
	srv.Handle(mux, "GET /v1/metadata", rpc.Viewers, answer(snap))
	srv.Handle(mux, "GET /v1/copies", rpc.Viewers, answer([]admin.Copy{}))
	srv.Handle(mux, "GET /v1/status", rpc.Viewers, answer(status))
	srv.Handle(mux, "POST /v1/heal/release", rpc.Operators, answer(struct{}{}))
	srv.Handle(mux, "POST /v1/load", rpc.Operators, func(context.Context, *rpc.Request) (any, error) { return nil, errFakeNotLeader })
	var certs *pki.Certs
	if l != nil {
		certs = srv.Certs
	}
	ln, err := rpc.Listen("127.0.0.1:0", certs)
	if err != nil {
		t.Fatal(err)
	}
	hs := rpc.NewHTTPServer(mux, zerolog.Nop())
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

func localCerts(t *testing.T) pki.Local {
	t.Helper()
	l, err := pki.CreateLocal(t.TempDir(), []meta.BrokerID{1}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestConnFlags(t *testing.T) {
	l := localCerts(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "--admin", "127.0.0.1:1", "--insecure", "--user", "operator"}, 2, "--insecure uses no certificates: drop --user"},
		{[]string{"status", "--admin", "127.0.0.1:1", "--insecure", "--certs-dir", l.ClientDir()}, 2, "drop --certs-dir"},
		{[]string{"status", "--admin", "127.0.0.1:1", "--certs-dir", l.ClientDir()}, 1, "choose one with --user"},
		{[]string{"status", "--admin", "127.0.0.1:1", "--certs-dir", l.ClientDir(), "--user", "nobody"}, 1, "client.nobody.crt"},
		{[]string{"plan", "--admin", "127.0.0.1:1", "--certs-dir", t.TempDir() + "/none"}, 1, "takes --insecure instead"},
	} {
		var out, errb strings.Builder
		code := run(tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d naming %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}

// MALACHI_CERTS_DIR gives --certs-dir its default, and a directory of one
// client needs no --user.
func TestCertsDirFromEnvironment(t *testing.T) {
	l := localCerts(t)
	addr := fakeBroker(t, &l)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"create-ca", "--certs-dir", dir},
		{"create-client", "alice", "--role", "operator", "--certs-dir", dir},
	} {
		if err := runCert(args, &strings.Builder{}, &strings.Builder{}); err != nil {
			t.Fatal(err)
		}
	}
	// alice's CA is not the broker's: the environment's directory is the
	// one used, and the CLI refuses the broker.
	t.Setenv(certsDirEnv, dir)
	var out, errb strings.Builder
	if code := run([]string{"status", "--admin", addr}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "another CA") {
		t.Fatalf("status with %s=%s: exit %d, stderr %q; want the broker refused as of another CA", certsDirEnv, dir, code, errb.String())
	}
	t.Setenv(certsDirEnv, l.ClientDir())
	errb.Reset()
	if code := run([]string{"status", "--admin", addr, "--user", "viewer"}, &out, &errb); code != 0 {
		t.Fatalf("status with %s=%s: exit %d, stderr %q", certsDirEnv, l.ClientDir(), code, errb.String())
	}
}

func TestRefusalSaysWhatWasMissing(t *testing.T) {
	l := localCerts(t)
	addr := fakeBroker(t, &l)
	var out, errb strings.Builder
	code := run([]string{"release", "--admin", addr, "--certs-dir", l.ClientDir(), "--user", "viewer"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "needs a certificate of role operator") || out.Len() != 0 {
		t.Fatalf("release as viewer: exit %d, stdout %q, stderr %q; want exit 1 naming the operator role", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := run([]string{"release", "--admin", addr, "--certs-dir", l.ClientDir(), "--user", "operator"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "released") {
		t.Fatalf("release as operator: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

func TestStatusInsecure(t *testing.T) {
	addr := fakeBroker(t, nil)
	var out, errb strings.Builder
	if code := run([]string{"status", "--admin", addr, "--insecure"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "INSECURE MODE") {
		t.Fatalf("status --insecure: exit %d, stdout %q, stderr %q; want a line saying insecure mode", code, out.String(), errb.String())
	}
	// With certificates, a plaintext broker is named as such.
	l := localCerts(t)
	out.Reset()
	if code := run([]string{"status", "--admin", addr, "--certs-dir", l.ClientDir(), "--user", "viewer"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "ask it with --insecure") {
		t.Fatalf("status over TLS to a plaintext broker: exit %d, stderr %q; want the --insecure hint", code, errb.String())
	}
	if strings.Contains(out.String(), "INSECURE") {
		t.Fatalf("status over TLS printed %q", out.String())
	}
}

// The CLI's sentinels: a leader change is admin.ErrUnavailable (retried by the
// demo's load), a closed port admin.ErrUnreachable, a refusal admin.ErrRefused.
func TestAdminClientErrors(t *testing.T) {
	l := localCerts(t)
	addr := fakeBroker(t, &l)
	op, err := pki.LoadClient(l.ClientDir(), "operator")
	if err != nil {
		t.Fatal(err)
	}
	rc := rpc.NewClient(op, admin.Codes, 5*time.Second)
	defer rc.Close()
	ctx := context.Background()
	_, err = admin.New(addr, rc, false).Load(ctx, admin.LoadRequest{Segments: 1})
	if !errors.Is(err, admin.ErrUnavailable) || !errors.Is(err, admin.ErrRefused) || errors.Is(err, admin.ErrUnreachable) {
		t.Errorf("load answered not_leader: %v, want admin.ErrUnavailable and admin.ErrRefused", err)
	}
	closed := freePortsT(t)
	if _, err := admin.New(closed, rc, false).Health(ctx); !errors.Is(err, admin.ErrUnreachable) || errors.Is(err, admin.ErrRefused) {
		t.Errorf("health of a closed port: %v, want admin.ErrUnreachable", err)
	}
	vc, err := pki.LoadClient(l.ClientDir(), "viewer")
	if err != nil {
		t.Fatal(err)
	}
	err = admin.New(addr, rpc.NewClient(vc, admin.Codes, 5*time.Second), false).Release(ctx)
	if !errors.Is(err, admin.ErrRefused) || !errors.Is(err, rpc.ErrForbidden) {
		t.Errorf("release as viewer: %v, want admin.ErrRefused wrapping rpc.ErrForbidden", err)
	}
}

// freePortsT returns a loopback address nothing listens on.
func freePortsT(t *testing.T) string {
	t.Helper()
	addrs, err := harness.FreeLoopbackPorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}
