package broker

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// A raw frame's query: start and offset, and the leader's previous round
// (waited_ns) when it sends one; a request without it (an older leader,
// a first round) is accepted as unknown. A bad value is a bad request
// naming the parameter.
func TestParseFrameQuery(t *testing.T) {
	id := meta.SegmentID("t-0-0")
	for _, tc := range []struct {
		query  string
		waited time.Duration
		bad    string // the parameter the error names; "": accepted
	}{
		{"start=3&offset=7", 0, ""},
		{"start=3&offset=7&waited_ns=0", 0, ""},
		{"start=3&offset=7&waited_ns=1500000", 1500 * time.Microsecond, ""},
		{"start=3&offset=7&waited_ns=", 0, "waited_ns"},
		{"start=3&offset=7&waited_ns=12ms", 0, "waited_ns"},
		{"start=3&offset=7&waited_ns=-1", 0, "waited_ns"},
		{"start=3&offset=7&waited_ns=9223372036854775808", 0, "waited_ns"},
		{"offset=7&waited_ns=5", 0, "start"},
		{"start=3&offset=x", 0, "offset"},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		req, err := parseFrameQuery(id, q)
		switch {
		case tc.bad == "" && (err != nil || req.Start != 3 || req.Offset != 7 || req.Waited != tc.waited):
			t.Errorf("%q: %+v, %v; want start 3, offset 7, waited %v", tc.query, req, err, tc.waited)
		case tc.bad != "" && (!errors.Is(err, errBadRequest) || !strings.Contains(err.Error(), tc.bad+" ")):
			t.Errorf("%q: %v; want a bad request naming %s", tc.query, err, tc.bad)
		}
	}
}

// The JSON form of a frame refuses a negative waited_ns before it
// touches the copy.
func TestInternalFrameRefusesANegativeWait(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/internal/copies/t-0-0/frame", nil)
	r.SetPathValue("id", "t-0-0")
	_, err := (&Server{}).internalFrame(r, []byte(`{"start":0,"offset":0,"waited_ns":-1,"payload":""}`))
	if !errors.Is(err, errBadRequest) || !strings.Contains(err.Error(), "waited_ns") {
		t.Fatalf("a frame with waited_ns -1: %v; want a bad request naming waited_ns", err)
	}
}

// A frame weighs its batch's records in the follower's client latency, as
// a Produce does in the listener's; a payload that is no batch weighs one.
func TestFrameRecords(t *testing.T) {
	if got := frameRecords(testBatch("a", "b", "c")); got != 3 {
		t.Errorf("a batch of 3 records weighs %d", got)
	}
	if got := frameRecords([]byte("not a batch")); got != 1 {
		t.Errorf("a payload that is no batch weighs %d, want 1", got)
	}
}
