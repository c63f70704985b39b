package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
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
		var req RecordsRequest
		id, req, err = parseRecords(pathID, body)
		v = struct {
			ID  meta.SegmentID
			Req RecordsRequest
		}{id, req}
	case 2, 6:
		v, err = parseSegmentID(pathID)
	case 3:
		v, err = parseLoad(body)
	case 4:
		var k string
		var id meta.SegmentID
		var req FaultRequest
		k, id, req, err = parseFault(kind, pathID, body)
		v = []any{k, id, req}
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
		return id, k, v[2]
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
		f.Add(uint8(route), "seg-1", "truncate", []byte(`{}`))
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
			w := httptest.NewRecorder()
			writeError(w, err)
			var ae adminError
			if jerr := json.Unmarshal(w.Body.Bytes(), &ae); jerr != nil || w.Code != 400 || (ae.Code != "bad_request" && ae.Code != "invalid") || ae.Message == "" {
				t.Fatalf("%s: refusal %v answers HTTP %d %q, want 400 bad_request or invalid", rt.name, err, w.Code, w.Body.Bytes())
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
		{4, "x", "truncate", `{"at":-1}`, "at = -1"},
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

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// adminState is what an admin request could change: the copies directory,
// each copy's durable end, and the replicated metadata.
func adminState(t *testing.T, b *broker) string {
	t.Helper()
	var s strings.Builder
	ents, err := os.ReadDir(filepath.Dir(b.db.Path("x")))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, _ := e.Info()
		fmt.Fprintf(&s, "file %s %d\n", e.Name(), fi.Size())
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

// TestAdminRefusesBadRequestsChangingNothing sends malformed, escaping and
// unauthenticated requests to the admin API of a real one-broker cluster
// (raft, store and listener real) over its socket: each is refused with a
// status and code that fit and an error naming the problem, and neither
// the copies nor the metadata change.
func TestAdminRefusesBadRequestsChangingNothing(t *testing.T) {
	const secret = "0123456789abcdef-admin"
	cfg := DefaultConfig()
	cfg.DataDir, cfg.AdminListen, cfg.RaftListen = filepath.Join(t.TempDir(), "data"), "127.0.0.1:0", freeAddr(t)
	cfg.ReplicationFactor, cfg.FaultInjection, cfg.Heal.Secret = 1, true, secret
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := openBroker(context.Background(), cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		snap := b.node.Snapshot()
		if br, ok := snap.Broker(1); ok && br.AdminAddr != "" && b.node.IsLeader() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the broker did not lead and register within 10s")
		}
	}
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path, body string, hdr map[string]string) (int, adminError) {
		req, err := http.NewRequest(http.MethodPost, "http://"+b.adminAddr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var ae adminError
		_ = json.NewDecoder(res.Body).Decode(&ae)
		return res.StatusCode, ae
	}
	signed := func(path, body string, at time.Time, key string) map[string]string {
		ts := at.UnixMilli()
		return map[string]string{authHeader: fmt.Sprintf("%d %s", ts, adminMAC([]byte(key), path, ts, []byte(body)))}
	}
	if code, ae := post("/v1/segments", `{"id":"good","replicas":[1]}`, nil); code != 200 {
		t.Fatalf("create: HTTP %d %+v", code, ae)
	}
	if code, ae := post("/v1/segments/good/records", `{"count":3,"size":10}`, nil); code != 200 {
		t.Fatalf("append: HTTP %d %+v", code, ae)
	}
	now := time.Now()
	for _, tc := range []struct {
		name, path, body string
		hdr              map[string]string
		status           int
		code, want       string
	}{
		{"create escaping id", "/v1/segments", `{"id":"../good"}`, nil, 400, "invalid", "starts with a dot"},
		{"create unknown field", "/v1/segments", `{"id":"x","bogus":1}`, nil, 400, "bad_request", `unknown field "bogus"`},
		{"create trailing data", "/v1/segments", `{"id":"x"} {"id":"y"}`, nil, 400, "bad_request", "data after the JSON object"},
		{"create truncated", "/v1/segments", `{"id":"x",`, nil, 400, "bad_request", "unexpected EOF"},
		{"create twice-listed replica", "/v1/segments", `{"id":"x","replicas":[1,1]}`, nil, 400, "invalid", "appears twice"},
		{"create huge offset", "/v1/segments", `{"id":"x","start_offset":1e30}`, nil, 400, "bad_request", "cannot unmarshal number"},
		{"create existing", "/v1/segments", `{"id":"good","start_offset":9}`, nil, 409, "segment_exists", "good"},
		{"append negative count", "/v1/segments/good/records", `{"count":-1}`, nil, 400, "bad_request", "count = -1"},
		{"append both forms", "/v1/segments/good/records", `{"count":1,"records":["YQ=="]}`, nil, 400, "bad_request", "not both"},
		{"append bad base64", "/v1/segments/good/records", `{"records":["!!"]}`, nil, 400, "bad_request", "records[0]"},
		{"append huge size", "/v1/segments/good/records", `{"count":1,"size":99999999999}`, nil, 400, "bad_request", "size = 99999999999"},
		{"append wrong type", "/v1/segments/good/records", `{"count":"3"}`, nil, 400, "bad_request", "cannot unmarshal string"},
		{"append escaped path", "/v1/segments/..%2Fgood/records", `{"count":1}`, nil, 400, "invalid", "starts with a dot"},
		{"seal dot id", "/v1/segments/.hidden/seal", ``, nil, 400, "invalid", "starts with a dot"},
		{"seal unknown", "/v1/segments/nope/seal", ``, nil, 404, "unknown_segment", "nope"},
		{"load zero", "/v1/load", `{"segments":0}`, nil, 400, "bad_request", "segments = 0"},
		{"load escaping prefix", "/v1/load", `{"prefix":"../x"}`, nil, 400, "bad_request", `prefix = "../x"`},
		{"load negative first", "/v1/load", `{"first":-5}`, nil, 400, "bad_request", "first = -5"},
		{"fault unknown kind", "/v1/faults/melt/good", ``, nil, 400, "bad_request", `fault "melt"`},
		{"fault negative at", "/v1/faults/truncate/good", `{"at":-1}`, nil, 400, "bad_request", "at = -1"},
		{"fault unknown copy", "/v1/faults/truncate/ghost", ``, nil, 404, "not_found", "ghost"},
		{"acknowledge dot id", "/v1/heal/acknowledge/.x", ``, nil, 400, "invalid", "starts with a dot"},
		{"internal apply unsigned", "/v1/internal/apply", `{"command":{"op":"set_replication_factor","args":{"factor":3}}}`, nil, 401, "unauthenticated", "missing or malformed"},
		{"internal create unsigned", "/v1/internal/copies/evil/create", `{}`, nil, 401, "unauthenticated", "missing or malformed"},
		{"internal append wrong secret", "/v1/internal/copies/good/append", `{"count":1}`, signed("/v1/internal/copies/good/append", `{"count":1}`, now, "another-secret-0123456"), 401, "unauthenticated", "bad signature"},
		{"internal seal stale", "/v1/internal/copies/good/seal", `{}`, signed("/v1/internal/copies/good/seal", `{}`, now.Add(-2*adminSkew), secret), 401, "unauthenticated", "more than 1m0s"},
		{"internal seal bad timestamp", "/v1/internal/copies/good/seal", `{}`, map[string]string{authHeader: "soon 00"}, 401, "unauthenticated", `timestamp "soon"`},
		{"internal create other path", "/v1/internal/copies/evil/create", `{}`, signed("/v1/internal/copies/good/create", `{}`, now, secret), 401, "unauthenticated", "bad signature"},
		{"internal apply bad command", "/v1/internal/apply", `{"command":{"op":"create_segment","args":{}}}`, signed("/v1/internal/apply", `{"command":{"op":"create_segment","args":{}}}`, now, secret), 400, "bad_request", "empty replica set"},
		{"internal create escaping", "/v1/internal/copies/..%2Fevil/create", `{}`, signed("/v1/internal/copies/../evil/create", `{}`, now, secret), 400, "invalid", "starts with a dot"},
	} {
		before := adminState(t, b)
		status, ae := post(tc.path, tc.body, tc.hdr)
		if status != tc.status || ae.Code != tc.code || !strings.Contains(ae.Message, tc.want) {
			t.Errorf("%s: POST %s %s: HTTP %d %+v, want %d %s naming %q", tc.name, tc.path, tc.body, status, ae, tc.status, tc.code, tc.want)
		}
		if after := adminState(t, b); after != before {
			t.Errorf("%s: state changed:\n%s\n->\n%s", tc.name, before, after)
		}
	}
}
