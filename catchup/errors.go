package catchup

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is. An error a Client returns for a
// refusal by the server wraps both a *RemoteError and the sentinel of its
// Code; errors raised locally wrap the sentinel and, where there is one, the
// underlying cause (a store error, a syscall errno, os.ErrDeadlineExceeded).
var (
	// ErrUnauthenticated: the request carries no ticket where one is
	// required, or its ticket is not one (malformed, a signature that does
	// not verify, a certificate that does not chain to the cluster CA or
	// names no broker, an issuer other than the certificate's), or the
	// TLS handshake of the data connection failed. A fresh ticket from
	// the coordinator, or matching certificates, are needed.
	ErrUnauthenticated = errors.New("catchup: unauthenticated")
	// ErrForbidden: the request's ticket is genuine but does not admit
	// it: issued for another source broker, segment, expectation or
	// range, expired, expiring further ahead than MaxTicketLife, or
	// already used (a ticket admits one request). Ask the coordinator for
	// a new ticket.
	ErrForbidden = errors.New("catchup: forbidden")
	// ErrMalformed: the request is not a well-formed catch-up request (bad
	// magic, reserved bits, a segment name length of 0 or more than
	// meta.MaxSegmentIDLen, an invalid expectation, from > to).
	ErrMalformed = errors.New("catchup: malformed request")
	// ErrVersion: the peer speaks a protocol version this build does not.
	ErrVersion = errors.New("catchup: unsupported protocol version")
	// ErrBadName: the segment name fails meta.SegmentID.Validate (it could
	// escape the data directory). Nothing is opened.
	ErrBadName = errors.New("catchup: bad segment name")
	// ErrOutOfRange: the byte range does not lie within the sealed copy
	// (frames plus seal footer).
	ErrOutOfRange = errors.New("catchup: range out of bounds")
	// ErrUnknownSegment: the source broker holds no copy of the segment.
	ErrUnknownSegment = errors.New("catchup: unknown segment")
	// ErrUnsealed: the source's copy is not sealed; only sealed copies are
	// transferred.
	ErrUnsealed = errors.New("catchup: copy not sealed")
	// ErrLatched: the source's copy is latched failed by its store and
	// refuses every request; pick another source.
	ErrLatched = errors.New("catchup: copy latched")
	// ErrMismatch: the source's sealed copy does not match what the target
	// expects (start offset, length, byte size or checksum), or is short.
	ErrMismatch = errors.New("catchup: copy does not match the expectation")
	// ErrBusy: the broker runs as many transfers as its limit allows and no
	// slot freed up within the queue wait. Retry later.
	ErrBusy = errors.New("catchup: too many concurrent transfers")
	// ErrInternal: the server failed for a reason of its own (an I/O error
	// opening the copy). Retry, possibly from another source.
	ErrInternal = errors.New("catchup: server error")
	// ErrCut: the transfer ended before every announced byte arrived
	// (connection closed or reset, idle timeout). The target keeps its
	// valid frames; the next Fetch resumes from there.
	ErrCut = errors.New("catchup: transfer cut short")
	// ErrVerify: every byte arrived but the copy failed verification on
	// arrival (frame CRC, offsets, footer, checksum). The target is left at
	// its last valid frame; nothing is taken for healed.
	ErrVerify = errors.New("catchup: copy failed verification")
	// ErrTarget: preparing or writing the target copy failed (for example
	// ENOSPC). The error also wraps the cause.
	ErrTarget = errors.New("catchup: target copy failed")
	// ErrServerClosed is returned by Server.Serve after Server.Close.
	ErrServerClosed = errors.New("catchup: server closed")
)

// Code is the status a server answers a request with. The zero value is OK.
type Code uint8

// Status codes on the wire. Values are part of the protocol since version
// 1: never renumber, only append.
const (
	CodeOK Code = iota
	CodeUnauthenticated
	CodeMalformed
	CodeVersion
	CodeBadName
	CodeOutOfRange
	CodeUnknownSegment
	CodeUnsealed
	CodeLatched
	CodeMismatch
	CodeBusy
	CodeInternal
	CodeForbidden // since protocol version 2
	numCodes
)

var codeErrs = [numCodes]error{
	CodeOK:              nil,
	CodeUnauthenticated: ErrUnauthenticated,
	CodeMalformed:       ErrMalformed,
	CodeVersion:         ErrVersion,
	CodeBadName:         ErrBadName,
	CodeOutOfRange:      ErrOutOfRange,
	CodeUnknownSegment:  ErrUnknownSegment,
	CodeUnsealed:        ErrUnsealed,
	CodeLatched:         ErrLatched,
	CodeMismatch:        ErrMismatch,
	CodeBusy:            ErrBusy,
	CodeInternal:        ErrInternal,
	CodeForbidden:       ErrForbidden,
}

var codeNames = [numCodes]string{
	"ok", "unauthenticated", "malformed", "unsupported-version", "bad-segment-name",
	"out-of-range", "unknown-segment", "unsealed", "latched", "mismatch", "busy", "internal",
	"forbidden",
}

// String returns a short name such as "latched".
func (c Code) String() string {
	if c < numCodes {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Err returns the sentinel error of c, nil for CodeOK and ErrInternal for a
// code this build does not know.
func (c Code) Err() error {
	if c < numCodes {
		return codeErrs[c]
	}
	return ErrInternal
}

// Retryable reports whether the same request may succeed later against the
// same source without anything else changing (busy, internal).
func (c Code) Retryable() bool { return c == CodeBusy || c == CodeInternal }

// codeOf classifies a server-side error by the sentinel it wraps.
func codeOf(err error) Code {
	for c := CodeUnauthenticated; c < numCodes; c++ {
		if errors.Is(err, codeErrs[c]) {
			return c
		}
	}
	return CodeInternal
}

// RemoteError is a refusal answered by the server. It unwraps to the
// sentinel of its Code, so errors.Is(err, ErrLatched) works on it.
type RemoteError struct {
	Addr    string // the server's address
	Code    Code
	Message string // the server's explanation, at most maxMessage bytes
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("catchup: %s refused: %s: %s", e.Addr, e.Code, e.Message)
}

// Unwrap returns the sentinel of e.Code.
func (e *RemoteError) Unwrap() error { return e.Code.Err() }
