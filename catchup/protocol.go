package catchup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/malachi-log/malachi/meta"
)

// Wire format, protocol version 2. All integers little-endian.
//
// Request (client → server), 64 + n + t bytes:
//
//	0   4  magic "MLCQ"
//	4   1  version (2)
//	5   1  reserved, 0
//	6   2  n: segment id length, 1..meta.MaxSegmentIDLen
//	8   8  from: first byte wanted
//	16  8  to: one past the last byte wanted
//	24  8  expected byte_size (frames only)
//	32  8  expected checksum (meta.Checksum)
//	40  8  expected start_offset
//	48  8  expected length (records)
//	56  2  t: ticket length, 0..MaxTicketLen (0: no ticket, Insecure only)
//	58  6  reserved, 0
//	64  n  segment id
//	..  t  ticket (ticket.go), opaque to the client
//
// Response (server → client), 16 + m bytes, then for CodeOK exactly count
// raw bytes of the copy, [from, to):
//
//	0   4  magic "MLCR"
//	4   1  version (2)
//	5   1  code (Code)
//	6   2  m: message length, at most maxMessage
//	8   8  count: bytes that follow (to-from for CodeOK, else 0)
//	16  m  message, UTF-8, says what was wrong
//
// Both sides read the fixed part into a fixed array and check every length
// field against its bound before reading (or allocating) anything more.
const (
	// Version is the protocol version this build speaks. Version 1
	// carried an HMAC over the request instead of a ticket.
	Version = 2

	reqMagic      = "MLCQ"
	respMagic     = "MLCR"
	reqFixedSize  = 64
	respFixedSize = 16
	maxMessage    = 1024
	maxRequest    = reqFixedSize + meta.MaxSegmentIDLen + MaxTicketLen
)

// request is a decoded catch-up request.
type request struct {
	seg      meta.Segment // ID, StartOffset, Length, ByteSize, Checksum; Sealed set
	from, to int64
	ticket   []byte // as received; nil: none
}

// appendHead appends the 56 bytes a request and a ticket begin with:
// magic, version, a reserved 0, the segment id's length, the byte range
// and the expected segment (byte_size, checksum, start_offset, length).
func appendHead(b []byte, magic string, version byte, seg meta.Segment, from, to int64) []byte {
	le := binary.LittleEndian
	b = append(b, magic...)
	b = append(b, version, 0)
	b = le.AppendUint16(b, uint16(len(seg.ID)))
	b = le.AppendUint64(b, uint64(from))
	b = le.AppendUint64(b, uint64(to))
	b = le.AppendUint64(b, uint64(seg.ByteSize))
	b = le.AppendUint64(b, uint64(seg.Checksum))
	b = le.AppendUint64(b, seg.StartOffset)
	return le.AppendUint64(b, seg.Length)
}

// appendRequest appends the encoded request to b.
func appendRequest(b []byte, r *request) []byte {
	b = appendHead(b, reqMagic, Version, r.seg, r.from, r.to)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.ticket)))
	b = append(b, 0, 0, 0, 0, 0, 0)
	b = append(b, r.seg.ID...)
	return append(b, r.ticket...)
}

// decodeError is a refusal found while decoding: the code to answer with
// and the message that explains it.
type decodeError struct {
	code Code
	msg  string
}

func (e *decodeError) Error() string { return e.code.String() + ": " + e.msg }
func (e *decodeError) Unwrap() error { return e.code.Err() }

func refuse(c Code, format string, args ...any) *decodeError {
	return &decodeError{code: c, msg: fmt.Sprintf(format, args...)}
}

// readRequest reads one request from r. It never reads more than
// maxRequest bytes and allocates nothing sized by the peer. A non-nil
// *decodeError says what to answer (a request cut short by the peer is
// answered CodeMalformed); any other error is an I/O error on r (the peer
// went away or stalled: answer nothing).
//
// Checks, in order: framing (magic, version, reserved, id and ticket
// lengths), then the segment name, the expectation and the range on their
// own. The ticket is only read here: the Server checks it before anything
// about the segment is looked at.
func readRequest(r io.Reader) (*request, error) {
	var h [reqFixedSize]byte
	if n, err := io.ReadFull(r, h[:]); err != nil {
		return nil, truncated(err, n, "its header", reqFixedSize)
	}
	if string(h[0:4]) != reqMagic {
		return nil, refuse(CodeMalformed, "bad magic %q, want %q", h[0:4], reqMagic)
	}
	if h[4] != Version {
		return nil, refuse(CodeVersion, "protocol version %d, this server speaks %d", h[4], Version)
	}
	if h[5] != 0 || string(h[58:64]) != "\x00\x00\x00\x00\x00\x00" {
		return nil, refuse(CodeMalformed, "reserved bytes are %x %x, want zeros", h[5], h[58:64])
	}
	le := binary.LittleEndian
	n := int(le.Uint16(h[6:8]))
	if n == 0 || n > meta.MaxSegmentIDLen {
		return nil, refuse(CodeMalformed, "segment id length %d, want 1 to %d", n, meta.MaxSegmentIDLen)
	}
	t := int(le.Uint16(h[56:58]))
	if t > MaxTicketLen {
		return nil, refuse(CodeMalformed, "ticket length %d, at most %d", t, MaxTicketLen)
	}
	// Fixed size, allocated only once the lengths passed their bounds.
	buf := new([maxRequest - reqFixedSize]byte)
	if got, err := io.ReadFull(r, buf[:n+t]); err != nil {
		return nil, truncated(err, reqFixedSize+got, "the segment id and ticket its header announces", reqFixedSize+n+t)
	}
	req := &request{
		from: int64(le.Uint64(h[8:16])),
		to:   int64(le.Uint64(h[16:24])),
		seg: meta.Segment{
			ID:          meta.SegmentID(buf[:n]),
			ByteSize:    int64(le.Uint64(h[24:32])),
			Checksum:    meta.Checksum(le.Uint64(h[32:40])),
			StartOffset: le.Uint64(h[40:48]),
			Length:      le.Uint64(h[48:56]),
			Sealed:      true,
		},
	}
	if t > 0 {
		req.ticket = buf[n : n+t]
	}
	if err := req.check(); err != nil {
		return req, err
	}
	return req, nil
}

// truncated turns a short read of a request into a refusal when the peer
// sent part of it and then ended its side (it may still read the answer);
// a peer that sent nothing, failed or stalled gets none.
func truncated(err error, got int, what string, want int) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) && got > 0 {
		return refuse(CodeMalformed, "truncated request: it ends after %d bytes, %s runs to %d", got, what, want)
	}
	return err
}

// check validates the segment name, the expectation and the range against
// the expectation's own bounds (the copy's real size is checked later).
func (r *request) check() *decodeError {
	if err := r.seg.ID.Validate(); err != nil {
		return refuse(CodeBadName, "%v", err)
	}
	if err := r.seg.Validate(); err != nil {
		return refuse(CodeMalformed, "expectation: %v", err)
	}
	if r.from < 0 || r.to < r.from {
		return refuse(CodeMalformed, "segment %s: range [%d, %d) is not a range", r.seg.ID, r.from, r.to)
	}
	return nil
}

// response is the fixed part of a server's answer.
type response struct {
	code  Code
	count int64
	msg   string
}

func appendResponse(b []byte, r response) []byte {
	msg := r.msg
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	b = append(b, respMagic...)
	b = append(b, Version, byte(r.code))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(msg)))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.count))
	return append(b, msg...)
}

// readResponse reads a server's answer. It checks the framing and the
// message length before reading the message.
func readResponse(r io.Reader) (response, error) {
	var buf [respFixedSize + maxMessage]byte
	if _, err := io.ReadFull(r, buf[:respFixedSize]); err != nil {
		return response{}, err
	}
	h := buf[:respFixedSize]
	if string(h[0:4]) != respMagic {
		return response{}, fmt.Errorf("%w: response magic %q, want %q", ErrMalformed, h[0:4], respMagic)
	}
	if h[4] != Version {
		return response{}, fmt.Errorf("%w: response version %d, want %d", ErrVersion, h[4], Version)
	}
	n := int(binary.LittleEndian.Uint16(h[6:8]))
	if n > maxMessage {
		return response{}, fmt.Errorf("%w: response message of %d bytes, at most %d allowed", ErrMalformed, n, maxMessage)
	}
	resp := response{code: Code(h[5]), count: int64(binary.LittleEndian.Uint64(h[8:16]))}
	if _, err := io.ReadFull(r, buf[respFixedSize:respFixedSize+n]); err != nil {
		return response{}, err
	}
	resp.msg = string(buf[respFixedSize : respFixedSize+n])
	return resp, nil
}
