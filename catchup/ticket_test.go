package catchup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

func TestTicketRoundTrip(t *testing.T) {
	seg := meta.Segment{ID: "seg-000042", StartOffset: 1000, Length: 77, ByteSize: 123456, Checksum: meta.CRC32C(0xdeadbeef)}
	want := Ticket{Segment: seg, From: 10, To: 123456 + 40, Source: 2, Target: 3, Issuer: 1,
		Expires: time.Unix(0, 1_700_000_000_123_456_789), Nonce: [16]byte{9, 8, 7}}
	b, err := IssueTicket(testKey, want)
	if err != nil {
		t.Fatal(err)
	}
	if n := ticketFixedSize + len(seg.ID) + ticketTrailer + len(testKey.cert()) + 64; len(b) != n {
		t.Fatalf("ticket of %d bytes, want %d", len(b), n)
	}
	got, err := ParseTicket(b)
	if err != nil {
		t.Fatal(err)
	}
	want.Segment.Sealed = true
	if !reflect.DeepEqual(got.Segment, want.Segment) || got.From != want.From || got.To != want.To || got.Source != want.Source ||
		got.Target != want.Target || got.Issuer != want.Issuer || !got.Expires.Equal(want.Expires) || got.Nonce != want.Nonce {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	st, de := decodeTicket(b)
	if de != nil {
		t.Fatal(de)
	}
	if id, err := testCA.VerifyTicket(st.payload, st.sig, st.cert); err != nil || id != testIssuer {
		t.Fatalf("the issued signature: %v, %v", id, err)
	}
	// A zero nonce is drawn at random.
	want.Nonce = [16]byte{}
	a, _ := ParseTicket(issue(t, want, nil))
	c, _ := ParseTicket(issue(t, want, nil))
	if a.Nonce == ([16]byte{}) || a.Nonce == c.Nonce {
		t.Fatalf("nonces %x and %x", a.Nonce, c.Nonce)
	}
}

// signerFunc adapts a function to TicketSigner.
type signerFunc func([]byte) ([]byte, []byte, error)

func (f signerFunc) SignTicket(p []byte) ([]byte, []byte, error) { return f(p) }

func TestIssueTicketRefuses(t *testing.T) {
	good := testTicket(meta.Segment{ID: "seg-1", Length: 1, ByteSize: 10, Checksum: meta.CRC32C(1)}, 50)
	for _, c := range []struct {
		name   string
		edit   func(*Ticket)
		signer TicketSigner
		want   error
		says   string
	}{
		{"bad name", func(tk *Ticket) { tk.Segment.ID = "../x" }, nil, ErrBadName, ""},
		{"no checksum", func(tk *Ticket) { tk.Segment.Checksum = meta.NoChecksum }, nil, ErrMalformed, "checksum"},
		{"not a range", func(tk *Ticket) { tk.From = 20; tk.To = 10 }, nil, ErrMalformed, "not a range"},
		{"no source", func(tk *Ticket) { tk.Source = 0 }, nil, ErrMalformed, "broker id 0"},
		{"no target", func(tk *Ticket) { tk.Target = 0 }, nil, ErrMalformed, "broker id 0"},
		{"no issuer", func(tk *Ticket) { tk.Issuer = 0 }, nil, ErrMalformed, "broker id 0"},
		{"no expiry", func(tk *Ticket) { tk.Expires = time.Time{} }, nil, ErrMalformed, "no expiry"},
		{"huge certificate", nil, signerFunc(func([]byte) ([]byte, []byte, error) { return []byte{1}, make([]byte, MaxTicketCert+1), nil }), ErrMalformed, "certificate has 8193 bytes"},
		{"huge signature", nil, signerFunc(func([]byte) ([]byte, []byte, error) { return make([]byte, MaxTicketSig+1), []byte{1}, nil }), ErrMalformed, "signature has 513 bytes"},
		{"signer fails", nil, signerFunc(func([]byte) ([]byte, []byte, error) { return nil, nil, errors.New("no key") }), nil, "no key"},
	} {
		tk := good
		if c.edit != nil {
			c.edit(&tk)
		}
		signer := c.signer
		if signer == nil {
			signer = testKey
		}
		b, err := IssueTicket(signer, tk)
		if err == nil || b != nil || c.want != nil && !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %d bytes, %v; want %v saying %q", c.name, len(b), err, c.want, c.says)
		}
	}
}

// Every length field of a ticket is checked against its bound and the
// total before anything is decoded.
func TestDecodeTicketBounds(t *testing.T) {
	b := issue(t, testTicket(meta.Segment{ID: "seg-1", Length: 1, ByteSize: 10, Checksum: meta.CRC32C(1)}, 50), nil)
	n := ticketFixedSize + len("seg-1")
	put := func(at int, v uint16) []byte {
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint16(c[at:], v)
		return c
	}
	for _, c := range []struct {
		name string
		b    []byte
		says string
	}{
		{"empty", nil, "shorter than its"},
		{"header only", b[:ticketFixedSize], "shorter than its"},
		{"magic", append([]byte("XLCT"), b[4:]...), "bad magic"},
		{"version", append(append([]byte("MLCT"), 2), b[5:]...), "version 2"},
		{"id length 0", put(6, 0), "segment id length 0"},
		{"id length past the end", put(6, 0xffff), "segment id length 65535"},
		{"certificate length 0", put(n, 0), "certificate of 0 bytes"},
		{"certificate too long", put(n, MaxTicketCert+1), "certificate of 8193 bytes"},
		{"signature length 0", put(n+2, 0), "signature of 0 bytes"},
		{"signature too long", put(n+2, MaxTicketSig+1), "signature of 513 bytes"},
		{"a byte short", b[:len(b)-1], "lengths add up to"},
		{"a byte more", append(bytes.Clone(b), 0), "lengths add up to"},
	} {
		_, de := decodeTicket(c.b)
		if de == nil || de.code != CodeUnauthenticated || !strings.Contains(de.msg, c.says) {
			t.Errorf("%s: got %v, want a refusal saying %q", c.name, de, c.says)
		}
		if _, err := ParseTicket(c.b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ParseTicket: %v, want %v", c.name, err, ErrMalformed)
		}
	}
}

func FuzzParseTicket(f *testing.F) {
	f.Add(issue(f, testTicket(meta.Segment{ID: "seg-1", Length: 1, ByteSize: 10, Checksum: meta.CRC32C(1)}, 50), nil))
	f.Add([]byte("MLCT\x01\x00\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, de := decodeTicket(b)
		if de != nil {
			return
		}
		// What decodes is exactly its parts.
		re := st.Ticket.appendPayload(nil)
		re = binary.LittleEndian.AppendUint16(re, uint16(len(st.cert)))
		re = binary.LittleEndian.AppendUint16(re, uint16(len(st.sig)))
		re = append(append(re, st.cert...), st.sig...)
		if !bytes.Equal(re, b) {
			t.Fatalf("decoded ticket does not re-encode to its bytes")
		}
	})
}
