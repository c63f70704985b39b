package catchup

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
	"pgregory.net/rapid"
)

// testRequest is a request for seg-000042 with a ticket of testKey that
// grants the whole copy.
func testRequest(t testing.TB) *request {
	r := &request{
		seg: meta.Segment{ID: "seg-000042", StartOffset: 1000, Length: 77, ByteSize: 123456,
			Checksum: meta.CRC32C(0xdeadbeef), Sealed: true},
		from: 4096, to: 123456 + 40,
	}
	tk := testTicket(r.seg, r.to)
	tk.Expires = time.Unix(0, 1_700_000_060_000_000_000)
	tk.Nonce = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	r.ticket = issue(t, tk, nil)
	return r
}

// testNow is a time at which testRequest's ticket is valid.
var testNow = time.Unix(0, 1_700_000_000_000_000_000)

func TestRequestRoundTrip(t *testing.T) {
	want := testRequest(t)
	wire := appendRequest(nil, want)
	if len(wire) != reqFixedSize+len(want.seg.ID)+len(want.ticket) {
		t.Fatalf("request is %d bytes, want %d", len(wire), reqFixedSize+len(want.seg.ID)+len(want.ticket))
	}
	got, err := readRequest(bytes.NewReader(wire))
	if err != nil {
		t.Fatal(err)
	}
	if got.seg.ID != want.seg.ID || got.seg.StartOffset != want.seg.StartOffset || got.seg.Length != want.seg.Length ||
		got.seg.ByteSize != want.seg.ByteSize || got.seg.Checksum != want.seg.Checksum || !got.seg.Sealed ||
		got.from != want.from || got.to != want.to || !bytes.Equal(got.ticket, want.ticket) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	noTicket := &request{seg: want.seg, from: 1, to: 2}
	if got, err := readRequest(bytes.NewReader(appendRequest(nil, noTicket))); err != nil || got.ticket != nil {
		t.Fatalf("a request without a ticket decodes to %+v, %v", got, err)
	}
}

func codeOfErr(err error) Code {
	var de *decodeError
	if errors.As(err, &de) {
		return de.code
	}
	return CodeOK
}

// Any change to any single byte of a request with its ticket is refused,
// or leaves a request that the ticket grants as it stands (a from moved
// within the granted range): a tampered request never reaches beyond its
// ticket's segment, expectation and range.
func TestRequestTamperedByteIsRefused(t *testing.T) {
	orig := testRequest(t)
	tk, err := ParseTicket(orig.ticket)
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(rt *rapid.T) {
		wire := appendRequest(nil, orig)
		i := rapid.IntRange(0, len(wire)-1).Draw(rt, "i")
		x := rapid.ByteRange(1, 255).Draw(rt, "xor")
		wire[i] ^= x
		srv := &Server{Self: testSource, Tickets: testCA, Now: func() time.Time { return testNow }}
		req, err := readRequest(bytes.NewReader(wire))
		if err == nil {
			if _, de := srv.authorize(req); de != nil {
				err = de
			}
		}
		if err != nil {
			if codeOfErr(err) == CodeOK && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				rt.Fatalf("byte %d ^ %#x: %v is neither a refusal nor a short read", i, x, err)
			}
			return
		}
		if i >= reqFixedSize+len(orig.seg.ID) {
			rt.Fatalf("byte %d ^ %#x of the ticket: request admitted", i, x)
		}
		if req.seg.ID != tk.Segment.ID || req.seg.Checksum != tk.Segment.Checksum || req.seg.ByteSize != tk.Segment.ByteSize ||
			req.from < tk.From || req.to > tk.To {
			rt.Fatalf("byte %d ^ %#x: admitted %+v beyond the ticket %+v", i, x, req, tk)
		}
	})
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}

// A frame that claims an absurd segment name or ticket length is refused
// after the fixed header, before anything more is read or allocated.
func TestRequestAbsurdLengthRefusedBeforeReading(t *testing.T) {
	for _, c := range []struct {
		at int
		n  uint16
	}{{6, 0}, {6, meta.MaxSegmentIDLen + 1}, {6, 0xffff}, {56, MaxTicketLen + 1}, {56, 0xffff}} {
		wire := appendRequest(nil, testRequest(t))
		wire[c.at], wire[c.at+1] = byte(c.n), byte(c.n>>8)
		wire = append(wire, make([]byte, 1<<16)...)
		cr := &countingReader{r: bytes.NewReader(wire)}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := readRequest(cr)
		runtime.ReadMemStats(&after)
		if codeOfErr(err) != CodeMalformed {
			t.Fatalf("length %d at byte %d: got %v, want %v", c.n, c.at, err, ErrMalformed)
		}
		if cr.n != reqFixedSize {
			t.Errorf("length %d at byte %d: read %d bytes, want only the %d-byte fixed header", c.n, c.at, cr.n, reqFixedSize)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 8<<10 {
			t.Errorf("length %d at byte %d: %d bytes allocated", c.n, c.at, d)
		}
	}
}

func TestRequestRefusals(t *testing.T) {
	cases := []struct {
		name string
		edit func(r *request)
		wire func(b []byte)
		code Code
	}{
		{name: "dot-dot", edit: func(r *request) { r.seg.ID = ".." }, code: CodeBadName},
		{name: "slash", edit: func(r *request) { r.seg.ID = "../../etc/passwd" }, code: CodeBadName},
		{name: "nul", edit: func(r *request) { r.seg.ID = "a\x00b" }, code: CodeBadName},
		{name: "no checksum", edit: func(r *request) { r.seg.Checksum = meta.NoChecksum }, code: CodeMalformed},
		{name: "negative size", edit: func(r *request) { r.seg.ByteSize = -1 }, code: CodeMalformed},
		{name: "from after to", edit: func(r *request) { r.from, r.to = 10, 5 }, code: CodeMalformed},
		{name: "negative from", edit: func(r *request) { r.from = -5 }, code: CodeMalformed},
		{name: "magic", wire: func(b []byte) { b[0] = 'X' }, code: CodeMalformed},
		{name: "version", wire: func(b []byte) { b[4] = 9 }, code: CodeVersion},
		{name: "reserved", wire: func(b []byte) { b[5] = 1 }, code: CodeMalformed},
		{name: "reserved tail", wire: func(b []byte) { b[63] = 1 }, code: CodeMalformed},
		{name: "truncated", wire: func(b []byte) { b[56]++ }, code: CodeMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := testRequest(t)
			if c.edit != nil {
				c.edit(r)
			}
			wire := appendRequest(nil, r)
			if c.wire != nil {
				c.wire(wire)
			}
			_, err := readRequest(bytes.NewReader(wire))
			if got := codeOfErr(err); got != c.code {
				t.Fatalf("got %v (code %v), want code %v", err, got, c.code)
			}
			if !errors.Is(err, c.code.Err()) {
				t.Fatalf("%v does not wrap %v", err, c.code.Err())
			}
		})
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for _, r := range []response{{code: CodeOK, count: 1 << 40}, {code: CodeLatched, msg: "segment x: store: copy latched"}} {
		got, err := readResponse(bytes.NewReader(appendResponse(nil, r)))
		if err != nil || got != r {
			t.Fatalf("got %+v, %v; want %+v", got, err, r)
		}
	}
	long := appendResponse(nil, response{code: CodeInternal, msg: string(make([]byte, 5000))})
	if len(long) != respFixedSize+maxMessage {
		t.Fatalf("long message encoded in %d bytes, want it cut to %d", len(long), respFixedSize+maxMessage)
	}
	bad := appendResponse(nil, response{code: CodeInternal})
	bad[6], bad[7] = 0xff, 0xff
	if _, err := readResponse(bytes.NewReader(append(bad, make([]byte, 70000)...))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("message length 65535: got %v, want %v", err, ErrMalformed)
	}
}

func FuzzReadRequest(f *testing.F) {
	f.Add(appendRequest(nil, testRequest(f)))
	f.Add(appendRequest(nil, &request{seg: meta.Segment{ID: "s", Length: 1, ByteSize: 9, Checksum: meta.CRC32C(1), Sealed: true}, to: 9}))
	f.Add([]byte("MLCQ\x02\x00\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := readRequest(bytes.NewReader(b))
		if err == nil {
			// What decodes re-encodes to its bytes.
			if !bytes.Equal(appendRequest(nil, req), b[:reqFixedSize+len(req.seg.ID)+len(req.ticket)]) {
				t.Fatalf("accepted a request that does not re-encode to its bytes")
			}
		}
	})
}
