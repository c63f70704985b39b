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

func testRequest() *request {
	return &request{
		seg: meta.Segment{ID: "seg-000042", StartOffset: 1000, Length: 77, ByteSize: 123456,
			Checksum: meta.CRC32C(0xdeadbeef), Sealed: true},
		from: 4096, to: 123456 + 40,
		time:  time.Unix(0, 1_700_000_000_123_456_789),
		nonce: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
	}
}

func TestRequestRoundTrip(t *testing.T) {
	want := testRequest()
	wire := appendRequest(nil, want, testSecret)
	if len(wire) != reqFixedSize+len(want.seg.ID)+macSize {
		t.Fatalf("request is %d bytes, want %d", len(wire), reqFixedSize+len(want.seg.ID)+macSize)
	}
	got, err := readRequest(bytes.NewReader(wire), testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got.seg.ID != want.seg.ID || got.seg.StartOffset != want.seg.StartOffset || got.seg.Length != want.seg.Length ||
		got.seg.ByteSize != want.seg.ByteSize || got.seg.Checksum != want.seg.Checksum || !got.seg.Sealed ||
		got.from != want.from || got.to != want.to || !got.time.Equal(want.time) || got.nonce != want.nonce {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

func codeOfErr(err error) Code {
	var de *decodeError
	if errors.As(err, &de) {
		return de.code
	}
	return CodeOK
}

// Any change to any single byte of a signed request is refused: it never
// decodes into an accepted request.
func TestRequestTamperedByteIsRefused(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		wire := appendRequest(nil, testRequest(), testSecret)
		i := rapid.IntRange(0, len(wire)-1).Draw(t, "i")
		x := rapid.ByteRange(1, 255).Draw(t, "xor")
		wire[i] ^= x
		_, err := readRequest(bytes.NewReader(wire), testSecret)
		if err == nil {
			t.Fatalf("byte %d ^ %#x: request accepted", i, x)
		}
		if codeOfErr(err) == CodeOK && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			t.Fatalf("byte %d ^ %#x: %v is neither a refusal nor a short read", i, x, err)
		}
	})
}

func TestRequestWrongSecret(t *testing.T) {
	wire := appendRequest(nil, testRequest(), []byte("another-secret-of-the-cluster"))
	_, err := readRequest(bytes.NewReader(wire), testSecret)
	if codeOfErr(err) != CodeUnauthenticated || !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("got %v, want %v", err, ErrUnauthenticated)
	}
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

// A frame that claims an absurd segment name length is refused after the
// fixed header, before anything more is read or allocated.
func TestRequestAbsurdLengthRefusedBeforeReading(t *testing.T) {
	for _, n := range []uint16{0, meta.MaxSegmentIDLen + 1, 0xffff} {
		wire := appendRequest(nil, testRequest(), testSecret)
		wire[6], wire[7] = byte(n), byte(n>>8)
		wire = append(wire, make([]byte, 1<<16)...)
		cr := &countingReader{r: bytes.NewReader(wire)}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := readRequest(cr, testSecret)
		runtime.ReadMemStats(&after)
		if codeOfErr(err) != CodeMalformed {
			t.Fatalf("id length %d: got %v, want %v", n, err, ErrMalformed)
		}
		if cr.n != reqFixedSize {
			t.Errorf("id length %d: read %d bytes, want only the %d-byte fixed header", n, cr.n, reqFixedSize)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 8<<10 {
			t.Errorf("id length %d: %d bytes allocated", n, d)
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := testRequest()
			if c.edit != nil {
				c.edit(r)
			}
			wire := appendRequest(nil, r, testSecret)
			if c.wire != nil {
				c.wire(wire)
			}
			_, err := readRequest(bytes.NewReader(wire), testSecret)
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
	f.Add(appendRequest(nil, testRequest(), testSecret))
	f.Add([]byte("MLCQ\x01\x00\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := readRequest(bytes.NewReader(b), testSecret)
		if err == nil {
			// Only a correctly signed request decodes: re-encode it.
			if !bytes.Equal(appendRequest(nil, req, testSecret), b[:reqFixedSize+len(req.seg.ID)+macSize]) {
				t.Fatalf("accepted a request that does not re-encode to its bytes")
			}
		}
	})
}
