package catchup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/store/errorfs"
)

// sealed writes a sealed copy of id with frames of random sizes (up to
// maxPayload) and returns its segment and the byte position of every
// frame boundary (0 first, ByteSize last).
func sealed(t testing.TB, db *store.DB, id meta.SegmentID, start uint64, frames, maxPayload int, seed uint64) (meta.Segment, []int64) {
	t.Helper()
	if err := db.Create(id, start); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	bounds := []int64{0}
	payload := make([]byte, maxPayload)
	for i := 0; i < frames; i++ {
		n := 1 + rng.IntN(maxPayload)
		for j := range payload[:n] {
			payload[j] = byte(rng.Uint32())
		}
		if _, err := db.Append(id, payload[:n]); err != nil {
			t.Fatal(err)
		}
		bounds = append(bounds, bounds[len(bounds)-1]+int64(store.FrameHeaderSize+n))
	}
	s, err := db.Seal(id)
	if err != nil {
		t.Fatal(err)
	}
	seg := meta.Segment{ID: id, StartOffset: s.StartOffset, Length: s.Length, ByteSize: s.ByteSize, Sealed: true, Checksum: s.Checksum, Replicas: []meta.BrokerID{1}}
	if s.ByteSize != bounds[len(bounds)-1] {
		t.Fatalf("sealed %d bytes, framed %d", s.ByteSize, bounds[len(bounds)-1])
	}
	return seg, bounds
}

func openDB(t testing.TB, dir string, opts store.Options) *store.DB {
	t.Helper()
	db, err := store.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// storeFixture is a source broker (store + Server) and a target store.
type storeFixture struct {
	src, dst *store.DB
	srv      *Server
	cl       *Client
	addr     string
}

func newStoreFixture(t testing.TB, srcOpts store.Options, dstDir string) *storeFixture {
	t.Helper()
	fx := &storeFixture{src: openDB(t, t.TempDir(), srcOpts)}
	if dstDir == "" {
		dstDir = t.TempDir()
	}
	fx.dst = openDB(t, dstDir, store.Options{})
	fx.srv = &Server{Source: StoreSource{DB: fx.src}, Self: testSource, Tickets: testCA}
	fx.cl = &Client{}
	fx.addr = startServer(t, fx.srv)
	return fx
}

func (fx *storeFixture) fetch(t testing.TB, addr string, seg meta.Segment) (Result, error) {
	return fx.cl.Fetch(context.Background(), addr, seg, storeTicket(t, seg, nil), StoreSink{DB: fx.dst}, nil)
}

// storeTicket is a fresh ticket for seg's whole sealed copy; edit (may be
// nil) changes it before it is signed.
func storeTicket(t testing.TB, seg meta.Segment, edit func(*Ticket)) []byte {
	t.Helper()
	return issue(t, testTicket(seg, seg.ByteSize+store.FooterSize), edit)
}

// checkSame asserts that the target's copy is byte-identical to the
// source's and verifies.
func (fx *storeFixture) checkSame(t testing.TB, seg meta.Segment) {
	t.Helper()
	a, err := os.ReadFile(fx.src.Path(seg.ID))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fx.dst.Path(seg.ID))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("target copy (%d bytes) differs from the source (%d bytes)", len(b), len(a))
	}
	if err := fx.dst.Verify(seg.ID, seg); err != nil {
		t.Fatalf("target copy does not verify: %v", err)
	}
}

// floorBoundary is the last frame boundary at or below n.
func floorBoundary(bounds []int64, n int64) int64 {
	i := sort.Search(len(bounds), func(i int) bool { return bounds[i] > n })
	return bounds[i-1]
}

func TestStoreFetchWholeCopy(t *testing.T) {
	fx := newStoreFixture(t, store.Options{}, "")
	seg, _ := sealed(t, fx.src, "seg-whole", 500, 300, 20000, 1)
	var calls int
	var last int64
	res, err := fx.cl.Fetch(context.Background(), fx.addr, seg, storeTicket(t, seg, nil), StoreSink{DB: fx.dst}, func(done, total int64) {
		calls++
		last = done
	})
	if err != nil {
		t.Fatal(err)
	}
	size := seg.ByteSize + store.FooterSize
	if res.From != 0 || res.Received != size || res.Size != size || last != size || calls < 2 {
		t.Fatalf("result %+v, progress %d after %d calls", res, last, calls)
	}
	fx.checkSame(t, seg)
	// A complete copy needs no bytes: the second fetch only re-verifies.
	res, err = fx.fetch(t, fx.addr, seg)
	if err != nil || res.From != size || res.Received != 0 {
		t.Fatalf("second fetch: %+v, %v", res, err)
	}
	if fx.srv.Stats().Transfers != 1 {
		t.Fatalf("server stats %+v, want one transfer", fx.srv.Stats())
	}
}

// A transfer cut at a random byte resumes from the target's durable end:
// the end of the last whole frame that arrived, never from zero (once a
// frame arrived) and never past a damaged frame. Several cuts in a row,
// then a clean run that completes.
func TestStoreResumeAfterCutAtRandomByte(t *testing.T) {
	fx := newStoreFixture(t, store.Options{}, "")
	seg, bounds := sealed(t, fx.src, "seg-cut", 0, 120, 6000, 2)
	size := seg.ByteSize + store.FooterSize
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 99))
		if err := fx.dst.Delete(seg.ID); err != nil && !errors.Is(err, store.ErrUnknownCopy) {
			t.Fatal(err)
		}
		var durable int64
		for cutRun := 0; cutRun < 3 && durable < size; cutRun++ {
			// The cut falls anywhere in the answer: in the header or in
			// the data.
			cut := rng.Int64N(respFixedSize + size - durable)
			p := startProxy(t, fx.addr, cut, -1)
			res, err := fx.fetch(t, p.addr(), seg)
			if !errors.Is(err, ErrCut) {
				t.Fatalf("seed %d run %d: cut at %d: got %v, want %v", seed, cutRun, cut, err, ErrCut)
			}
			if res.From != durable {
				t.Fatalf("seed %d run %d: resumed at %d, want the durable end %d", seed, cutRun, res.From, durable)
			}
			arrived := durable + max(0, cut-respFixedSize)
			end, err := fx.dst.DurableEnd(seg.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := floorBoundary(bounds, min(arrived, seg.ByteSize))
			if end.Bytes != want || end.FileSize != want {
				t.Fatalf("seed %d run %d: %d bytes arrived, durable end %+v, want %d", seed, cutRun, arrived, end, want)
			}
			durable = want
		}
		res, err := fx.fetch(t, fx.addr, seg)
		if err != nil {
			t.Fatalf("seed %d: final fetch: %v", seed, err)
		}
		if res.From != durable || res.Received != size-durable {
			t.Fatalf("seed %d: final fetch %+v, want from %d", seed, res, durable)
		}
		fx.checkSame(t, seg)
	}
}

// A bit flipped in flight is caught on arrival: the fetch fails with
// ErrVerify and the copy is left at the frame before the damage; the next
// fetch resumes there.
func TestStoreBitFlippedInFlightIsRejected(t *testing.T) {
	fx := newStoreFixture(t, store.Options{}, "")
	seg, bounds := sealed(t, fx.src, "seg-flip", 7, 80, 5000, 3)
	size := seg.ByteSize + store.FooterSize
	for seed := range 20 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		if err := fx.dst.Delete(seg.ID); err != nil && !errors.Is(err, store.ErrUnknownCopy) {
			t.Fatal(err)
		}
		at := rng.Int64N(size) // a byte of the copy
		if seed == 0 {
			at = size - 1 // the footer's own CRC
		}
		p := startProxy(t, fx.addr, -1, respFixedSize+at)
		_, err := fx.fetch(t, p.addr(), seg)
		if !errors.Is(err, ErrVerify) || !(errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrShort)) {
			t.Fatalf("seed %d: flip at byte %d: got %v, want %v", seed, at, err, ErrVerify)
		}
		end, err := fx.dst.DurableEnd(seg.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := floorBoundary(bounds, min(at, seg.ByteSize))
		if end.Bytes != want || end.FileSize != want || end.Footer {
			t.Fatalf("seed %d: flip at byte %d: target left at %+v, want its last valid frame ending at %d", seed, at, end, want)
		}
		if err := fx.dst.Verify(seg.ID, seg); err == nil {
			t.Fatalf("seed %d: a damaged copy verifies", seed)
		}
		res, err := fx.fetch(t, fx.addr, seg)
		if err != nil || res.From != want {
			t.Fatalf("seed %d: refetch %+v, %v; want it to resume at %d", seed, res, err, want)
		}
		fx.checkSame(t, seg)
	}
}

func TestStoreSourceRefusals(t *testing.T) {
	inj := &switchInjector{}
	fx := newStoreFixture(t, store.Options{FS: errorfs.Wrap(store.OSFS(), inj)}, "")
	seg, _ := sealed(t, fx.src, "seg-ok", 0, 10, 1000, 4)
	latched, _ := sealed(t, fx.src, "seg-latched", 0, 10, 1000, 5)
	if err := fx.src.Create("seg-active", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.src.Append("seg-active", []byte("x")); err != nil {
		t.Fatal(err)
	}
	inj.set(errorfs.Always(syscall.EIO, errorfs.Ops(errorfs.Read), errorfs.PathMatch("seg-latched.seg")))

	wrongSum := seg
	wrongSum.Checksum = meta.CRC32C(12345)
	longer := seg
	longer.ByteSize += 100
	unknown := seg
	unknown.ID = "seg-nowhere"
	active := meta.Segment{ID: "seg-active", Length: 1, ByteSize: 17, Sealed: true, Checksum: meta.CRC32C(1)}
	for _, c := range []struct {
		name string
		seg  meta.Segment
		code Code
	}{
		{"latched", latched, CodeLatched},
		{"latched again", latched, CodeLatched},
		{"checksum mismatch", wrongSum, CodeMismatch},
		{"short source", longer, CodeMismatch},
		{"unknown", unknown, CodeUnknownSegment},
		{"unsealed", active, CodeUnsealed},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := fx.fetch(t, fx.addr, c.seg)
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != c.code || !errors.Is(err, c.code.Err()) {
				t.Fatalf("got %v, want code %v", err, c.code)
			}
			end, derr := fx.dst.DurableEnd(c.seg.ID)
			if derr != nil || end.FileSize != 0 {
				t.Fatalf("target after the refusal: %+v, %v; want an empty copy", end, derr)
			}
		})
	}
	if err := fx.src.LatchErr("seg-latched"); !errors.Is(err, store.ErrLatched) {
		t.Fatalf("source copy not latched: %v", err)
	}
	// The healthy copy still serves.
	if _, err := fx.fetch(t, fx.addr, seg); err != nil {
		t.Fatal(err)
	}
	fx.checkSame(t, seg)
}

// The refusals the protocol owns, against the store: an untrusted ticket,
// a path-escaping name, a range past the end. None opens or creates a
// file.
func TestStoreProtocolRefusals(t *testing.T) {
	fx := newStoreFixture(t, store.Options{}, "")
	seg, _ := sealed(t, fx.src, "seg-p", 0, 10, 1000, 6)
	size := seg.ByteSize + store.FooterSize

	forged, err := IssueTicket(newFakeKey(testIssuer, 9), testTicket(seg, size))
	if err != nil {
		t.Fatal(err)
	}
	_, err = fx.cl.Fetch(context.Background(), fx.addr, seg, forged, StoreSink{DB: fx.dst}, nil)
	if !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("untrusted ticket: %v", err)
	}

	for _, id := range []meta.SegmentID{"../copies/seg-p", "..", "/etc/passwd", "seg-p/../../x"} {
		s := seg
		s.ID = id
		req := &request{seg: s, to: 10, ticket: storeTicket(t, seg, nil)}
		if resp, _ := rawRequest(t, fx.addr, appendRequest(nil, req)); resp.code != CodeBadName {
			t.Fatalf("id %q: %+v", id, resp)
		}
	}
	// Tickets that grant past the end: the copy's size is checked too.
	for _, r := range [][2]int64{{0, size + 1}, {size, size + 1}, {size + 10, size + 20}} {
		req := &request{seg: seg, from: r[0], to: r[1], ticket: storeTicket(t, seg, func(tk *Ticket) { tk.To = size + 20 })}
		if resp, _ := rawRequest(t, fx.addr, appendRequest(nil, req)); resp.code != CodeOutOfRange {
			t.Fatalf("range %v of %d: %+v", r, size, resp)
		}
	}
	// The untrusted fetch opened its target (to learn where to resume)
	// and aborted it: nothing was written.
	if end, err := fx.dst.DurableEnd(seg.ID); err != nil || end.FileSize != 0 {
		t.Fatalf("target copy after the refusals: %+v, %v", end, err)
	}
	if st := fx.srv.Stats(); st.Bytes != 0 {
		t.Fatalf("server sent bytes: %+v", st)
	}
}

// switchInjector lets a test arm an injector after setup.
type switchInjector struct {
	inj atomic.Pointer[errorfs.Injector]
}

func (s *switchInjector) set(i errorfs.Injector) { s.inj.Store(&i) }
func (s *switchInjector) MaybeError(op errorfs.Op) error {
	if p := s.inj.Load(); p != nil {
		return (*p).MaybeError(op)
	}
	return nil
}

var _ = fmt.Sprint
