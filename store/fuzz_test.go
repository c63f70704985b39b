package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// refEnd is a naive reference for the durable end: walk whole frames while
// each passes its CRC and continues the offsets; stop at anything else.
func refEnd(data []byte, limit int64, start uint64, startKnown bool) (bytes int64, frames uint64) {
	end := int64(len(data))
	if limit >= 0 && limit < end {
		end = limit
	}
	var pos int64
	next, known := start, startKnown
	for pos+FrameHeaderSize <= end {
		h := data[pos : pos+FrameHeaderSize]
		n := int64(binary.LittleEndian.Uint32(h[4:8]))
		if n > MaxPayload || pos+FrameHeaderSize+n > end {
			break
		}
		fr := data[pos : pos+FrameHeaderSize+n]
		if crc32.Checksum(fr[4:], castagnoli) != binary.LittleEndian.Uint32(h[0:4]) {
			break
		}
		off := binary.LittleEndian.Uint64(h[8:16])
		if !known {
			next, known = off, true
		}
		if off != next {
			break
		}
		next++
		frames++
		pos += FrameHeaderSize + n
	}
	return pos, frames
}

func scanBytes(t *testing.T, data []byte, o scanOpts, bufSize int) scanResult {
	t.Helper()
	r, err := scan(bytes.NewReader(data), int64(len(data)), o, make([]byte, bufSize))
	if err != nil {
		t.Fatalf("scan of an in-memory file: %v", err)
	}
	return r
}

// FuzzScan checks the frame decoder and the durable-end scan: it never
// panics, never reports a durable end past a damaged frame (it agrees with
// the naive reference), computes the CRC of exactly the frames it accepts,
// and gives the same answer whatever its buffer size.
func FuzzScan(f *testing.F) {
	var valid []byte
	for i := 0; i < 5; i++ {
		valid = AppendFrame(valid, 7+uint64(i), bytes.Repeat([]byte{byte(i)}, 3+i*11))
	}
	sealed := AppendFooter(append([]byte{}, valid...), Footer{StartOffset: 7, Length: 5, ByteSize: int64(len(valid)), FramesCRC: crc32.Checksum(valid, castagnoli)})
	f.Add(valid, int64(-1), uint64(7), true)
	f.Add(sealed, int64(-1), uint64(0), false)
	f.Add(sealed, int64(len(valid)), uint64(7), true)
	f.Add(valid[:len(valid)-3], int64(-1), uint64(7), true)
	f.Add(append(append([]byte{}, valid...), make([]byte, 100)...), int64(-1), uint64(7), false)
	f.Add([]byte{}, int64(-1), uint64(0), false)
	f.Fuzz(func(t *testing.T, data []byte, limit int64, start uint64, startKnown bool) {
		if limit < -1 || limit > int64(len(data)) {
			limit = -1
		}
		o := scanOpts{limit: limit, start: start, startKnown: startKnown, whole: true}
		big := scanBytes(t, data, o, 4096)
		small := scanBytes(t, data, o, 48)
		if big.End.Bytes != small.End.Bytes || big.Frames != small.Frames || big.Footer != small.Footer || big.crc != small.crc || big.NextOffset != small.NextOffset {
			t.Fatalf("buffer size changes the answer: %+v vs %+v", big.End, small.End)
		}
		r := big
		if r.Bytes < 0 || r.Bytes > int64(len(data)) || (limit >= 0 && r.Bytes > limit) {
			t.Fatalf("durable end %d outside [0, %d] (limit %d)", r.Bytes, len(data), limit)
		}
		wantBytes, wantFrames := refEnd(data, limit, start, startKnown)
		if r.Bytes != wantBytes || r.Frames != wantFrames {
			t.Fatalf("scan says %d bytes / %d frames, reference %d / %d (cause %v)", r.Bytes, r.Frames, wantBytes, wantFrames, r.Cause)
		}
		if got := crc32.Checksum(data[:r.Bytes], castagnoli); got != r.crc {
			t.Fatalf("whole CRC %08x, want %08x", r.crc, got)
		}
		if r.Cause == nil && !r.Footer && r.Bytes != int64(len(data)) && (limit < 0 || r.Bytes != limit) {
			t.Fatalf("scan stopped at %d of %d with no cause", r.Bytes, len(data))
		}
		if r.Cause != nil {
			var ce *CorruptError
			if !errors.As(r.Cause, &ce) || ce.Offset < r.Bytes {
				t.Fatalf("cause %v is not a *CorruptError at or after %d", r.Cause, r.Bytes)
			}
		}
		if r.Footer {
			ft, ok := DecodeFooter(data[r.Bytes:])
			if !ok || ft.ByteSize != r.Bytes || ft.Length != r.Frames {
				t.Fatalf("footer reported at %d but it does not decode to the frames: %+v %v", r.Bytes, ft, ok)
			}
		}
	})
}
