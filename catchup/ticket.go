package catchup

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// Ticket is what a catch-up ticket grants: one request, to the data
// listener of Source, for the byte range [From, To) of the sealed copy of
// Segment, before Expires. The coordinator of the leader issues it
// (IssueTicket) and hands it to Target over the mutually authenticated
// backfill RPC; the target presents it with its request (Client.Fetch).
type Ticket struct {
	// Segment is the copy: ID, StartOffset, Length, ByteSize, Checksum
	// (Sealed is implied). A request's expectation must equal it.
	Segment meta.Segment
	// From and To bound the bytes the holder may request: a request's
	// [from, to) must lie within [From, To). To = ByteSize plus the
	// store's footer (the whole copy) is the usual grant.
	From, To int64
	// Source is the broker that serves the copy: a Server refuses a
	// ticket whose Source is not its Self.
	Source meta.BrokerID
	// Target is the broker the ticket was issued to. The source cannot
	// check it on the plain data connection (see doc.go); it is logged.
	Target meta.BrokerID
	// Issuer is the broker that signed the ticket: it must be the broker
	// its certificate names.
	Issuer meta.BrokerID
	// Expires is when the ticket stops admitting requests. A Server
	// refuses a ticket that expires more than MaxTicketLife after its
	// clock, so that it need remember spent tickets only that long.
	Expires time.Time
	// Nonce makes the ticket unique: a Server admits one request per
	// nonce. IssueTicket draws a random one when it is zero.
	Nonce [16]byte
}

// TicketSigner signs tickets: the coordinator's broker key.
type TicketSigner interface {
	// SignTicket returns a signature over payload and the DER of the
	// certificate whose key made it.
	SignTicket(payload []byte) (sig []byte, certDER []byte, err error)
}

// TicketVerifier checks a ticket's signature: the certificate must chain
// to the cluster CA and name a broker.
type TicketVerifier interface {
	// VerifyTicket returns the broker the certificate names, or an error
	// saying what was wrong.
	VerifyTicket(payload, sig, certDER []byte) (issuer meta.BrokerID, err error)
}

// Ticket wire format, version 1. All integers little-endian.
//
// Signed payload, 92 + n bytes:
//
//	0   4  magic "MLCT"
//	4   1  version (1)
//	5   1  reserved, 0
//	6   2  n: segment id length, 1..meta.MaxSegmentIDLen
//	8   8  from
//	16  8  to
//	24  8  byte_size
//	32  8  checksum (meta.Checksum)
//	40  8  start_offset
//	48  8  length (records)
//	56  4  source broker
//	60  4  target broker
//	64  4  issuer broker
//	68  8  expires, Unix nanoseconds
//	76 16  nonce
//	92  n  segment id
//
// Then, unsigned:
//
//	+0  2  c: certificate DER length, 1..MaxTicketCert
//	+2  2  s: signature length, 1..MaxTicketSig
//	+4  c  certificate DER (the issuer's)
//	..  s  signature over the payload
//
// A ticket is exactly 96 + n + c + s bytes; anything else is refused.
const (
	ticketVersion   = 1
	ticketMagic     = "MLCT"
	ticketFixedSize = 92
	ticketTrailer   = 4

	// MaxTicketCert is the largest issuer certificate a ticket may carry.
	MaxTicketCert = 8 << 10
	// MaxTicketSig is the largest signature a ticket may carry.
	MaxTicketSig = 512
	// MaxTicketLen is the largest ticket.
	MaxTicketLen = ticketFixedSize + meta.MaxSegmentIDLen + ticketTrailer + MaxTicketCert + MaxTicketSig

	// MaxTicketLife is how far in the future a Server accepts a ticket's
	// expiry: it remembers every spent ticket until it expires, so this
	// bounds that memory. Issue tickets that expire sooner, after the
	// target's longest wait for a transfer slot and its dial.
	MaxTicketLife = 10 * time.Minute
)

// IssueTicket checks t, encodes it and signs it with signer: the opaque
// bytes the backfill RPC carries to t.Target, which passes them to
// Client.Fetch. A zero t.Nonce is drawn from crypto/rand. Errors wrap
// ErrMalformed for a t that no server would admit (a segment name that
// fails validation, an invalid segment, a range that is not one, a zero
// broker id or expiry), or the signer's error.
func IssueTicket(signer TicketSigner, t Ticket) ([]byte, error) {
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("catchup: issuing a ticket: %w", err)
	}
	if t.Nonce == ([16]byte{}) {
		if _, err := rand.Read(t.Nonce[:]); err != nil {
			return nil, fmt.Errorf("catchup: issuing a ticket for segment %s: nonce: %w", t.Segment.ID, err)
		}
	}
	payload := t.appendPayload(nil)
	sig, cert, err := signer.SignTicket(payload)
	if err != nil {
		return nil, fmt.Errorf("catchup: signing the ticket for segment %s: %w", t.Segment.ID, err)
	}
	if len(cert) == 0 || len(cert) > MaxTicketCert {
		return nil, fmt.Errorf("%w: ticket for segment %s: the signer's certificate has %d bytes, want 1 to %d", ErrMalformed, t.Segment.ID, len(cert), MaxTicketCert)
	}
	if len(sig) == 0 || len(sig) > MaxTicketSig {
		return nil, fmt.Errorf("%w: ticket for segment %s: the signature has %d bytes, want 1 to %d", ErrMalformed, t.Segment.ID, len(sig), MaxTicketSig)
	}
	b := binary.LittleEndian.AppendUint16(payload, uint16(len(cert)))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(sig)))
	b = append(b, cert...)
	return append(b, sig...), nil
}

// check refuses a ticket no server would admit.
func (t *Ticket) check() error {
	if err := t.Segment.ID.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadName, err)
	}
	seg := meta.Segment{ID: t.Segment.ID, StartOffset: t.Segment.StartOffset, Length: t.Segment.Length,
		ByteSize: t.Segment.ByteSize, Checksum: t.Segment.Checksum, Sealed: true}
	if err := seg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if t.From < 0 || t.To < t.From {
		return fmt.Errorf("%w: segment %s: range [%d, %d) is not a range", ErrMalformed, t.Segment.ID, t.From, t.To)
	}
	if t.Source == 0 || t.Target == 0 || t.Issuer == 0 {
		return fmt.Errorf("%w: segment %s: source %d, target %d, issuer %d: broker id 0 is reserved", ErrMalformed, t.Segment.ID, t.Source, t.Target, t.Issuer)
	}
	if t.Expires.IsZero() || t.Expires.UnixNano() <= 0 {
		return fmt.Errorf("%w: segment %s: no expiry", ErrMalformed, t.Segment.ID)
	}
	return nil
}

func (t *Ticket) appendPayload(b []byte) []byte {
	le := binary.LittleEndian
	b = appendHead(b, ticketMagic, ticketVersion, t.Segment, t.From, t.To)
	b = le.AppendUint32(b, uint32(t.Source))
	b = le.AppendUint32(b, uint32(t.Target))
	b = le.AppendUint32(b, uint32(t.Issuer))
	b = le.AppendUint64(b, uint64(t.Expires.UnixNano()))
	b = append(b, t.Nonce[:]...)
	return append(b, t.Segment.ID...)
}

// signedTicket is a decoded ticket with the parts its signature check
// needs; the slices point into the bytes it was decoded from.
type signedTicket struct {
	Ticket
	payload, cert, sig []byte
}

// ParseTicket decodes a ticket's bytes without verifying its signature
// (a Server verifies it with its TicketVerifier): for logs and tests. The
// error wraps ErrMalformed and says what is wrong.
func ParseTicket(b []byte) (Ticket, error) {
	st, err := decodeTicket(b)
	if err != nil {
		return Ticket{}, fmt.Errorf("%w: %s", ErrMalformed, err.msg)
	}
	return st.Ticket, nil
}

// decodeTicket checks the layout of b (every length against its bound
// and the total) and decodes it. It allocates nothing sized by b.
func decodeTicket(b []byte) (*signedTicket, *decodeError) {
	if len(b) < ticketFixedSize+ticketTrailer {
		return nil, refuse(CodeUnauthenticated, "ticket of %d bytes, shorter than its %d-byte header", len(b), ticketFixedSize+ticketTrailer)
	}
	le := binary.LittleEndian
	if string(b[0:4]) != ticketMagic {
		return nil, refuse(CodeUnauthenticated, "ticket: bad magic %q, want %q", b[0:4], ticketMagic)
	}
	if b[4] != ticketVersion || b[5] != 0 {
		return nil, refuse(CodeUnauthenticated, "ticket: version %d (reserved %#x), this server reads version %d", b[4], b[5], ticketVersion)
	}
	n := int(le.Uint16(b[6:8]))
	if n == 0 || n > meta.MaxSegmentIDLen || len(b) < ticketFixedSize+n+ticketTrailer {
		return nil, refuse(CodeUnauthenticated, "ticket: segment id length %d in a ticket of %d bytes", n, len(b))
	}
	tr := b[ticketFixedSize+n:]
	c, s := int(le.Uint16(tr[0:2])), int(le.Uint16(tr[2:4]))
	if c == 0 || c > MaxTicketCert {
		return nil, refuse(CodeUnauthenticated, "ticket: certificate of %d bytes, want 1 to %d", c, MaxTicketCert)
	}
	if s == 0 || s > MaxTicketSig {
		return nil, refuse(CodeUnauthenticated, "ticket: signature of %d bytes, want 1 to %d", s, MaxTicketSig)
	}
	if want := ticketFixedSize + n + ticketTrailer + c + s; len(b) != want {
		return nil, refuse(CodeUnauthenticated, "ticket of %d bytes, its lengths add up to %d", len(b), want)
	}
	st := &signedTicket{
		Ticket: Ticket{
			Segment: meta.Segment{
				ID:          meta.SegmentID(b[ticketFixedSize : ticketFixedSize+n]),
				ByteSize:    int64(le.Uint64(b[24:32])),
				Checksum:    meta.Checksum(le.Uint64(b[32:40])),
				StartOffset: le.Uint64(b[40:48]),
				Length:      le.Uint64(b[48:56]),
				Sealed:      true,
			},
			From:    int64(le.Uint64(b[8:16])),
			To:      int64(le.Uint64(b[16:24])),
			Source:  meta.BrokerID(le.Uint32(b[56:60])),
			Target:  meta.BrokerID(le.Uint32(b[60:64])),
			Issuer:  meta.BrokerID(le.Uint32(b[64:68])),
			Expires: time.Unix(0, int64(le.Uint64(b[68:76]))),
		},
		payload: b[:ticketFixedSize+n],
		cert:    tr[ticketTrailer : ticketTrailer+c],
		sig:     tr[ticketTrailer+c : ticketTrailer+c+s],
	}
	copy(st.Nonce[:], b[76:92])
	return st, nil
}

// grants checks that the ticket admits req at source self at now: the
// source, the segment and its expectation, the range and the expiry. It
// says what does not match.
func (t *Ticket) grants(req *request, self meta.BrokerID, now time.Time) *decodeError {
	if t.Source != self {
		return refuse(CodeForbidden, "ticket is for source broker %d, this is broker %d", t.Source, self)
	}
	if t.Segment.ID != req.seg.ID {
		return refuse(CodeForbidden, "ticket is for segment %q, the request asks for %q", t.Segment.ID, req.seg.ID)
	}
	ts, rs := &t.Segment, &req.seg
	if ts.StartOffset != rs.StartOffset || ts.Length != rs.Length || ts.ByteSize != rs.ByteSize || ts.Checksum != rs.Checksum {
		return refuse(CodeForbidden, "segment %s: ticket expects start_offset %d, length %d, byte_size %d, checksum %v; the request expects %d, %d, %d, %v",
			ts.ID, ts.StartOffset, ts.Length, ts.ByteSize, ts.Checksum, rs.StartOffset, rs.Length, rs.ByteSize, rs.Checksum)
	}
	if req.from < t.From || req.to > t.To {
		return refuse(CodeForbidden, "segment %s: range [%d, %d) is outside the ticket's [%d, %d)", ts.ID, req.from, req.to, t.From, t.To)
	}
	if !now.Before(t.Expires) {
		return refuse(CodeForbidden, "segment %s: ticket expired at %s, %v ago", ts.ID, t.Expires.UTC().Format(time.RFC3339Nano), now.Sub(t.Expires))
	}
	if d := t.Expires.Sub(now); d > MaxTicketLife {
		return refuse(CodeForbidden, "segment %s: ticket expires in %v, more than the %v a server remembers tickets for", ts.ID, d, MaxTicketLife)
	}
	return nil
}
