package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

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
