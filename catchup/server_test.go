package catchup

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// fixture is a Server over a fileSource and a Client over a fileSink, on
// loopback, with one segment of n random bytes.
type fixture struct {
	src  *fileSource
	sink *fileSink
	srv  *Server
	cl   *Client
	addr string
	seg  meta.Segment
	data []byte
}

func newFixture(t testing.TB, n int, lim Limits, sendMode, recvMode Mode) *fixture {
	t.Helper()
	fx := &fixture{src: &fileSource{dir: t.TempDir()}, sink: &fileSink{dir: t.TempDir(), want: map[meta.SegmentID][]byte{}}}
	fx.data = make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(n)})
	r.Read(fx.data)
	fx.seg = meta.Segment{ID: "seg-1", StartOffset: 0, Length: 1, ByteSize: int64(n) - 40, Sealed: true, Checksum: meta.CRC32C(7)}
	if err := os.WriteFile(filepath.Join(fx.src.dir, string(fx.seg.ID)), fx.data, 0o644); err != nil {
		t.Fatal(err)
	}
	fx.sink.want[fx.seg.ID] = fx.data
	th, err := NewThrottle(lim)
	if err != nil {
		t.Fatal(err)
	}
	fx.srv = &Server{Source: fx.src, Secret: testSecret, Throttle: th, Mode: sendMode}
	fx.cl = &Client{Secret: testSecret, Mode: recvMode}
	fx.addr = startServer(t, fx.srv)
	return fx
}

func (fx *fixture) targetBytes(t testing.TB) []byte {
	b, err := os.ReadFile(filepath.Join(fx.sink.dir, string(fx.seg.ID)))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return b
}

func TestFetchEveryModePair(t *testing.T) {
	for _, send := range []Mode{ModeZeroCopy, ModeReadWrite} {
		for _, recv := range []Mode{ModeZeroCopy, ModeReadWrite} {
			t.Run(send.String()+"-"+recv.String(), func(t *testing.T) {
				fx := newFixture(t, 3<<20+12345, Limits{}, send, recv)
				var last, calls atomic.Int64
				res, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.sink, func(done, total int64) {
					if total != int64(len(fx.data)) || done < last.Load() {
						t.Errorf("progress(%d, %d) after %d", done, total, last.Load())
					}
					last.Store(done)
					calls.Add(1)
				})
				if err != nil {
					t.Fatal(err)
				}
				if res.From != 0 || res.Received != int64(len(fx.data)) || last.Load() != int64(len(fx.data)) || calls.Load() < 2 {
					t.Fatalf("result %+v, last progress %d after %d calls", res, last.Load(), calls.Load())
				}
				if !bytes.Equal(fx.targetBytes(t), fx.data) {
					t.Fatal("target differs from source")
				}
				ss, cs := fx.srv.Stats(), fx.cl.Stats()
				if ss.Transfers != 1 || ss.Bytes != uint64(len(fx.data)) || cs.Transfers != 1 {
					t.Fatalf("server %+v client %+v", ss, cs)
				}
				if (send == ModeZeroCopy) != (ss.Sendfile > 0) || (send == ModeReadWrite) != (ss.Write > 0) {
					t.Errorf("send mode %v: server stats %+v", send, ss)
				}
				if (recv == ModeZeroCopy) != (cs.Splice > 0) || (recv == ModeReadWrite) != (cs.Read > 0) {
					t.Errorf("recv mode %v: client stats %+v", recv, cs)
				}
			})
		}
	}
}

// A resumed fetch asks only for the missing bytes.
func TestFetchResumesFromTargetEnd(t *testing.T) {
	fx := newFixture(t, 1<<20, Limits{}, ModeDefault, ModeDefault)
	os.WriteFile(filepath.Join(fx.sink.dir, string(fx.seg.ID)), fx.data[:600000], 0o644)
	res, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != 600000 || res.Received != int64(len(fx.data))-600000 || fx.srv.Stats().Bytes != uint64(res.Received) {
		t.Fatalf("result %+v, server sent %d", res, fx.srv.Stats().Bytes)
	}
	if !bytes.Equal(fx.targetBytes(t), fx.data) {
		t.Fatal("target differs from source")
	}
}

func TestFetchWrongSecretRefused(t *testing.T) {
	fx := newFixture(t, 1<<16, Limits{}, ModeDefault, ModeDefault)
	fx.cl.Secret = []byte("not-the-cluster-secret!")
	_, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.sink, nil)
	var re *RemoteError
	if !errors.Is(err, ErrUnauthenticated) || !errors.As(err, &re) || re.Code != CodeUnauthenticated {
		t.Fatalf("got %v, want a remote %v", err, ErrUnauthenticated)
	}
	if fx.src.opens.Load() != 0 {
		t.Fatal("the source was opened for an unauthenticated request")
	}
	if len(fx.targetBytes(t)) != 0 {
		t.Fatal("target written")
	}
}

func TestServerRefusesSkewAndReplay(t *testing.T) {
	fx := newFixture(t, 1<<16, Limits{}, ModeDefault, ModeDefault)
	old := &request{seg: fx.seg, from: 0, to: 10, time: time.Now().Add(-2 * DefaultMaxSkew)}
	resp, _ := rawRequest(t, fx.addr, appendRequest(nil, old, testSecret))
	if resp.code != CodeUnauthenticated {
		t.Fatalf("stale timestamp: %+v", resp)
	}
	fresh := &request{seg: fx.seg, from: 0, to: 10, time: time.Now(), nonce: [16]byte{9}}
	wire := appendRequest(nil, fresh, testSecret)
	if resp, _ := rawRequest(t, fx.addr, wire); resp.code != CodeOK || resp.count != 10 {
		t.Fatalf("first request: %+v", resp)
	}
	if resp, _ := rawRequest(t, fx.addr, wire); resp.code != CodeUnauthenticated {
		t.Fatalf("replayed request: %+v", resp)
	}
}

func TestServerRefusesBadNameBeforeOpening(t *testing.T) {
	fx := newFixture(t, 1<<16, Limits{}, ModeDefault, ModeDefault)
	for _, id := range []meta.SegmentID{"..", "../seg-1", "a/b", ".hidden"} {
		req := &request{seg: fx.seg, from: 0, to: 10, time: time.Now()}
		req.seg.ID = id
		req.nonce[0] = byte(len(id))
		req.nonce[1] = id[len(id)-1]
		resp, _ := rawRequest(t, fx.addr, appendRequest(nil, req, testSecret))
		if resp.code != CodeBadName {
			t.Fatalf("id %q: %+v", id, resp)
		}
	}
	if fx.src.opens.Load() != 0 {
		t.Fatal("source opened for a bad name")
	}
	// The client refuses it too, before touching the sink.
	seg := fx.seg
	seg.ID = "../../x"
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, seg, nil, nil); !errors.Is(err, ErrBadName) {
		t.Fatalf("client: got %v, want %v", err, ErrBadName)
	}
}

func TestServerRefusesRangePastEnd(t *testing.T) {
	fx := newFixture(t, 1<<16, Limits{}, ModeDefault, ModeDefault)
	req := &request{seg: fx.seg, from: 0, to: int64(len(fx.data)) + 1, time: time.Now()}
	resp, _ := rawRequest(t, fx.addr, appendRequest(nil, req, testSecret))
	if resp.code != CodeOutOfRange {
		t.Fatalf("%+v", resp)
	}
	req = &request{seg: fx.seg, from: int64(len(fx.data)) - 5, to: int64(len(fx.data)), time: time.Now(), nonce: [16]byte{1}}
	resp, conn := rawRequest(t, fx.addr, appendRequest(nil, req, testSecret))
	if resp.code != CodeOK || resp.count != 5 {
		t.Fatalf("last 5 bytes: %+v", resp)
	}
	tail := make([]byte, 6)
	n, _ := conn.Read(tail)
	if n != 5 || !bytes.Equal(tail[:5], fx.data[len(fx.data)-5:]) {
		t.Fatalf("tail %x", tail[:n])
	}
}

func TestServerMapsSourceErrors(t *testing.T) {
	fx := newFixture(t, 1<<16, Limits{}, ModeDefault, ModeDefault)
	for _, c := range []struct {
		err  error
		code Code
	}{
		{ErrLatched, CodeLatched}, {ErrUnsealed, CodeUnsealed}, {ErrMismatch, CodeMismatch},
		{ErrUnknownSegment, CodeUnknownSegment}, {errors.New("disk on fire"), CodeInternal},
	} {
		fx.src.errs = map[meta.SegmentID]error{fx.seg.ID: c.err}
		_, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.sink, nil)
		var re *RemoteError
		if !errors.As(err, &re) || re.Code != c.code || !errors.Is(err, c.code.Err()) {
			t.Fatalf("source error %v: got %v, want code %v", c.err, err, c.code)
		}
	}
}

// A stalled client holds its transfer slot only for the idle timeout; a
// transfer over the concurrency limit is refused with ErrBusy meanwhile.
func TestServerBusyAndIdleTimeout(t *testing.T) {
	fx := newFixture(t, 32<<20, Limits{MaxTransfers: 1, IdleTimeout: 300 * time.Millisecond}, ModeDefault, ModeDefault)
	req := &request{seg: fx.seg, from: 0, to: int64(len(fx.data)), time: time.Now()}
	resp, stalled := rawRequest(t, fx.addr, appendRequest(nil, req, testSecret))
	if resp.code != CodeOK {
		t.Fatalf("%+v", resp)
	}
	// The stalled connection holds the only slot until the server's
	// deadline fires.
	_, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.sink, nil)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("second transfer: got %v, want %v", err, ErrBusy)
	}
	deadline := time.Now().Add(10 * time.Second)
	for fx.srv.Stats().Failed == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled transfer never timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stalled.Close()
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.sink, nil); err != nil {
		t.Fatalf("after the timeout: %v", err)
	}
}

// The client gives up on a server that stops sending.
func TestClientIdleTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		readRequest(c, testSecret)
		c.Write(appendResponse(nil, response{code: CodeOK, count: 1000}))
		c.Write(make([]byte, 100))
		time.Sleep(5 * time.Second)
	}()
	th, _ := NewThrottle(Limits{IdleTimeout: 200 * time.Millisecond})
	sink := &fileSink{dir: t.TempDir(), want: map[meta.SegmentID][]byte{"s": make([]byte, 1000)}}
	cl := &Client{Secret: testSecret, Throttle: th}
	seg := meta.Segment{ID: "s", Length: 1, ByteSize: 960, Sealed: true, Checksum: meta.CRC32C(1)}
	start := time.Now()
	_, err = cl.Fetch(context.Background(), l.Addr().String(), seg, sink, nil)
	if !errors.Is(err, ErrCut) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want %v wrapping %v", err, ErrCut, os.ErrDeadlineExceeded)
	}
	if time.Since(start) > 4*time.Second {
		t.Fatal("the idle timeout did not end the transfer")
	}
}

func TestFetchContextCancel(t *testing.T) {
	fx := newFixture(t, 8<<20, Limits{BytesPerSecond: 1 << 20}, ModeDefault, ModeDefault)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := fx.cl.Fetch(ctx, fx.addr, fx.seg, fx.sink, func(done, total int64) {
		if done > 0 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrCut) {
		t.Fatalf("got %v, want %v", err, context.Canceled)
	}
}

// The token bucket is shared: two transfers through one Throttle together
// move no faster than its rate. Only a lower bound on time is asserted
// (a slow machine only makes it slower).
func TestThrottleRateSharedAcrossTransfers(t *testing.T) {
	const rate = 4 << 20
	fx := newFixture(t, 2<<20, Limits{BytesPerSecond: rate}, ModeDefault, ModeDefault)
	sink2 := &fileSink{dir: t.TempDir(), want: fx.sink.want}
	start := time.Now()
	errs := make(chan error, 2)
	for _, s := range []*fileSink{fx.sink, sink2} {
		go func() { _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, s, nil); errs <- err }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// 4 MiB at 4 MiB/s less one burst (the bucket starts full).
	min := time.Duration(float64(2*len(fx.data)-fx.srv.Throttle.chunkSize()) / rate * float64(time.Second))
	if took := time.Since(start); took < min*9/10 {
		t.Fatalf("4 MiB through a %d B/s throttle took %v, want at least %v", rate, took, min)
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, l := range []Limits{{BytesPerSecond: -1}, {BytesPerSecond: 100}, {MaxTransfers: -1}, {QueueWait: -1}, {IdleTimeout: -1}} {
		if _, err := NewThrottle(l); err == nil {
			t.Errorf("%+v accepted", l)
		}
	}
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatal(err)
	}
}

// The zero-copy target moves spliceChunk per chunk only without a byte
// cap: under one, every chunk waits for its tokens, so it stays the
// throttle's (at most maxChunk, the token bucket's burst).
func TestSpliceChunkSize(t *testing.T) {
	var none *Throttle
	uncapped, _ := NewThrottle(DefaultLimits())
	capped, _ := NewThrottle(Limits{BytesPerSecond: 100 << 20})
	slow, _ := NewThrottle(Limits{BytesPerSecond: 64 << 10})
	for _, c := range []struct {
		name string
		th   *Throttle
		want int
	}{
		{"no throttle", none, spliceChunk},
		{"no byte cap", uncapped, spliceChunk},
		{"100 MiB/s", capped, maxChunk},
		{"64 KiB/s", slow, 8 << 10},
	} {
		if got := c.th.spliceChunkSize(); got != c.want {
			t.Errorf("%s: splice chunk %d, want %d", c.name, got, c.want)
		}
	}
}

func TestThrottleQueues(t *testing.T) {
	th, _ := NewThrottle(Limits{MaxTransfers: 1, QueueWait: 5 * time.Second})
	rel, err := th.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := th.acquire(context.Background())
		if err == nil {
			r()
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	rel()
	if err := <-got; err != nil {
		t.Fatalf("queued transfer: %v", err)
	}
}

// The defaults are zero copy at both ends: the counters show it.
func TestDefaultModesAreZeroCopy(t *testing.T) {
	fx := newFixture(t, 1<<20, Limits{}, ModeDefault, ModeDefault)
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.sink, nil); err != nil {
		t.Fatal(err)
	}
	if st := fx.srv.Stats(); st.Sendfile == 0 || st.Write != 0 {
		t.Fatalf("default send: server stats %+v, want sendfile", st)
	}
	if st := fx.cl.Stats(); st.Splice == 0 || st.Read != 0 {
		t.Fatalf("default receive: client stats %+v, want splice", st)
	}
}
