package store

import (
	"errors"
	"hash/crc32"
	"io"
	"strconv"
)

// End is the durable end of a copy: where its last whole, valid frame ends.
type End struct {
	// NextOffset is one past the offset of the last valid frame; with no
	// frame it is the copy's start offset when known, else 0.
	NextOffset uint64
	// Bytes is the byte position just past the last whole, valid frame.
	Bytes int64
	// Frames counts the valid frames.
	Frames uint64
	// FileSize is the size of the file when it was scanned.
	FileSize int64
	// Footer reports a valid seal footer at Bytes that agrees with the
	// frames before it (start offset, length, byte size).
	Footer bool
	// Cause says why the scan stopped before FileSize: a *CorruptError
	// wrapping ErrTorn, ErrZeroTail, ErrPastFooter or ErrCorrupt (bad CRC,
	// offset gap, bad length, bad footer). It is nil when the frames (and
	// footer) run exactly to the end of the file, or when a scan bounded
	// by a segment's byte_size reached it.
	Cause error
}

// scanOpts configures one scan.
type scanOpts struct {
	// start is the offset the first frame must carry, when startKnown.
	start      uint64
	startKnown bool
	// limit, when >= 0, stops the scan at that byte: frames must end
	// exactly there, and a footer is looked for only there.
	limit int64
	// whole asks for the CRC of the frames [0, End.Bytes).
	whole bool
}

// scanResult is a scan's End plus what the store keeps in memory.
type scanResult struct {
	End
	start      uint64 // offset of the first frame (or opts.start)
	startKnown bool
	crc        uint32 // CRC32C of frames [0, Bytes), when opts.whole
	footer     Footer // valid when End.Footer
	magic      bool   // a footer's magic was seen where the frames end
}

// scanBufSize is the read size of a scan: large enough that a scan runs at
// sequential-read speed.
const scanBufSize = 256 << 10

// scanner reads a file through one buffer, front to back.
type scanner struct {
	r    io.ReaderAt
	size int64
	buf  []byte
	off  int64 // file position of buf[0]
	n    int   // valid bytes in buf

	whole     bool
	streaming bool
	crc       uint32 // CRC of frames [0, crcPos)
	crcPos    int64
}

// get returns the file bytes [pos, pos+k), k <= len(buf), or fewer at the
// end of the file. Bytes before pos may be dropped from the buffer; when the
// whole CRC is wanted they are folded into it first (all bytes before pos
// belong to valid frames whenever get is called outside streaming).
func (s *scanner) get(pos int64, k int) ([]byte, error) {
	if pos >= s.off && pos+int64(k) <= s.off+int64(s.n) {
		i := int(pos - s.off)
		return s.buf[i : i+k], nil
	}
	if s.whole && !s.streaming {
		s.flush(pos)
	}
	if pos >= s.off && pos < s.off+int64(s.n) {
		s.n = copy(s.buf, s.buf[pos-s.off:s.n])
	} else {
		s.n = 0
	}
	s.off = pos
	for s.n < k {
		want := int64(len(s.buf) - s.n)
		if left := s.size - (s.off + int64(s.n)); left < want {
			want = left
		}
		if want <= 0 {
			break
		}
		m, err := s.r.ReadAt(s.buf[s.n:s.n+int(want)], s.off+int64(s.n))
		s.n += m
		if errors.Is(err, io.EOF) {
			// The file shrank under the scan: its end is here.
			s.size = s.off + int64(s.n)
			break
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return nil, io.ErrNoProgress
		}
	}
	if k > s.n {
		k = s.n
	}
	return s.buf[:k], nil
}

// flush folds the bytes [crcPos, pos) of the buffer into the whole CRC.
func (s *scanner) flush(pos int64) {
	if pos <= s.crcPos {
		return
	}
	s.crc = crc32.Update(s.crc, castagnoli, s.buf[s.crcPos-s.off:pos-s.off])
	s.crcPos = pos
}

// scan finds the durable end of the file r of the given size. The error is
// an I/O error of r only; damage is reported in End.Cause.
func scan(r io.ReaderAt, size int64, o scanOpts, buf []byte) (scanResult, error) {
	s := &scanner{r: r, size: size, buf: buf, whole: o.whole}
	res := scanResult{start: o.start, startKnown: o.startKnown}
	var pos int64
	next := o.start
	stop := func(err error) {
		res.Cause = err
	}
	for {
		if o.limit >= 0 && pos == o.limit {
			if pos < s.size {
				if err := s.footerAt(pos, &res); err != nil {
					return res, err
				}
			}
			break
		}
		if pos >= s.size {
			break
		}
		want := FooterSize
		if rem := s.size - pos; rem < int64(want) {
			want = int(rem)
		}
		hb, err := s.get(pos, want)
		if err != nil {
			return res, err
		}
		if len(hb) == 0 {
			break // the file shrank
		}
		if hasFooterMagic(hb) {
			if o.limit >= 0 {
				stop(corruptf(pos, "seal footer before byte_size %d", o.limit))
				break
			}
			if err := s.footerAt(pos, &res); err != nil {
				return res, err
			}
			break
		}
		if len(hb) < FrameHeaderSize {
			if allZero(hb) {
				stop(&CorruptError{Offset: pos, Reason: "zero bytes after the last frame", Err: ErrZeroTail})
			} else {
				stop(&CorruptError{Offset: pos, Reason: "frame header cut short", Err: ErrTorn})
			}
			break
		}
		if allZero(hb[:FrameHeaderSize]) {
			stop(&CorruptError{Offset: pos, Reason: "zero bytes after the last frame", Err: ErrZeroTail})
			break
		}
		h := decodeHeader(hb)
		if h.length > MaxPayload {
			stop(corruptf(pos, "payload length %d exceeds %d", h.length, MaxPayload))
			break
		}
		flen := int64(FrameHeaderSize) + int64(h.length)
		if pos+flen > s.size {
			stop(&CorruptError{Offset: pos, Reason: "frame of " + itoa(flen) + " bytes runs past the end of the file at " + itoa(s.size), Err: ErrTorn})
			break
		}
		if o.limit >= 0 && pos+flen > o.limit {
			stop(corruptf(pos, "frame of %d bytes runs past byte_size %d", flen, o.limit))
			break
		}
		ok, pending, err := s.checkFrame(pos, flen, h.crc)
		if err != nil {
			return res, err
		}
		if !ok {
			stop(corruptf(pos, "frame CRC mismatch (offset field %d)", h.offset))
			break
		}
		if res.Frames == 0 && !res.startKnown {
			res.start, res.startKnown, next = h.offset, true, h.offset
		}
		if h.offset != next {
			if res.Frames == 0 {
				stop(corruptf(pos, "first frame has offset %d, want start offset %d", h.offset, next))
			} else {
				stop(corruptf(pos, "frame has offset %d, want %d", h.offset, next))
			}
			break
		}
		if pending != nil {
			s.crc, s.crcPos = *pending, pos+flen
		}
		res.Frames++
		next++
		pos += flen
	}
	res.Bytes = pos
	res.NextOffset = res.start + res.Frames
	res.FileSize = s.size
	if s.whole {
		s.flush(pos)
		res.crc = s.crc
	}
	return res, nil
}

// checkFrame checks the CRC of the frame [pos, pos+flen). A frame larger
// than the buffer is streamed through it; then, when the whole CRC is wanted,
// pending is the whole CRC through the frame, for the caller to adopt once it
// accepts the frame.
func (s *scanner) checkFrame(pos, flen int64, want uint32) (ok bool, pending *uint32, err error) {
	if flen <= int64(len(s.buf)) {
		b, err := s.get(pos, int(flen))
		if err != nil {
			return false, nil, err
		}
		if int64(len(b)) < flen {
			return false, nil, nil
		}
		return crc32.Checksum(b[4:], castagnoli) == want, nil, nil
	}
	if s.whole {
		if _, err := s.get(pos, FrameHeaderSize); err != nil {
			return false, nil, err
		}
		s.flush(pos)
	}
	s.streaming = true
	defer func() { s.streaming = false }()
	whole := s.crc
	var frame uint32
	for p, first := pos, true; p < pos+flen; first = false {
		k := int64(len(s.buf))
		if rem := pos + flen - p; rem < k {
			k = rem
		}
		b, err := s.get(p, int(k))
		if err != nil {
			return false, nil, err
		}
		if len(b) == 0 {
			return false, nil, nil
		}
		if s.whole {
			whole = crc32.Update(whole, castagnoli, b)
		}
		if first {
			frame = crc32.Update(frame, castagnoli, b[4:])
		} else {
			frame = crc32.Update(frame, castagnoli, b)
		}
		p += int64(len(b))
	}
	if frame != want {
		return false, nil, nil
	}
	if s.whole {
		return true, &whole, nil
	}
	return true, nil, nil
}

// footerAt looks for a seal footer at pos, where the frames end.
func (s *scanner) footerAt(pos int64, res *scanResult) error {
	want := FooterSize
	if rem := s.size - pos; rem < int64(want) {
		want = int(rem)
	}
	b, err := s.get(pos, want)
	if err != nil {
		return err
	}
	if !hasFooterMagic(b) {
		if allZero(b) {
			res.Cause = &CorruptError{Offset: pos, Reason: "zero bytes after the last frame", Err: ErrZeroTail}
		} else {
			res.Cause = &CorruptError{Offset: pos, Reason: "bytes after the last frame are neither a frame nor a footer", Err: ErrCorrupt}
		}
		return nil
	}
	res.magic = true
	if len(b) < FooterSize {
		res.Cause = &CorruptError{Offset: pos, Reason: "seal footer cut short", Err: ErrTorn}
		return nil
	}
	f, ok := DecodeFooter(b)
	if !ok {
		res.Cause = corruptf(pos, "seal footer CRC mismatch")
		return nil
	}
	next := res.start + res.Frames
	switch {
	case f.ByteSize != pos:
		res.Cause = corruptf(pos, "seal footer records byte_size %d", f.ByteSize)
	case res.Frames > 0 && f.StartOffset != res.start, res.startKnown && f.StartOffset != res.start:
		res.Cause = corruptf(pos, "seal footer records start offset %d, frames start at %d", f.StartOffset, res.start)
	case f.Length != res.Frames:
		res.Cause = corruptf(pos, "seal footer records %d frames, found %d (next offset %d)", f.Length, res.Frames, next)
	default:
		res.Footer, res.footer = true, f
		if !res.startKnown {
			res.start, res.startKnown = f.StartOffset, true
		}
		if end := pos + FooterSize; end < s.size {
			res.Cause = &CorruptError{Offset: end, Reason: itoa(s.size-end) + " bytes follow the seal footer", Err: ErrPastFooter}
		}
	}
	return nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
