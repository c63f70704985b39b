package catchup

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// Wire format, protocol version 1. All integers little-endian.
//
// Request (client → server), 80 + n + 32 bytes:
//
//	0   4  magic "MLCQ"
//	4   1  version (1)
//	5   1  reserved, 0
//	6   2  n: segment id length, 1..meta.MaxSegmentIDLen
//	8   8  from: first byte wanted
//	16  8  to: one past the last byte wanted
//	24  8  expected byte_size (frames only)
//	32  8  expected checksum (meta.Checksum)
//	40  8  expected start_offset
//	48  8  expected length (records)
//	56  8  timestamp, Unix nanoseconds
//	64 16  nonce, random
//	80  n  segment id
//	.. 32  HMAC-SHA256(cluster secret, every byte before it)
//
// Response (server → client), 16 + m bytes, then for CodeOK exactly count
// raw bytes of the copy, [from, to):
//
//	0   4  magic "MLCR"
//	4   1  version (1)
//	5   1  code (Code)
//	6   2  m: message length, at most maxMessage
//	8   8  count: bytes that follow (to-from for CodeOK, else 0)
//	16  m  message, UTF-8, says what was wrong
//
// Both sides read the fixed part into a fixed array and check every length
// field against its bound before reading (or allocating) anything more.
const (
	// Version is the protocol version this build speaks.
	Version = 1

	reqMagic      = "MLCQ"
	respMagic     = "MLCR"
	reqFixedSize  = 80
	macSize       = sha256.Size
	respFixedSize = 16
	maxMessage    = 1024
	maxRequest    = reqFixedSize + meta.MaxSegmentIDLen + macSize

	// MinSecretLen is the shortest cluster secret the Server and Client
	// accept.
	MinSecretLen = 16
)

// request is a decoded catch-up request.
type request struct {
	seg      meta.Segment // ID, StartOffset, Length, ByteSize, Checksum; Sealed set
	from, to int64
	time     time.Time
	nonce    [16]byte
}

// appendRequest appends the encoded, authenticated request to b.
func appendRequest(b []byte, r *request, secret []byte) []byte {
	start := len(b)
	b = append(b, reqMagic...)
	b = append(b, Version, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.seg.ID)))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.from))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.to))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.seg.ByteSize))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.seg.Checksum))
	b = binary.LittleEndian.AppendUint64(b, r.seg.StartOffset)
	b = binary.LittleEndian.AppendUint64(b, r.seg.Length)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.time.UnixNano()))
	b = append(b, r.nonce[:]...)
	b = append(b, r.seg.ID...)
	m := hmac.New(sha256.New, secret)
	m.Write(b[start:])
	return m.Sum(b)
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

// readRequest reads and authenticates one request from r. It never reads
// more than maxRequest bytes and allocates nothing sized by the peer. A
// non-nil *decodeError says what to answer; any other error is an I/O
// error on r (the peer went away: answer nothing).
//
// Checks, in order: framing (magic, version, reserved, id length), the
// HMAC, then the segment name and the expectation. Nothing about the
// segment is looked at before the request is authenticated.
func readRequest(r io.Reader, secret []byte) (*request, error) {
	var buf [maxRequest]byte
	if _, err := io.ReadFull(r, buf[:reqFixedSize]); err != nil {
		return nil, err
	}
	h := buf[:reqFixedSize]
	if string(h[0:4]) != reqMagic {
		return nil, refuse(CodeMalformed, "bad magic %q, want %q", h[0:4], reqMagic)
	}
	if h[4] != Version {
		return nil, refuse(CodeVersion, "protocol version %d, this server speaks %d", h[4], Version)
	}
	if h[5] != 0 {
		return nil, refuse(CodeMalformed, "reserved byte is %#x, want 0", h[5])
	}
	n := int(binary.LittleEndian.Uint16(h[6:8]))
	if n == 0 || n > meta.MaxSegmentIDLen {
		return nil, refuse(CodeMalformed, "segment id length %d, want 1 to %d", n, meta.MaxSegmentIDLen)
	}
	total := reqFixedSize + n + macSize
	if _, err := io.ReadFull(r, buf[reqFixedSize:total]); err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, secret)
	m.Write(buf[:reqFixedSize+n])
	if !hmac.Equal(m.Sum(nil), buf[reqFixedSize+n:total]) {
		return nil, refuse(CodeUnauthenticated, "bad request signature (is the cluster secret the same on every broker?)")
	}
	le := binary.LittleEndian
	req := &request{
		from: int64(le.Uint64(h[8:16])),
		to:   int64(le.Uint64(h[16:24])),
		seg: meta.Segment{
			ID:          meta.SegmentID(buf[reqFixedSize : reqFixedSize+n]),
			ByteSize:    int64(le.Uint64(h[24:32])),
			Checksum:    meta.Checksum(le.Uint64(h[32:40])),
			StartOffset: le.Uint64(h[40:48]),
			Length:      le.Uint64(h[48:56]),
			Sealed:      true,
		},
		time: time.Unix(0, int64(le.Uint64(h[56:64]))),
	}
	copy(req.nonce[:], h[64:80])
	if err := req.check(); err != nil {
		return req, err
	}
	return req, nil
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
