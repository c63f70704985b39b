package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/testbed/harness"
)

// adminRoutes are the admin requests whose decoding FuzzAdminRequest
// drives: what of the fuzzed input each reads (a body, a path id, a fault
// kind).
var adminRoutes = []struct {
	name         string
	body, pathID bool
}{
	{"POST /v1/segments", true, false},
	{"POST /v1/segments/{id}/records", true, true},
	{"POST /v1/segments/{id}/seal", false, true},
	{"POST /v1/load", true, false},
	{"POST /v1/faults/{kind}/{id}", true, true},
	{"POST /v1/internal/apply", true, false},
	{"POST /v1/heal/acknowledge/{id}", false, true},
	{"POST /v1/internal/copies/{id}/create", true, true},
}

// parseAdmin runs the decoder of route on the fuzzed input and returns the
// decoded request as JSON, so that a second decoding can be compared.
func parseAdmin(route int, pathID, kind string, body []byte) (string, error) {
	var v any
	var err error
	switch route {
	case 0:
		v, err = parseCreate(body)
	case 1:
		var id meta.SegmentID
		var req admin.RecordsRequest
		id, req, err = parseRecords(pathID, body)
		v = struct {
			ID  meta.SegmentID
			Req admin.RecordsRequest
		}{id, req}
	case 2, 6:
		v, err = parseSegmentID(pathID)
	case 3:
		v, err = parseLoad(body)
	case 4:
		var k string
		var id meta.SegmentID
		k, id, err = parseFault(kind, pathID, body)
		v = []any{k, id}
	case 5:
		var c meta.Command
		if c, err = parseApply(body); err == nil {
			var enc []byte
			enc, err = meta.EncodeCommand(c)
			v = json.RawMessage(enc)
		}
	case 7:
		var id meta.SegmentID
		if id, err = parseSegmentID(pathID); err == nil {
			var req copyCreate
			err = decodeJSON(body, &req)
			v = []any{id, req}
		}
	}
	if err != nil {
		return "", err
	}
	out, merr := json.Marshal(v)
	if merr != nil {
		return "", merr
	}
	return string(out), nil
}

// reencode turns a decoded request back into the inputs of its route.
func reencode(route int, decoded string) (pathID, kind string, body []byte) {
	switch route {
	case 1:
		var v struct {
			ID  meta.SegmentID
			Req json.RawMessage
		}
		_ = json.Unmarshal([]byte(decoded), &v)
		return string(v.ID), "", v.Req
	case 2, 6:
		var id string
		_ = json.Unmarshal([]byte(decoded), &id)
		return id, "", nil
	case 4:
		var v []json.RawMessage
		_ = json.Unmarshal([]byte(decoded), &v)
		var k, id string
		_ = json.Unmarshal(v[0], &k)
		_ = json.Unmarshal(v[1], &id)
		return id, k, []byte(`{}`)
	case 5:
		b, _ := json.Marshal(applyRequest{Command: json.RawMessage(decoded)})
		return "", "", b
	case 7:
		var v []json.RawMessage
		_ = json.Unmarshal([]byte(decoded), &v)
		var id string
		_ = json.Unmarshal(v[0], &id)
		return id, "", v[1]
	}
	return "", "", []byte(decoded)
}

// FuzzAdminRequest drives the admin API's request decoders (bodies and
// path parameters) with arbitrary input: nothing panics; what a decoder
// refuses maps to HTTP 400 with a message; a body that is not JSON, or a
// path id that could leave the copies directory, is always refused; and
// what a decoder accepts is a valid request that decodes again to itself.
func FuzzAdminRequest(f *testing.F) {
	for route := range adminRoutes {
		f.Add(uint8(route), "seg-1", "latch", []byte(`{}`))
	}
	f.Add(uint8(0), "", "", []byte(`{"id":"seg-1","start_offset":7,"replicas":[1,2]}`))
	f.Add(uint8(1), "seg-1", "", []byte(`{"count":3,"size":10,"seed":9}`))
	f.Add(uint8(1), "seg-1", "", []byte(`{"records":["aGVsbG8=","d29ybGQ="]}`))
	f.Add(uint8(3), "", "", []byte(`{"segments":2,"records_per_segment":4,"record_size":16,"prefix":"t","first":3}`))
	f.Add(uint8(4), "seg-1", "flip", []byte(`{"at":12}`))
	f.Add(uint8(5), "", "", []byte(`{"command":{"op":"register_broker","args":{"broker":{"id":2}}}}`))
	f.Fuzz(func(t *testing.T, r uint8, pathID, kind string, body []byte) {
		route := int(r) % len(adminRoutes)
		rt := adminRoutes[route]
		got, err := parseAdmin(route, pathID, kind, body)
		if err != nil {
			code, status := adminCodes.Encode(err)
			if status != 400 || (code != "bad_request" && code != "invalid") || err.Error() == "" {
				t.Fatalf("%s: refusal %v answers HTTP %d %s, want 400 bad_request or invalid", rt.name, err, status, code)
			}
			return
		}
		if rt.body && len(bytes.TrimSpace(body)) > 0 && !json.Valid(body) {
			t.Fatalf("%s: accepted a body that is not JSON: %q", rt.name, body)
		}
		if rt.pathID && (pathID == "" || strings.ContainsAny(pathID, "/\\\x00") || strings.HasPrefix(pathID, ".")) {
			t.Fatalf("%s: accepted path id %q", rt.name, pathID)
		}
		p, k, b := reencode(route, got)
		again, err := parseAdmin(route, p, k, b)
		if err != nil || again != got {
			t.Fatalf("%s: accepted %q (path %q kind %q) as %s, which decodes again as %s, %v", rt.name, body, pathID, kind, got, again, err)
		}
	})
}

// TestAdminDecodersNameTheProblem: each refusal says what was wrong.
func TestAdminDecodersNameTheProblem(t *testing.T) {
	for _, tc := range []struct {
		route        int
		pathID, kind string
		body         string
		want         string
	}{
		{0, "", "", `{"id":"../x"}`, `segment id "../x" starts with a dot`},
		{0, "", "", `{"id":"x","bogus":1}`, `unknown field "bogus"`},
		{0, "", "", `{"id":"x"} {"id":"y"}`, "data after the JSON object"},
		{0, "", "", `{"id":"x","replicas":[1,1]}`, "broker 1 appears twice"},
		{0, "", "", `{"id":"x","start_offset":-1}`, "cannot unmarshal number -1"},
		{0, "", "", `{"id":"x","start_offset":1e30}`, "cannot unmarshal number 1e30"},
		{0, "", "", `{"id":`, "unexpected EOF"},
		{0, "", "", `[]`, "cannot unmarshal array"},
		{0, "", "", ``, "segment id is empty"},
		{1, "a/b", "", `{}`, `byte '/' at 1`},
		{1, "x", "", `{"count":-1}`, "count = -1"},
		{1, "x", "", `{"count":2,"records":["YQ=="]}`, "not both"},
		{1, "x", "", `{"records":["!!"]}`, "records[0]"},
		{1, "x", "", `{"count":1,"size":99999999999}`, "size = 99999999999"},
		{2, "..", "", ``, "starts with a dot"},
		{3, "", "", `{"segments":0}`, "segments = 0"},
		{3, "", "", `{"prefix":"../"}`, `prefix = "../"`},
		{3, "", "", `{"first":-5}`, "first = -5"},
		{3, "", "", `{"records_per_segment":2000000}`, "records_per_segment = 2000000"},
		{3, "", "", `{"concurrency":100000}`, "concurrency = 100000"},
		{4, "x", "melt", ``, `fault "melt"`},
		{4, "x", "truncate", `{}`, `fault "truncate": want latch`},
		{4, "x", "latch", `{"at":1}`, `"at"`},
		{5, "", "", ``, "no command"},
		{5, "", "", `{"command":{"op":"create_segment","args":{}}}`, "empty replica set"},
		{5, "", "", `{"command":{"op":"explode"}}`, `op "explode" is unknown`},
		{7, "x", "", `{"start_offset":"0"}`, "cannot unmarshal string"},
	} {
		_, err := parseAdmin(tc.route, tc.pathID, tc.kind, []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !(errors.Is(err, errBadRequest) || errors.Is(err, meta.ErrInvalid)) {
			t.Errorf("%s path %q kind %q body %q: %v, want a bad request naming %q", adminRoutes[tc.route].name, tc.pathID, tc.kind, tc.body, err, tc.want)
		}
	}
}

// freeAddr returns a loopback address with a port nothing listens on,
// claimed for this process (harness.FreeLoopbackPorts): a port the kernel
// handed to a listener on port 0 and took back can come back at once, and
// two brokers of one cluster were once given the same raft address.
func freeAddr(t *testing.T) string {
	t.Helper()
	addrs, err := harness.FreeLoopbackPorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// adminState is what an admin request could change: the copies directory,
// each copy's durable end, and the replicated metadata.
func adminState(t *testing.T, b *Server) string {
	t.Helper()
	var s strings.Builder
	// Every file under copies/, each shard directory included.
	copies := filepath.Dir(filepath.Dir(b.db.Path("x")))
	err := filepath.WalkDir(copies, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(copies, path)
		fmt.Fprintf(&s, "file %s %d\n", rel, fi.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range b.db.List() {
		end, err := b.db.DurableEnd(id)
		fmt.Fprintf(&s, "copy %s %+v %v\n", id, end, err)
	}
	snap := b.node.Snapshot()
	js, _ := json.Marshal(struct {
		Segments []meta.Segment
		Brokers  []meta.Broker
		RF       int
	}{snap.Segments, snap.Brokers, snap.ReplicationFactor})
	s.Write(js)
	return s.String()
}

// adminFixture is a real one-broker cluster (raft, store and listener
// real, fault injection on) with its certificates, and HTTPS clients of
// every kind of caller.
type adminFixture struct {
	b       *Server
	clients map[string]*http.Client // "none", "viewer", "operator", "client", "broker", "other-ca"
}

func newAdminFixture(t *testing.T) *adminFixture {
	t.Helper()
	root := t.TempDir()
	l, err := pki.CreateLocal(filepath.Join(root, "certs"), []meta.BrokerID{1, 2}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.CreateLocal(filepath.Join(root, "other"), []meta.BrokerID{1}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir, cfg.AdminListen, cfg.RaftListen = filepath.Join(root, "data"), "127.0.0.1:0", freeAddr(t)
	cfg.CertsDir = l.BrokerDir(1)
	cfg.ReplicationFactor, cfg.FaultInjection = 1, true
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := Open(context.Background(), cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		snap := b.node.Snapshot()
		if br, ok := snap.Broker(1); ok && br.AdminAddr != "" && b.node.IsLeader() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the broker did not lead and register within 10s")
		}
	}
	load := func(c *pki.Certs, err error) *http.Client {
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c.ClientConfig()}}
	}
	f := &adminFixture{b: b, clients: map[string]*http.Client{
		"viewer":   load(pki.LoadClient(l.ClientDir(), "viewer")),
		"operator": load(pki.LoadClient(l.ClientDir(), "operator")),
		"client":   load(pki.LoadClient(l.ClientDir(), "client")),
		"broker":   load(pki.LoadBroker(l.BrokerDir(2))),
	}}
	// No certificate: trusts the server, presents nothing.
	v, _ := pki.LoadClient(l.ClientDir(), "viewer")
	none := v.ClientConfig()
	none.GetClientCertificate = nil
	f.clients["none"] = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: none}}
	// Another CA's operator, who skips verifying the server to get as far
	// as the request.
	oc, err := pki.LoadClient(other.ClientDir(), "operator")
	if err != nil {
		t.Fatal(err)
	}
	stranger := oc.ClientConfig()
	stranger.VerifyConnection = nil
	f.clients["other-ca"] = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: stranger}}
	return f
}

// answer is an admin error body.
type answer struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (f *adminFixture) do(t *testing.T, who, method, path, body string) (int, answer) {
	t.Helper()
	req, err := http.NewRequest(method, "https://"+f.b.adminAddr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.clients[who].Do(req)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", method, path, who, err)
	}
	defer res.Body.Close()
	var a answer
	_ = json.NewDecoder(res.Body).Decode(&a)
	return res.StatusCode, a
}

// TestAdminRefusesBadRequestsChangingNothing sends malformed and escaping
// requests, with the right certificates, to the admin API of a real
// one-broker cluster over its socket: each is refused with a status and
// code that fit and an error naming the problem, and neither the copies
// nor the metadata change.
func TestAdminRefusesBadRequestsChangingNothing(t *testing.T) {
	f := newAdminFixture(t)
	if code, a := f.do(t, "operator", "POST", "/v1/segments", `{"id":"good","replicas":[1]}`); code != 200 {
		t.Fatalf("create: HTTP %d %+v", code, a)
	}
	if code, a := f.do(t, "operator", "POST", "/v1/segments/good/records", `{"count":3,"size":10}`); code != 200 {
		t.Fatalf("append: HTTP %d %+v", code, a)
	}
	for _, tc := range []struct {
		name, who, path, body string
		status                int
		code, want            string
	}{
		{"create escaping id", "operator", "/v1/segments", `{"id":"../good"}`, 400, "invalid", "starts with a dot"},
		{"create unknown field", "operator", "/v1/segments", `{"id":"x","bogus":1}`, 400, "bad_request", `unknown field "bogus"`},
		{"create trailing data", "operator", "/v1/segments", `{"id":"x"} {"id":"y"}`, 400, "bad_request", "data after the JSON object"},
		{"create truncated", "operator", "/v1/segments", `{"id":"x",`, 400, "bad_request", "unexpected EOF"},
		{"create twice-listed replica", "operator", "/v1/segments", `{"id":"x","replicas":[1,1]}`, 400, "invalid", "appears twice"},
		{"create huge offset", "operator", "/v1/segments", `{"id":"x","start_offset":1e30}`, 400, "bad_request", "cannot unmarshal number"},
		{"create existing", "operator", "/v1/segments", `{"id":"good","start_offset":9}`, 409, "segment_exists", "good"},
		{"append negative count", "operator", "/v1/segments/good/records", `{"count":-1}`, 400, "bad_request", "count = -1"},
		{"append both forms", "operator", "/v1/segments/good/records", `{"count":1,"records":["YQ=="]}`, 400, "bad_request", "not both"},
		{"append bad base64", "operator", "/v1/segments/good/records", `{"records":["!!"]}`, 400, "bad_request", "records[0]"},
		{"append huge size", "operator", "/v1/segments/good/records", `{"count":1,"size":99999999999}`, 400, "bad_request", "size = 99999999999"},
		{"append wrong type", "operator", "/v1/segments/good/records", `{"count":"3"}`, 400, "bad_request", "cannot unmarshal string"},
		{"append escaped path", "operator", "/v1/segments/..%2Fgood/records", `{"count":1}`, 400, "invalid", "starts with a dot"},
		{"seal dot id", "operator", "/v1/segments/.hidden/seal", ``, 400, "invalid", "starts with a dot"},
		{"seal unknown", "operator", "/v1/segments/nope/seal", ``, 404, "unknown_segment", "nope"},
		{"load zero", "operator", "/v1/load", `{"segments":0}`, 400, "bad_request", "segments = 0"},
		{"load escaping prefix", "operator", "/v1/load", `{"prefix":"../x"}`, 400, "bad_request", `prefix = "../x"`},
		{"load negative first", "operator", "/v1/load", `{"first":-5}`, 400, "bad_request", "first = -5"},
		{"fault unknown kind", "operator", "/v1/faults/melt/good", ``, 400, "bad_request", `fault "melt"`},
		{"fault on the file", "operator", "/v1/faults/truncate/good", ``, 400, "bad_request", `fault "truncate": want latch`},
		{"fault with a body", "operator", "/v1/faults/latch/good", `{"at":1}`, 400, "bad_request", "at"},
		{"fault unknown copy", "operator", "/v1/faults/latch/ghost", ``, 404, "not_found", "ghost"},
		{"acknowledge dot id", "operator", "/v1/heal/acknowledge/.x", ``, 400, "invalid", "starts with a dot"},
		{"internal apply bad command", "broker", "/v1/internal/apply", `{"command":{"op":"create_segment","args":{}}}`, 400, "bad_request", "empty replica set"},
		{"internal create escaping", "broker", "/v1/internal/copies/..%2Fevil/create", `{}`, 400, "invalid", "starts with a dot"},
	} {
		before := adminState(t, f.b)
		status, a := f.do(t, tc.who, "POST", tc.path, tc.body)
		if status != tc.status || a.Code != tc.code || !strings.Contains(a.Message, tc.want) {
			t.Errorf("%s: POST %s %s: HTTP %d %+v, want %d %s naming %q", tc.name, tc.path, tc.body, status, a, tc.status, tc.code, tc.want)
		}
		if after := adminState(t, f.b); after != before {
			t.Errorf("%s: state changed:\n%s\n->\n%s", tc.name, before, after)
		}
	}
}

// TestAdminRoleMatrix calls every admin route as every kind of caller (no
// certificate, another CA's operator, viewer, operator, a Kafka client,
// broker): a caller
// the route does not allow gets 401 (no or untrusted certificate) or 403
// (a role it does not allow) with a message naming what was missing, and
// nothing changes; an allowed caller gets past authorization (the
// state-changing routes are sent requests that then fail validation, so
// the test itself changes nothing either).
func TestAdminRoleMatrix(t *testing.T) {
	f := newAdminFixture(t)
	if code, a := f.do(t, "operator", "POST", "/v1/segments", `{"id":"good","replicas":[1]}`); code != 200 {
		t.Fatalf("create: HTTP %d %+v", code, a)
	}
	view, oper, brok := []string{"viewer", "operator"}, []string{"operator"}, []string{"broker"}
	for _, rt := range []struct {
		method, path, body string
		allowed            []string
	}{
		{"GET", "/v1/health", "", view},
		{"GET", "/v1/metadata", "", view},
		{"GET", "/v1/copies", "", view},
		{"GET", "/v1/status", "", view},
		{"GET", "/v1/plan", "", view},
		{"POST", "/v1/segments", `{"id":"../x"}`, oper},
		{"POST", "/v1/segments/good/records", `{"count":-1}`, oper},
		{"POST", "/v1/segments/.x/seal", "", oper},
		{"POST", "/v1/load", `{"segments":0}`, oper},
		{"POST", "/v1/heal/release", "", oper},
		{"POST", "/v1/heal/acknowledge/.x", "", oper},
		{"POST", "/v1/faults/melt/good", "", oper},
		{"POST", "/v1/internal/apply", `{"command":{"op":"set_replication_factor","args":{"factor":0}}}`, brok},
		{"POST", "/v1/internal/segments", `{"id":"../x"}`, brok},
		{"POST", "/v1/internal/copies/.x/create", `{}`, brok},
		{"POST", "/v1/internal/copies/good/append", `{"count":-1}`, brok},
		{"POST", "/v1/internal/copies/.x/seal", `{}`, brok},
		{"POST", "/v1/internal/copies/.x/drop", `{}`, brok},
		{"POST", "/v1/internal/heal/release", "", brok},
		{"POST", "/v1/internal/heal/acknowledge/.x", "", brok},
		{"GET", "/v1/internal/plan", "", brok},
	} {
		for _, who := range []string{"none", "other-ca", "viewer", "operator", "client", "broker"} {
			before := adminState(t, f.b)
			status, a := f.do(t, who, rt.method, rt.path, rt.body)
			allowed := slices.Contains(rt.allowed, who)
			switch {
			case allowed && (status == 401 || status == 403):
				t.Errorf("%s %s as %s: HTTP %d %+v, want allowed", rt.method, rt.path, who, status, a)
			case !allowed && (who == "none" || who == "other-ca") && (status != 401 || a.Code != "unauthenticated"):
				t.Errorf("%s %s as %s: HTTP %d %+v, want 401 unauthenticated", rt.method, rt.path, who, status, a)
			case !allowed && who != "none" && who != "other-ca" && (status != 403 || !strings.Contains(a.Message, "needs a certificate of role")):
				t.Errorf("%s %s as %s: HTTP %d %+v, want 403 naming the role", rt.method, rt.path, who, status, a)
			}
			if who == "client" && !allowed && !strings.Contains(a.Message, "has role client") {
				t.Errorf("%s %s as a Kafka client: %q does not name the role it has", rt.method, rt.path, a.Message)
			}
			if who == "none" && !allowed && !strings.Contains(a.Message, "no client certificate") {
				t.Errorf("%s %s without a certificate: %q does not say the certificate is missing", rt.method, rt.path, a.Message)
			}
			if who == "other-ca" && !allowed && !strings.Contains(a.Message, "another CA") {
				t.Errorf("%s %s with another CA: %q does not name the CA", rt.method, rt.path, a.Message)
			}
			if after := adminState(t, f.b); !allowed && after != before {
				t.Errorf("%s %s as %s: refused, yet the state changed:\n%s\n->\n%s", rt.method, rt.path, who, before, after)
			}
		}
	}
	// Plaintext on the TLS listener: refused before any route.
	before := adminState(t, f.b)
	res, err := http.Post("http://"+f.b.adminAddr+"/v1/load", "application/json", strings.NewReader(`{"segments":1}`))
	if err == nil {
		res.Body.Close()
		if res.StatusCode == 200 {
			t.Fatal("a plaintext load was accepted")
		}
	}
	if after := adminState(t, f.b); after != before {
		t.Fatalf("a plaintext request changed the state")
	}
}

// TestFaultRoutesOnlyWithFaultInjection: without fault_injection the
// routes do not exist (404), even for an operator.
func TestFaultRoutesOnlyWithFaultInjection(t *testing.T) {
	f := newAdminFixture(t)
	f.b.faults = nil
	l, err := rpc.Listen("127.0.0.1:0", f.b.certs)
	if err != nil {
		t.Fatal(err)
	}
	hs := rpc.NewHTTPServer(f.b.routes(), zerolog.Nop())
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	res, err := f.clients["operator"].Post("https://"+l.Addr().String()+"/v1/faults/latch/good", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /v1/faults/latch/good without fault_injection: HTTP %d, want 404", res.StatusCode)
	}
}
