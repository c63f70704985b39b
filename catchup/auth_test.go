package catchup

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/testlog"
	"github.com/rs/zerolog"
)

// TestServerRefusesBadTicketsChangingNothing sends, over the real data
// listener, requests whose ticket is missing, garbage, forged, from a
// certificate the CA did not issue, or genuine but not for this request
// (another source, segment, expectation or range, expired, too far in the
// future, spent), and requests that are garbage or cut short. Each is
// refused with its code and a message naming what was wrong, no byte of
// the copy follows the answer, the source is never opened, and it is
// counted.
func TestServerRefusesBadTicketsChangingNothing(t *testing.T) {
	fx := newFixture(t, 1<<14, Limits{}, ModeDefault, ModeDefault)
	size := int64(len(fx.data))
	srcPath := filepath.Join(fx.src.dir, string(fx.seg.ID))
	with := func(edit func(*Ticket)) []byte { return fx.ticket(t, edit) }

	forged := fx.ticket(t, nil)
	forged[len(forged)-1] ^= 1
	tampered := fx.ticket(t, nil)
	tampered[16] ^= 1 // the granted range's end
	otherCA, err := IssueTicket(newFakeKey(testIssuer, 9), testTicket(fx.seg, size))
	if err != nil {
		t.Fatal(err)
	}
	otherSeg := fx.seg
	otherSeg.ID = "seg-2"
	otherSum := fx.seg
	otherSum.Checksum = meta.CRC32C(8)
	spent := fx.ticket(t, nil)
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, spent, fx.sink, nil); err != nil {
		t.Fatalf("the transfer the spent ticket was issued for: %v", err)
	}
	cutTicket := fx.ticket(t, nil)
	p := startProxy(t, fx.addr, respFixedSize+100, -1)
	if _, err := fx.cl.Fetch(context.Background(), p.addr(), fx.seg, cutTicket, &fileSink{dir: t.TempDir(), want: fx.sink.want}, nil); !errors.Is(err, ErrCut) {
		t.Fatalf("the transfer cut after 100 bytes: got %v, want %v", err, ErrCut)
	}
	waitFor(t, "the server to end both transfers", func() bool { st := fx.srv.Stats(); return st.Transfers+st.Failed == 2 })

	req := func(from, to int64, ticket []byte) []byte {
		return appendRequest(nil, &request{seg: fx.seg, from: from, to: to, ticket: ticket})
	}
	whole := func(ticket []byte) []byte { return req(0, size, ticket) }
	garbage := bytes.Repeat([]byte{0xa5}, 300)
	cases := []struct {
		name string
		wire []byte
		code Code
		want string
	}{
		{"no ticket", whole(nil), CodeUnauthenticated, "no ticket"},
		{"garbage ticket", whole(garbage), CodeUnauthenticated, "ticket: bad magic"},
		{"truncated ticket", whole(fx.ticket(t, nil)[:200]), CodeUnauthenticated, "ticket of 200 bytes"},
		{"forged signature", whole(forged), CodeUnauthenticated, "signature does not match"},
		{"tampered grant", whole(tampered), CodeUnauthenticated, "signature does not match"},
		{"certificate not from the CA", whole(otherCA), CodeUnauthenticated, "not issued by the cluster CA"},
		{"issuer other than the certificate's", whole(with(func(tk *Ticket) { tk.Issuer = 5 })), CodeUnauthenticated, "names issuer broker 5, its certificate names broker 1"},
		{"wrong source", whole(with(func(tk *Ticket) { tk.Source = 7 })), CodeForbidden, "source broker 7, this is broker 2"},
		{"wrong segment", whole(with(func(tk *Ticket) { tk.Segment = otherSeg })), CodeForbidden, `ticket is for segment "seg-2"`},
		{"wrong expectation", whole(with(func(tk *Ticket) { tk.Segment = otherSum })), CodeForbidden, "ticket expects"},
		{"range past the ticket", whole(with(func(tk *Ticket) { tk.To = 100 })), CodeForbidden, "outside the ticket's [0, 100)"},
		{"range before the ticket", req(50, 150, with(func(tk *Ticket) { tk.From = 100 })), CodeForbidden, "[50, 150) is outside"},
		{"expired", whole(with(func(tk *Ticket) { tk.Expires = time.Now().Add(-time.Second) })), CodeForbidden, "ticket expired"},
		{"too long-lived", whole(with(func(tk *Ticket) { tk.Expires = time.Now().Add(MaxTicketLife + time.Minute) })), CodeForbidden, "more than the 10m0s"},
		{"replayed after completion", whole(spent), CodeForbidden, "already used"},
		{"replayed after a cut", whole(cutTicket), CodeForbidden, "already used"},
		{"garbage request", garbage, CodeMalformed, "bad magic"},
	}
	opens, sent, refused := fx.src.opens.Load(), fx.srv.Stats().Bytes, fx.srv.Stats().Refused
	for _, tc := range cases {
		resp, conn := rawRequest(t, fx.addr, tc.wire)
		if resp.code != tc.code {
			t.Errorf("%s: %+v, want %v", tc.name, resp, tc.code)
		}
		if !strings.Contains(resp.msg, tc.want) {
			t.Errorf("%s: message %q does not say %q", tc.name, resp.msg, tc.want)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if rest, err := io.ReadAll(conn); resp.count != 0 || len(rest) != 0 || err != nil {
			t.Errorf("%s: %d bytes announced, %d followed the refusal (%v)", tc.name, resp.count, len(rest), err)
		}
		if n := fx.src.opens.Load(); n != opens {
			t.Errorf("%s: the source was opened (%d -> %d)", tc.name, opens, n)
		}
	}
	// A request cut short, its sender still reading: refused as such.
	conn, err := net.Dial("tcp", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(whole(fx.ticket(t, nil))[:reqFixedSize+10]); err != nil {
		t.Fatal(err)
	}
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := readResponse(conn); err != nil || resp.code != CodeMalformed || !strings.Contains(resp.msg, "truncated request") {
		t.Errorf("truncated request: %+v, %v; want %v saying it was truncated", resp, err, CodeMalformed)
	}

	st := fx.srv.Stats()
	if n := fx.src.opens.Load(); n != opens || st.Bytes != sent {
		t.Errorf("after the refusals: source opened %d -> %d times, %d -> %d bytes sent", opens, n, sent, st.Bytes)
	}
	if want := refused + uint64(len(cases)) + 1; st.Refused != want {
		t.Errorf("%d refusals counted, want %d", st.Refused, want)
	}
	if got, err := os.ReadFile(srcPath); err != nil || !bytes.Equal(got, fx.data) {
		t.Errorf("source copy changed: %v", err)
	}
}

// A request refused for what it asks leaves its ticket as it was: the
// same ticket then admits the request it grants, once.
func TestRefusedRequestLeavesTicketUnspent(t *testing.T) {
	fx := newFixture(t, 1<<14, Limits{}, ModeDefault, ModeDefault)
	size := int64(len(fx.data))
	ticket := fx.ticket(t, nil)
	wire := func(to int64) []byte {
		return appendRequest(nil, &request{seg: fx.seg, from: 0, to: to, ticket: ticket})
	}
	if resp, _ := rawRequest(t, fx.addr, wire(size+1)); resp.code != CodeForbidden {
		t.Fatalf("a range past the grant: %+v", resp)
	}
	fx.src.errs = map[meta.SegmentID]error{fx.seg.ID: ErrLatched}
	if resp, _ := rawRequest(t, fx.addr, wire(size)); resp.code != CodeLatched {
		t.Fatalf("a latched source: %+v", resp)
	}
	fx.src.errs = nil
	if resp, _ := rawRequest(t, fx.addr, wire(size)); resp.code != CodeOK || resp.count != size {
		t.Fatalf("the granted request after two refusals: %+v", resp)
	}
	if resp, _ := rawRequest(t, fx.addr, wire(size)); resp.code != CodeForbidden || !strings.Contains(resp.msg, "already used") {
		t.Fatalf("the ticket's second transfer: %+v", resp)
	}
}

// waitFor polls cond until it holds, failing after 10 s: for what the
// server's goroutines finish after the client already returned.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}

// A flood of refused requests from one address makes one log line per
// minute, and every refusal is counted. The clock is the server's Now.
func TestRefusalLogRateLimited(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var logs testlog.Buffer
	srv := &Server{Source: &fileSource{dir: t.TempDir()}, Self: testSource, Tickets: testCA, Now: clock, Logger: zerolog.New(&logs)}
	addr := startServer(t, srv)
	garbage := bytes.Repeat([]byte("x"), reqFixedSize)
	for range 20 {
		if resp, _ := rawRequest(t, addr, garbage); resp.code != CodeMalformed {
			t.Fatalf("garbage: %+v", resp)
		}
	}
	if l := logs.Lines(""); len(l) != 1 || !strings.Contains(l[0], "request refused") || !strings.Contains(l[0], "bad magic") {
		t.Fatalf("20 refusals within a minute logged %d lines, want 1:\n%s", len(l), strings.Join(l, "\n"))
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	rawRequest(t, addr, garbage)
	l := logs.Lines("")
	if len(l) != 2 || !strings.Contains(l[1], `"suppressed":19`) {
		t.Fatalf("a minute later: %d lines, want a second one counting 19 suppressed:\n%s", len(l), strings.Join(l, "\n"))
	}
	if st := srv.Stats(); st.Refused != 21 {
		t.Fatalf("%d refusals counted, want 21", st.Refused)
	}
}

// Serve refuses a configuration without tickets (unless Insecure), a
// ticket verifier without Self, and a TLS config without a certificate
// or that does not verify clients, naming the field. Each Serve gets an
// already closed listener: a configuration it accepts returns the
// listener's error.
func TestServeRefusesIncompleteConfig(t *testing.T) {
	src := &fileSource{dir: t.TempDir()}
	p := newTestPKI(t)
	for _, c := range []struct {
		srv  *Server
		want string // "": accepted
	}{
		{&Server{Source: src}, "Server.Tickets is nil"},
		{&Server{Source: src, Tickets: testCA}, "Server.Self is 0"},
		{&Server{Source: src, Tickets: testCA, Self: testSource}, ""},
		{&Server{Source: src, Insecure: true}, ""},
		{&Server{Source: src, Tickets: testCA, Self: testSource, TLS: p.serverTLS(nil)}, ""},
		{&Server{Source: src, Insecure: true, TLS: p.serverTLS(func(c *tls.Config) { c.Certificates = nil })}, "Server.TLS has no certificate"},
		{&Server{Source: src, Insecure: true, TLS: p.serverTLS(func(c *tls.Config) { c.ClientAuth = tls.RequestClientCert })}, "Server.TLS does not verify client certificates"},
	} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		err = c.srv.Serve(l)
		if c.want == "" && !errors.Is(err, net.ErrClosed) {
			t.Errorf("%+v: Serve returned %v, want the closed listener's error", c.srv, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("got %v, want an error naming %q", err, c.want)
		}
	}
}

// Insecure mode: a request without a ticket is served only by an Insecure
// server, and sent only by an Insecure client; a client without a ticket
// and without Insecure refuses before touching anything.
func TestInsecureOnlyWhenSet(t *testing.T) {
	fx := newFixture(t, 1<<16, Limits{}, ModeDefault, ModeDefault)
	_, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, nil, fx.sink, nil)
	if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "Client.Insecure") {
		t.Fatalf("no ticket, client not insecure: got %v, want %v naming Client.Insecure", err, ErrUnauthenticated)
	}
	if st := fx.srv.Stats(); st.Refused != 0 || fx.targetBytes(t) != nil {
		t.Fatalf("the client without a ticket reached the server (%+v) or the sink", st)
	}
	insecure := &Client{Insecure: true}
	_, err = insecure.Fetch(context.Background(), fx.addr, fx.seg, nil, fx.sink, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != CodeUnauthenticated || !strings.Contains(re.Message, "no ticket") {
		t.Fatalf("no ticket to a server with tickets: got %v", err)
	}
	if fx.src.opens.Load() != 0 {
		t.Fatal("the source was opened for a request without a ticket")
	}

	open := &Server{Source: fx.src, Insecure: true}
	addr := startServer(t, open)
	if _, err := insecure.Fetch(context.Background(), addr, fx.seg, nil, fx.sink, nil); err != nil {
		t.Fatalf("insecure client and server: %v", err)
	}
	if !bytes.Equal(fx.targetBytes(t), fx.data) {
		t.Fatal("target differs from the source")
	}
}
