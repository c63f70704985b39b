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
	fx.srv = &Server{Source: fx.src, Self: testSource, Tickets: testCA, Throttle: th, Mode: sendMode}
	fx.cl = &Client{Mode: recvMode}
	fx.addr = startServer(t, fx.srv)
	return fx
}

// ticket is a fresh ticket for fx's whole copy; edit (may be nil) changes
// it before it is signed.
func (fx *fixture) ticket(t testing.TB, edit func(*Ticket)) []byte {
	t.Helper()
	return issue(t, testTicket(fx.seg, int64(len(fx.data))), edit)
}

// req is a request for [from, to) of fx's copy with a fresh ticket.
func (fx *fixture) req(t testing.TB, from, to int64) *request {
	t.Helper()
	return &request{seg: fx.seg, from: from, to: to, ticket: fx.ticket(t, nil)}
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
				res, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, func(done, total int64) {
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
				// The server counts its transfer after its last write: it
				// may lag the client's return.
				waitFor(t, "the server to count its transfer", func() bool { return fx.srv.Stats().Transfers == 1 })
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
	res, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to count its transfer", func() bool { return fx.srv.Stats().Transfers == 1 })
	if res.From != 600000 || res.Received != int64(len(fx.data))-600000 || fx.srv.Stats().Bytes != uint64(res.Received) {
		t.Fatalf("result %+v, server sent %d", res, fx.srv.Stats().Bytes)
	}
	if !bytes.Equal(fx.targetBytes(t), fx.data) {
		t.Fatal("target differs from source")
	}
}

// A ticket signed by a key the cluster CA did not certify is refused
// before the source is opened; nothing reaches the target.
func TestFetchUntrustedTicketRefused(t *testing.T) {
	fx := newFixture(t, 1<<16, Limits{}, ModeDefault, ModeDefault)
	forged, err := IssueTicket(newFakeKey(testIssuer, 9), testTicket(fx.seg, int64(len(fx.data))))
	if err != nil {
		t.Fatal(err)
	}
	_, err = fx.cl.Fetch(context.Background(), fx.addr, fx.seg, forged, fx.sink, nil)
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

func TestServerRefusesBadNameBeforeOpening(t *testing.T) {
	fx := newFixture(t, 1<<16, Limits{}, ModeDefault, ModeDefault)
	for _, id := range []meta.SegmentID{"..", "../seg-1", "a/b", ".hidden"} {
		req := fx.req(t, 0, 10)
		req.seg.ID = id
		resp, _ := rawRequest(t, fx.addr, appendRequest(nil, req))
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
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, seg, fx.ticket(t, nil), nil, nil); !errors.Is(err, ErrBadName) {
		t.Fatalf("client: got %v, want %v", err, ErrBadName)
	}
}

func TestServerRefusesRangePastEnd(t *testing.T) {
	fx := newFixture(t, 1<<16, Limits{}, ModeDefault, ModeDefault)
	// A ticket may grant more than the copy holds: the server checks the
	// copy's real size too.
	req := fx.req(t, 0, int64(len(fx.data))+1)
	req.ticket = fx.ticket(t, func(tk *Ticket) { tk.To++ })
	resp, _ := rawRequest(t, fx.addr, appendRequest(nil, req))
	if resp.code != CodeOutOfRange {
		t.Fatalf("%+v", resp)
	}
	req = fx.req(t, int64(len(fx.data))-5, int64(len(fx.data)))
	resp, conn := rawRequest(t, fx.addr, appendRequest(nil, req))
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
		_, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, nil)
		var re *RemoteError
		if !errors.As(err, &re) || re.Code != c.code || !errors.Is(err, c.code.Err()) {
			t.Fatalf("source error %v: got %v, want code %v", c.err, err, c.code)
		}
	}
}

// A stalled client holds its transfer slot only for the idle timeout; a
// transfer over the concurrency limit is refused with ErrBusy meanwhile.
func TestServerBusyAndIdleTimeout(t *testing.T) {
	// The idle timeout also applies to the retry at the end: it must
	// outlast a stall of the loaded machine (300 ms cut a 32 MiB retry at
	// load 24), and only the stalled transfer is meant to reach it.
	fx := newFixture(t, 32<<20, Limits{MaxTransfers: 1, IdleTimeout: 2 * time.Second}, ModeDefault, ModeDefault)
	resp, stalled := rawRequest(t, fx.addr, appendRequest(nil, fx.req(t, 0, int64(len(fx.data)))))
	if resp.code != CodeOK {
		t.Fatalf("%+v", resp)
	}
	// The stalled connection holds the only slot until the server's
	// deadline fires.
	ticket := fx.ticket(t, nil)
	_, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, ticket, fx.sink, nil)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("second transfer: got %v, want %v", err, ErrBusy)
	}
	deadline := time.Now().Add(60 * time.Second)
	for fx.srv.Stats().Failed == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled transfer never timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stalled.Close()
	// The busy refusal left its ticket unspent: it admits the retry.
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, ticket, fx.sink, nil); err != nil {
		t.Fatalf("after the timeout, with the ticket refused as busy: %v", err)
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
		readRequest(c)
		c.Write(appendResponse(nil, response{code: CodeOK, count: 1000}))
		c.Write(make([]byte, 100))
		time.Sleep(5 * time.Second)
	}()
	th, _ := NewThrottle(Limits{IdleTimeout: 200 * time.Millisecond})
	sink := &fileSink{dir: t.TempDir(), want: map[meta.SegmentID][]byte{"s": make([]byte, 1000)}}
	cl := &Client{Throttle: th}
	seg := meta.Segment{ID: "s", Length: 1, ByteSize: 960, Sealed: true, Checksum: meta.CRC32C(1)}
	// Only the idle timeout's read deadline ends the transfer with
	// os.ErrDeadlineExceeded: the server closing after its sleep would be
	// an EOF. The error, not the time taken, is the proof.
	_, err = cl.Fetch(context.Background(), l.Addr().String(), seg, issue(t, testTicket(seg, 1000), nil), sink, nil)
	if !errors.Is(err, ErrCut) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want %v wrapping %v (the idle timeout)", err, ErrCut, os.ErrDeadlineExceeded)
	}
}

func TestFetchContextCancel(t *testing.T) {
	fx := newFixture(t, 8<<20, Limits{BytesPerSecond: 1 << 20}, ModeDefault, ModeDefault)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := fx.cl.Fetch(ctx, fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, func(done, total int64) {
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
		ticket := fx.ticket(t, nil)
		go func() { _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, ticket, s, nil); errs <- err }()
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
	rel, err := th.acquireFetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := th.acquireFetch(context.Background())
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

// A broker's receiving and sending transfers hold separate slots: with one
// slot and no queue, a broker fetching through its only receiving slot
// still serves a fetch (here its own: the same Throttle at both ends), as
// two brokers fetching from each other must; a second fetch at once is
// refused as busy by the receiving side, before it connects.
func TestThrottleDirectionsApart(t *testing.T) {
	fx := newFixture(t, 1<<20, Limits{MaxTransfers: 1}, ModeDefault, ModeDefault)
	fx.cl.Throttle = fx.srv.Throttle
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, nil); err != nil {
		t.Fatalf("fetch through the one receiving slot, served through the one sending slot: %v", err)
	}
	release, err := fx.cl.Throttle.acquireFetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	before := fx.srv.Stats().Refused
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, nil); !errors.Is(err, ErrBusy) || fx.srv.Stats().Refused != before {
		t.Fatalf("fetch with the receiving slot taken: %v (server refusals %d -> %d): want ErrBusy before connecting", err, before, fx.srv.Stats().Refused)
	}
}

// The defaults are zero copy at both ends: the counters show it.
func TestDefaultModesAreZeroCopy(t *testing.T) {
	fx := newFixture(t, 1<<20, Limits{}, ModeDefault, ModeDefault)
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, nil); err != nil {
		t.Fatal(err)
	}
	if st := fx.srv.Stats(); st.Sendfile == 0 || st.Write != 0 {
		t.Fatalf("default send: server stats %+v, want sendfile", st)
	}
	if st := fx.cl.Stats(); st.Splice == 0 || st.Read != 0 {
		t.Fatalf("default receive: client stats %+v, want splice", st)
	}
}
