package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"crypto/x509"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// segmentRequest names one segment by its full metadata (seeds and
// malformed bodies).
type segmentRequest struct {
	Segment meta.Segment `json:"segment"`
}

// rpcPaths are the RPCs the fuzzer picks from, each with the top-level
// keys of its request (any other key must be refused).
var rpcPaths = []struct {
	path string
	keys []string
}{
	{pathProbe, []string{"index", "deadline_ms"}},
	{pathBackfill, []string{"segment", "source", "source_addr"}},
	{pathSettle, []string{"segments"}},
	{pathConfirm, []string{"segments"}},
	{pathDelete, []string{"segment"}},
	{pathLatched, nil},
	{pathDeleteLeftover, []string{"segment", "index"}},
}

// Who the fuzzer's request comes from: the TLS state the server sees.
const (
	authBroker  = iota // broker 2's certificate of the cluster CA
	authPlain          // no TLS at all
	authNone           // TLS without a client certificate
	authViewer         // a viewer's certificate: valid, not a broker
	authOtherCA        // a broker certificate of another CA
	numAuth
)

// rpcFixture is one enabled plugin over a real store in a temporary
// directory, with three copies: "a" sealed and confirmed, "b" sealed, "c"
// active; and its RPC routes on a mux with a fixed clock.
type rpcFixture struct {
	db   *store.DB
	cp   *memCP
	mux  http.Handler
	segs map[meta.SegmentID]meta.Segment
	// chains are the certificates each auth mode presents.
	chains map[int][]*x509.Certificate
}

func newRPCFixture(tb testing.TB) *rpcFixture {
	tb.Helper()
	dir := tb.TempDir()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	cp := newMemCP()
	cfg := DefaultConfig()
	cfg.Enabled, cfg.DataDir = true, dir
	cfg.RPCListen, cfg.DataListen = "127.0.0.1:0", "127.0.0.2:0"
	// Short bounds: a fuzzed probe of a future index, or a backfill from a
	// fuzzed address, must not stall the fuzzer.
	cfg.ProbeDeadline, cfg.BackfillTimeout, cfg.ScrubInterval = 5*time.Millisecond, 200*time.Millisecond, 0
	p, err := New(cfg, Deps{Self: 1, Store: db, Control: cp, Logger: zerolog.Nop(), Certs: cp.certs(tb, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Stop() })
	st := p.Status()
	if _, err := cp.Apply(context.Background(), meta.RegisterBroker{Broker: meta.Broker{ID: 1, RPCAddr: st.RPCAddr, DataAddr: st.DataAddr}}); err != nil {
		tb.Fatal(err)
	}
	fx := &rpcFixture{db: db, cp: cp, segs: map[meta.SegmentID]meta.Segment{}, mux: p.routes(),
		chains: map[int][]*x509.Certificate{authBroker: chainOf(tb, cp.certs(tb, 2)), authViewer: chainOf(tb, cp.client(tb, "viewer")),
			authOtherCA: chainOf(tb, otherCA(tb))}}
	fx.seed(tb)
	for _, s := range fx.segs {
		c := s
		c.Sealed, c.Length, c.ByteSize, c.Checksum = false, 0, 0, meta.NoChecksum
		if _, err := cp.Apply(context.Background(), meta.CreateSegment{Segment: c}); err != nil {
			tb.Fatal(err)
		}
		if s.Sealed {
			if _, err := cp.Apply(context.Background(), meta.SealSegment{ID: s.ID, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return fx
}

// seed (re)creates whichever of the fixture's copies is missing, with the
// same bytes each time, and confirms "a".
func (fx *rpcFixture) seed(tb testing.TB) {
	tb.Helper()
	have := map[meta.SegmentID]bool{}
	for _, id := range fx.db.List() {
		have[id] = true
	}
	for _, c := range []struct {
		id      meta.SegmentID
		records int
		sealed  bool
	}{{"a", 5, true}, {"b", 3, true}, {"c", 2, false}} {
		if have[c.id] {
			continue
		}
		if err := fx.db.Create(c.id, 100); err != nil {
			tb.Fatal(err)
		}
		for i := 0; i < c.records; i++ {
			if _, err := fx.db.Append(c.id, []byte(strings.Repeat("r", 50+i))); err != nil {
				tb.Fatal(err)
			}
		}
		seg := meta.Segment{ID: c.id, StartOffset: 100, Replicas: []meta.BrokerID{1, 2}}
		if c.sealed {
			s, err := fx.db.Seal(c.id)
			if err != nil {
				tb.Fatal(err)
			}
			seg.Length, seg.ByteSize, seg.Checksum, seg.Sealed = s.Length, s.ByteSize, s.Checksum, true
		}
		fx.segs[c.id] = seg
		if c.id == "a" {
			fi, err := fx.db.Identity("a")
			if err != nil {
				tb.Fatal(err)
			}
			if err := fx.db.Confirm("a", fi); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// state is what an RPC could change, cheaply read: the copies directory
// (names and sizes), each copy's confirmation and latch, and the metadata
// index (the server never writes the metadata).
func (fx *rpcFixture) state(tb testing.TB) string {
	tb.Helper()
	var b strings.Builder
	// Every file under copies/, each shard directory included (WalkDir
	// goes in lexical order).
	copies := filepath.Dir(filepath.Dir(fx.db.Path("x")))
	err := filepath.WalkDir(copies, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(copies, path)
		fmt.Fprintf(&b, "file %s %d\n", rel, fi.Size())
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	for _, id := range fx.db.List() {
		fi, err := fx.db.Identity(id)
		ok, cerr := fx.db.Confirmed(id, fi)
		fmt.Fprintf(&b, "copy %s identity=%v/%v confirmed=%v/%v latched=%v\n", id, fi, err, ok, cerr, fx.db.LatchErr(id) != nil)
	}
	fmt.Fprintf(&b, "index %d\n", fx.cp.Snapshot().Index)
	return b.String()
}

// rpcCall is one fuzzed request.
type rpcCall struct {
	route, auth uint8
	header      string
	body        []byte
}

func (fx *rpcFixture) request(c rpcCall) (*http.Request, string, int) {
	path := rpcPaths[int(c.route)%len(rpcPaths)].path
	mode := int(c.auth) % numAuth
	r := httptest.NewRequest(http.MethodPost, "https://broker1"+path, bytes.NewReader(c.body))
	if mode == authPlain {
		r.TLS = nil
	} else {
		r.TLS.PeerCertificates = fx.chains[mode]
	}
	return r, path, mode
}

// malformed says, independently of decode, why body is not a request of
// path: not JSON, not an object, or a key the request does not have.
func malformed(path string, body []byte) string {
	if !json.Valid(body) {
		return "not JSON"
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return "not an object"
	}
	if m == nil {
		return "" // null: decodes to the zero request
	}
	var keys []string
	for _, p := range rpcPaths {
		if p.path == path {
			keys = p.keys
		}
	}
next:
	for k := range m {
		for _, want := range keys {
			if strings.EqualFold(k, want) {
				continue next
			}
		}
		return "unknown key " + k
	}
	return ""
}

// check sends c to the real handler and checks the answer and the state.
func (fx *rpcFixture) check(t *testing.T, c rpcCall) {
	before := fx.state(t)
	r, path, mode := fx.request(c)
	w := httptest.NewRecorder()
	fx.mux.ServeHTTP(w, r)
	res := w.Result()
	var we wireError
	if res.StatusCode != http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &we); err != nil || we.Code == "" || we.Message == "" {
			t.Fatalf("%s: HTTP %d with a body that is no wireError (%v): %q", path, res.StatusCode, err, w.Body.Bytes())
		}
	} else if !json.Valid(w.Body.Bytes()) {
		t.Fatalf("%s: HTTP 200 with a body that is not JSON: %q", path, w.Body.Bytes())
	}
	switch mode {
	case authPlain, authNone, authOtherCA, authViewer:
		why := map[int]string{authPlain: "plaintext request", authNone: "no client certificate", authOtherCA: "another CA", authViewer: "needs a certificate of role broker"}[mode]
		status, code := http.StatusUnauthorized, "unauthenticated"
		if mode == authViewer {
			status, code = http.StatusForbidden, "forbidden"
		}
		if res.StatusCode != status || we.Code != code || !strings.Contains(we.Message, why) {
			t.Fatalf("%s: auth mode %d: HTTP %d %+v, want %d %s naming %q", path, mode, res.StatusCode, we, status, code, why)
		}
	case authBroker:
		if why := malformed(path, c.body); why != "" {
			if res.StatusCode != http.StatusBadRequest || we.Code != "invalid" || !strings.Contains(we.Message, "request") {
				t.Fatalf("%s: body %q is malformed (%s): HTTP %d %+v, want 400 invalid naming the request", path, c.body, why, res.StatusCode, we)
			}
		}
		// A 500 is a failure of the server, never of the request; only a
		// backfill reaches out (to a fuzzed address) and may fail so.
		if res.StatusCode == http.StatusInternalServerError && path != pathBackfill {
			t.Fatalf("%s: body %q: HTTP 500 %+v", path, c.body, we)
		}
	}
	if res.StatusCode == http.StatusOK {
		fx.seed(t) // a delete, settle or confirm may have changed the copies
		return
	}
	if after := fx.state(t); after != before {
		if path == pathBackfill && res.StatusCode != http.StatusBadRequest && fx.dropLeftoverTarget(t, c.body, before) {
			return
		}
		t.Fatalf("%s: refused request (HTTP %d %+v) changed the state:\nbefore:\n%s\nafter:\n%s", path, res.StatusCode, we, before, after)
	}
}

// dropLeftoverTarget handles the one change a well-formed but failed backfill
// makes: the store's OpenTarget creates the copy it pulls into, and an
// abort cuts it back to its durable end, 0, leaving an empty copy behind
// (a leftover: partial_backfill).
// If that is the only change, the copy is deleted and it reports true.
func (fx *rpcFixture) dropLeftoverTarget(t *testing.T, body []byte, before string) bool {
	var req BackfillRequest
	if json.Unmarshal(body, &req) != nil || strings.Contains(before, "copy "+string(req.Segment.ID)+" ") {
		return false
	}
	if fi, err := fx.db.Identity(req.Segment.ID); err != nil || fi.Size != 0 {
		return false
	}
	if err := fx.db.Delete(req.Segment.ID); err != nil {
		t.Fatal(err)
	}
	return fx.state(t) == before
}

// FuzzRPCDecode feeds arbitrary bodies and auth headers to the real RPC
// routes of an enabled plugin over a real store: nothing panics, a request
// that is unauthenticated or malformed is refused with a 4xx naming why,
// and a refused request changes neither the copies, their confirmations,
// nor the metadata.
func FuzzRPCDecode(f *testing.F) {
	fx := newRPCFixture(f)
	b, _ := json.Marshal(segmentRequest{Segment: fx.segs["b"]})
	bf, _ := json.Marshal(BackfillRequest{Segment: fx.segs["b"], Source: 2, SourceAddr: "127.0.0.1:1"})
	for route := range rpcPaths {
		for auth := range numAuth {
			f.Add(uint8(route), uint8(auth), "", []byte(`{}`))
		}
	}
	f.Add(uint8(0), uint8(authBroker), "", []byte(`{"index":1}`))
	f.Add(uint8(1), uint8(authBroker), "", bf)
	f.Add(uint8(2), uint8(authBroker), "", b)
	f.Add(uint8(3), uint8(authBroker), "", b)
	f.Add(uint8(4), uint8(authBroker), "", []byte(`{"segment":"../x"}`))
	f.Add(uint8(4), uint8(authPlain), "", []byte(`{"segment":"a"}`))
	f.Add(uint8(4), uint8(authViewer), "", []byte(`{"segment":"a"}`))
	f.Fuzz(func(t *testing.T, route, auth uint8, header string, body []byte) {
		fx.check(t, rpcCall{route: route, auth: auth, header: header, body: body})
	})
}

// TestRPCRefusesMalformedRequests is the table the fuzzer grew from: each
// refused request names what was wrong, and none changes the store.
func TestRPCRefusesMalformedRequests(t *testing.T) {
	fx := newRPCFixture(t)
	a, _ := json.Marshal(segmentRequest{Segment: fx.segs["a"]})
	for _, tc := range []struct {
		name  string
		route int
		auth  int
		body  string
		code  int
		want  string
	}{
		{"empty body", 1, authBroker, ``, 400, "empty body"},
		{"truncated", 1, authBroker, string(a[:len(a)/2]), 400, "unexpected EOF"},
		{"trailing data", 4, authBroker, `{"segment":"b"} {"segment":"a"}`, 400, "data after the JSON object"},
		{"unknown field", 0, authBroker, `{"index":1,"indexx":2}`, 400, `unknown field "indexx"`},
		{"wrong type", 0, authBroker, `{"index":"one"}`, 400, "cannot unmarshal string"},
		{"huge number", 0, authBroker, `{"index":1e400}`, 400, "cannot unmarshal number"},
		{"negative size", 2, authBroker, `{"segments":[{"id":"a","length":1,"byte_size":-1,"replicas":[1]}]}`, 400, "byte_size -1 is negative"},
		{"too many segments", 2, authBroker, tooManySegments(), 400, "at most 4096"},
		{"path escape", 4, authBroker, `{"segment":"../a"}`, 400, `segment id "../a" starts with a dot`},
		{"slash in id", 4, authBroker, `{"segment":"x/../a"}`, 400, `byte '/' at 1`},
		{"latched with garbage", 5, authBroker, `garbage`, 400, "invalid character"},
		{"backfill without source_addr", 1, authBroker, backfill(fx.segs["b"], 2, ""), 400, `source_addr "": want host:port`},
		{"backfill from broker 0", 1, authBroker, backfill(fx.segs["b"], 0, "127.0.0.1:1"), 400, "source broker id 0"},
		{"backfill naming where to resume", 1, authBroker, `{"segment":{"id":"b"},"source":2,"source_addr":"127.0.0.1:1","from":0}`, 400, `unknown field "from"`},
		{"backfill of an active segment", 1, authBroker, backfill(fx.segs["c"], 2, "127.0.0.1:1"), 400, "segment not sealed"},
		{"plaintext", 4, authPlain, `{"segment":"a"}`, 401, "plaintext request"},
		{"no certificate", 4, authNone, `{"segment":"a"}`, 401, "no client certificate presented"},
		{"another CA", 4, authOtherCA, `{"segment":"a"}`, 401, "signed by another CA"},
		{"a viewer", 4, authViewer, `{"segment":"a"}`, 403, "needs a certificate of role broker"},
	} {
		before := fx.state(t)
		r, path, _ := fx.request(rpcCall{route: uint8(tc.route), auth: uint8(tc.auth), body: []byte(tc.body)})
		w := httptest.NewRecorder()
		fx.mux.ServeHTTP(w, r)
		var we wireError
		_ = json.Unmarshal(w.Body.Bytes(), &we)
		if w.Code != tc.code || !strings.Contains(we.Message, tc.want) {
			t.Errorf("%s: %s: HTTP %d %+v, want %d naming %q", tc.name, path, w.Code, we, tc.code, tc.want)
		}
		if after := fx.state(t); after != before {
			t.Errorf("%s: state changed:\n%s\n->\n%s", tc.name, before, after)
		}
	}
	// The copies survived every refused delete.
	if got := fx.db.List(); len(got) != 3 {
		t.Fatalf("copies after the table: %v, want a, b, c", got)
	}
}

func backfill(seg meta.Segment, source meta.BrokerID, addr string) string {
	b, _ := json.Marshal(BackfillRequest{Segment: seg, Source: source, SourceAddr: addr})
	return string(b)
}

// answerServer is a real HTTP server on loopback that answers every
// request with the status and body last set.
type answerServer struct {
	mu     sync.Mutex
	status int
	body   []byte
	addr   string
}

func newAnswerServer(tb testing.TB) *answerServer {
	as := &answerServer{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as.mu.Lock()
		status, body := as.status, as.body
		as.mu.Unlock()
		w.WriteHeader(status)
		w.Write(body)
	}))
	tb.Cleanup(hs.Close)
	as.addr = strings.TrimPrefix(hs.URL, "http://")
	return as
}

func (as *answerServer) set(status int, body []byte) {
	as.mu.Lock()
	as.status, as.body = status, body
	as.mu.Unlock()
}

// FuzzClientDecode feeds arbitrary answers to the client's decoding of
// responses, over a real socket: nothing panics, a failed answer comes back
// as the sentinel its code names (or ErrRemote), and a probe report the
// client accepts is valid and from the broker it asked.
func FuzzClientDecode(f *testing.F) {
	as := newAnswerServer(f)
	cl := NewClient(nil, 1, func(id meta.BrokerID) (meta.Broker, bool) {
		return meta.Broker{ID: id, RPCAddr: as.addr, DataAddr: as.addr}, true
	}, 2*time.Second)
	f.Cleanup(cl.Close)
	f.Add(uint8(0), uint16(0), []byte(`{"broker":1,"index":3,"copies":2,"anomalies":[{"segment":"a","kind":"short","size":10}]}`))
	f.Add(uint8(0), uint16(0), []byte(`{"broker":2}`))
	f.Add(uint8(0), uint16(0), []byte(`{"broker":1,"copies":-1}`))
	f.Add(uint8(0), uint16(0), []byte(`{"broker":1,"anomalies":[{"segment":"../x","kind":1}]}`))
	f.Add(uint8(1), uint16(0), []byte(`{"bytes":12,"exists":true}`))
	f.Add(uint8(1), uint16(0), []byte(`{"bytes":"12"}`))
	f.Add(uint8(2), uint16(0), []byte(`{"latched":["a","b"]}`))
	f.Add(uint8(3), uint16(209), []byte(`{"code":"latched","message":"copy latched"}`))
	f.Add(uint8(3), uint16(201), []byte(`{"code":"unauthenticated","message":"bad signature"}`))
	f.Add(uint8(3), uint16(300), []byte(`<html>bad gateway</html>`))
	f.Add(uint8(3), uint16(0), []byte(`{"items":[{"code":"short","message":"copy short"}]}`))
	f.Add(uint8(3), uint16(0), []byte(`{"items":[]}`))
	f.Add(uint8(3), uint16(0), []byte(`{"items":[{}]}`))
	f.Add(uint8(0), uint16(0), []byte(``))
	f.Add(uint8(1), uint16(0), []byte(`{"bytes":1e400}`))
	seg := meta.Segment{ID: "a", Length: 1, ByteSize: 10, Sealed: true, Checksum: meta.CRC32C(1), Replicas: []meta.BrokerID{1}}
	f.Fuzz(func(t *testing.T, call uint8, status uint16, body []byte) {
		code := http.StatusOK + int(status)%400
		as.set(code, body)
		if code == http.StatusNoContent || code == http.StatusNotModified {
			body = nil // HTTP sends no body with these
		}
		ctx := context.Background()
		var err error
		switch call % 4 {
		case 0:
			r, perr := cl.Probe(ctx, 1, 0)
			err = perr
			if err == nil {
				if r.Broker != 1 {
					t.Fatalf("accepted a probe report from broker %d, asked broker 1", r.Broker)
				}
				if verr := r.Validate(); verr != nil {
					t.Fatalf("accepted an invalid probe report: %v", verr)
				}
			}
		case 1:
			_, err = cl.Backfill(ctx, 1, 2, seg)
		case 2:
			_, err = cl.Latched(ctx, 1)
		case 3:
			err = settleOne(ctx, cl, 1, seg)
		}
		if code != http.StatusOK {
			if err == nil {
				t.Fatalf("HTTP %d %q: no error", code, body)
			}
			var we wireError
			if json.Unmarshal(body, &we) == nil && we.Code != "" {
				if want := errors.Unwrap(errCodes.Decode(we.Code, "")); !errors.Is(err, want) {
					t.Fatalf("HTTP %d code %q: %v, want it to wrap %v", code, we.Code, err, want)
				}
			} else if !errors.Is(err, ErrRemote) {
				t.Fatalf("HTTP %d %q: %v, want ErrRemote", code, body, err)
			}
			return
		}
		var br BatchResponse
		if call%4 == 3 && json.Unmarshal(body, &br) == nil && len(br.Items) == 1 && br.Items[0].Code != "" {
			// One copy's error inside a good answer: its own sentinel.
			if want := errors.Unwrap(errCodes.Decode(br.Items[0].Code, "")); !errors.Is(err, want) {
				t.Fatalf("HTTP 200 %q: %v, want it to wrap %v", body, err, want)
			}
			return
		}
		if err != nil && !errors.Is(err, ErrRemote) {
			t.Fatalf("HTTP 200 %q: %v, want nil or ErrRemote", body, err)
		}
		if err == nil && !json.Valid(body) {
			t.Fatalf("HTTP 200 %q is not JSON, yet accepted", body)
		}
	})
}

// wireError is the body of a failed RPC, as package rpc writes it.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// tooManySegments is a settle request of MaxSettleBatch+1 segments.
func tooManySegments() string {
	segs := make([]meta.Segment, MaxSettleBatch+1)
	for i := range segs {
		segs[i] = meta.Segment{ID: "a", Length: 1, ByteSize: 10, Sealed: true, Checksum: meta.CRC32C(1), Replicas: []meta.BrokerID{1}}
	}
	b, _ := json.Marshal(SegmentsRequest{Segments: segs})
	return string(b)
}
