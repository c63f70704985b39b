package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/malachi-log/malachi/meta"
)

// A fast path for the JSON of one meta.Segment, the bulk of a raft
// snapshot: appendSegment writes the bytes json.Marshal writes, and
// parseSegment reads exactly that form, leaving anything else to
// encoding/json. encoding/json costs ~7 µs per segment round trip, 70 s at
// 10^7 segments; this is several times faster.

// appendSegment appends the JSON of s, byte for byte what json.Marshal(s)
// returns.
func appendSegment(b []byte, s *meta.Segment) []byte {
	b = append(b, `{"id":`...)
	if plainID(s.ID) {
		b = append(append(append(b, '"'), s.ID...), '"')
	} else {
		q, _ := json.Marshal(string(s.ID)) // a string always marshals
		b = append(b, q...)
	}
	b = append(b, `,"start_offset":`...)
	b = strconv.AppendUint(b, s.StartOffset, 10)
	b = append(b, `,"length":`...)
	b = strconv.AppendUint(b, s.Length, 10)
	b = append(b, `,"byte_size":`...)
	b = strconv.AppendInt(b, s.ByteSize, 10)
	b = append(b, `,"sealed":`...)
	b = strconv.AppendBool(b, s.Sealed)
	b = append(b, `,"checksum":"`...)
	b = append(b, s.Checksum.String()...)
	b = append(b, `","replicas":`...)
	if s.Replicas == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, r := range s.Replicas {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(r), 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, s.Version, 10)
	return append(b, '}')
}

// plainID reports whether id needs no JSON escaping.
func plainID(id meta.SegmentID) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// decodeSegment sets *s to the segment b holds: by parseSegment when b is
// in appendSegment's form, else by encoding/json (unknown fields ignored,
// as json.Decoder does). s's replica array is reused.
func decodeSegment(b []byte, s *meta.Segment) error {
	if parseSegment(b, s) {
		return nil
	}
	*s = meta.Segment{}
	return json.Unmarshal(b, s)
}

// parseSegment parses appendSegment's form exactly, or returns false.
func parseSegment(b []byte, s *meta.Segment) bool {
	p := parser{b: b}
	rs := s.Replicas[:0]
	var id []byte
	ok := p.lit(`{"id":"`) && p.plain(&id) && p.lit(`","start_offset":`) && p.uint(&s.StartOffset, 64) &&
		p.lit(`,"length":`) && p.uint(&s.Length, 64) && p.lit(`,"byte_size":`) && p.int(&s.ByteSize) &&
		p.lit(`,"sealed":`) && p.bool(&s.Sealed) && p.lit(`,"checksum":"`) && p.checksum(&s.Checksum) &&
		p.lit(`","replicas":`) && p.replicas(&rs) && p.lit(`,"version":`) && p.uint(&s.Version, 64) &&
		p.lit("}") && p.i == len(b)
	if !ok {
		return false
	}
	s.ID, s.Replicas = meta.SegmentID(id), rs
	return true
}

type parser struct {
	b []byte
	i int
}

func (p *parser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

func (p *parser) plain(out *[]byte) bool {
	j := p.i
	for j < len(p.b) && p.b[j] != '"' {
		j++
	}
	id := p.b[p.i:j]
	if len(id) == 0 || !plainID(meta.SegmentID(id)) {
		return false
	}
	*out, p.i = id, j
	return true
}

// uint parses a JSON unsigned integer of at most bits bits (no sign, no
// leading zero, no fraction or exponent).
func (p *parser) uint(out *uint64, bits int) bool {
	j := p.i
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	if j == p.i || j-p.i > 1 && p.b[p.i] == '0' || j < len(p.b) && (p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E') {
		return false
	}
	v, err := strconv.ParseUint(string(p.b[p.i:j]), 10, bits)
	if err != nil {
		return false
	}
	*out, p.i = v, j
	return true
}

func (p *parser) int(out *int64) bool {
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	var u uint64
	if !p.uint(&u, 64) || u > 1<<63 || u == 1<<63 && !neg {
		return false
	}
	*out = int64(u) // 1<<63 wraps to the minimum, negated below to itself
	if neg {
		*out = -*out
	}
	return true
}

func (p *parser) bool(out *bool) bool {
	if p.lit("true") {
		*out = true
		return true
	}
	*out = false
	return p.lit("false")
}

func (p *parser) checksum(out *meta.Checksum) bool {
	j := p.i
	for j < len(p.b) && p.b[j] != '"' && p.b[j] != '\\' {
		j++
	}
	if j == len(p.b) || p.b[j] != '"' {
		return false
	}
	if err := out.UnmarshalText(p.b[p.i:j]); err != nil {
		return false
	}
	p.i = j
	return true
}

func (p *parser) replicas(out *[]meta.BrokerID) bool {
	if p.lit("null") {
		*out = nil
		return true
	}
	if !p.lit("[") {
		return false
	}
	rs := (*out)[:0]
	if rs == nil {
		rs = make([]meta.BrokerID, 0, 4) // [] is an empty set, not null
	}
	for first := true; !p.lit("]"); first = false {
		if !first && !p.lit(",") {
			return false
		}
		var v uint64
		if !p.uint(&v, 32) {
			return false
		}
		rs = append(rs, meta.BrokerID(v))
	}
	*out = rs
	return true
}

// reader reads the JSON values of a snapshot one at a time from a
// buffered stream, counting bytes for error messages.
type reader struct {
	br  *bufio.Reader
	off int64
	buf []byte
}

// next returns the next non-space byte, not consumed.
func (r *reader) next() (byte, error) {
	for {
		c, err := r.br.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return c, r.br.UnreadByte()
		}
		r.off++
	}
}

// expect consumes c, the next non-space byte.
func (r *reader) expect(c byte) error {
	got, err := r.next()
	if err != nil {
		return err
	}
	if got != c {
		return fmt.Errorf("got %q, want %q", got, c)
	}
	r.br.ReadByte()
	r.off++
	return nil
}

// value returns the bytes of the next JSON value, valid until the next
// call. It finds where the value ends; whoever parses it checks it.
func (r *reader) value() ([]byte, error) {
	c, err := r.next()
	if err != nil {
		return nil, err
	}
	r.buf = r.buf[:0]
	var sc scan
	if c != '{' && c != '[' && c != '"' {
		for { // a scalar: up to a delimiter
			c, err := r.br.ReadByte()
			if err != nil {
				return nil, io.ErrUnexpectedEOF
			}
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n' {
				r.br.UnreadByte()
				r.off += int64(len(r.buf))
				return r.buf, nil
			}
			r.buf = append(r.buf, c)
		}
	}
	for {
		chunk, err := r.br.ReadSlice(sc.until(c))
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return nil, io.ErrUnexpectedEOF
		}
		start := len(r.buf)
		r.buf = append(r.buf, chunk...)
		if end := sc.feed(r.buf, start); end >= 0 {
			// A string or composite ends at the delimiter just read.
			r.off += int64(len(r.buf))
			return r.buf, nil
		}
	}
}

// scan tracks where a JSON string, object or array ends.
type scan struct {
	depth int
	str   bool // inside a string
	esc   bool // after a backslash inside a string
	begun bool
}

// until is the byte worth reading up to next.
func (s *scan) until(first byte) byte {
	switch {
	case s.str:
		return '"'
	case !s.begun:
		return first
	case first == '[':
		return ']'
	case first == '"':
		return '"'
	}
	return '}'
}

// feed scans b[from:] and returns the index of the value's last byte, or
// -1 when it has not ended.
func (s *scan) feed(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		c := b[i]
		s.begun = true
		switch {
		case s.esc:
			s.esc = false
		case s.str:
			if c == '\\' {
				s.esc = true
			} else if c == '"' {
				s.str = false
				if s.depth == 0 {
					return i
				}
			}
		case c == '"':
			s.str = true
		case c == '{' || c == '[':
			s.depth++
		case c == '}' || c == ']':
			s.depth--
			if s.depth == 0 {
				return i
			}
		}
	}
	return -1
}
