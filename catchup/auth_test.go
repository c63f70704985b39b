package catchup

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServerRefusesUnauthenticatedChangingNothing sends, over the real
// data listener, requests with no valid signature, another secret, a
// timestamp outside the skew either way, a replayed nonce and a request cut
// before its MAC: each is refused with CodeUnauthenticated and a message
// naming why (the cut one gets no answer at all), the source is never
// opened for it, and neither the source copy nor the target changes.
func TestServerRefusesUnauthenticatedChangingNothing(t *testing.T) {
	fx := newFixture(t, 1<<14, Limits{}, ModeDefault, ModeDefault)
	srcPath := filepath.Join(fx.src.dir, string(fx.seg.ID))
	fresh := func(nonce byte, at time.Time) *request {
		return &request{seg: fx.seg, from: 0, to: 64, time: at, nonce: [16]byte{nonce}}
	}
	unsigned := appendRequest(nil, fresh(1, time.Now()), testSecret)
	for i := len(unsigned) - macSize; i < len(unsigned); i++ {
		unsigned[i] = 0
	}
	replayed := appendRequest(nil, fresh(2, time.Now()), testSecret)
	if resp, _ := rawRequest(t, fx.addr, replayed); resp.code != CodeOK {
		t.Fatalf("first delivery refused: %+v", resp)
	}
	opens := fx.src.opens.Load()
	for _, tc := range []struct {
		name string
		wire []byte
		want string
	}{
		{"unsigned", unsigned, "bad request signature"},
		{"other secret", appendRequest(nil, fresh(3, time.Now()), []byte("another-secret-of-the-cluster")), "bad request signature"},
		{"tampered range", func() []byte {
			w := appendRequest(nil, fresh(4, time.Now()), testSecret)
			w[len(w)-macSize-1] ^= 1
			return w
		}(), "bad request signature"},
		{"stale", appendRequest(nil, fresh(5, time.Now().Add(-2*DefaultMaxSkew)), testSecret), "from the server's clock"},
		{"from the future", appendRequest(nil, fresh(6, time.Now().Add(2*DefaultMaxSkew)), testSecret), "from the server's clock"},
		{"replayed", replayed, "replayed"},
	} {
		resp, _ := rawRequest(t, fx.addr, tc.wire)
		if resp.code != CodeUnauthenticated {
			t.Errorf("%s: %+v, want %v", tc.name, resp, CodeUnauthenticated)
		}
		if !strings.Contains(resp.msg, tc.want) {
			t.Errorf("%s: message %q does not say %q", tc.name, resp.msg, tc.want)
		}
		if n := fx.src.opens.Load(); n != opens {
			t.Errorf("%s: the source was opened (%d -> %d)", tc.name, opens, n)
		}
	}
	// A request cut before its MAC: no answer, nothing opened.
	conn, err := net.Dial("tcp", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	wire := appendRequest(nil, fresh(7, time.Now()), testSecret)
	if _, err := conn.Write(wire[:len(wire)-macSize]); err != nil {
		t.Fatal(err)
	}
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := readResponse(conn); err == nil {
		t.Errorf("a request cut before its MAC was answered: %+v", resp)
	}
	conn.Close()
	if n := fx.src.opens.Load(); n != opens {
		t.Errorf("cut request: the source was opened (%d -> %d)", opens, n)
	}
	if got, err := os.ReadFile(srcPath); err != nil || !bytes.Equal(got, fx.data) {
		t.Errorf("source copy changed: %v", err)
	}
	if len(fx.targetBytes(t)) != 0 {
		t.Error("target written")
	}
}
