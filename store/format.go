package store

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

// FrameHeaderSize is the size of a frame header:
// crc32c(u32) | payload_len(u32) | offset(u64), little-endian.
const FrameHeaderSize = 16

// FooterSize is the size of the seal footer written after the last frame.
const FooterSize = 40

// MaxPayload bounds a frame's payload. A header claiming more is damaged.
const MaxPayload = 1 << 30

// footerMagic opens a seal footer.
var footerMagic = [8]byte{'M', 'L', 'C', 'H', 'S', 'E', 'A', 'L'}

// castagnoli is computed once; every CRC in the package uses it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendFrame appends the frame holding payload at offset to dst and returns
// the extended slice.
func AppendFrame(dst []byte, offset uint64, payload []byte) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, FrameHeaderSize)...)
	dst = append(dst, payload...)
	h := dst[n:]
	binary.LittleEndian.PutUint32(h[4:8], uint32(len(payload)))
	binary.LittleEndian.PutUint64(h[8:16], offset)
	binary.LittleEndian.PutUint32(h[0:4], crc32.Checksum(h[4:], castagnoli))
	return dst
}

// Footer is the decoded seal footer.
type Footer struct {
	StartOffset uint64
	Length      uint64
	ByteSize    int64
	// FramesCRC is the CRC32C of the frames [0, ByteSize).
	FramesCRC uint32
}

// AppendFooter appends the encoded footer to dst.
func AppendFooter(dst []byte, f Footer) []byte {
	var b [FooterSize]byte
	copy(b[0:8], footerMagic[:])
	binary.LittleEndian.PutUint64(b[8:16], f.StartOffset)
	binary.LittleEndian.PutUint64(b[16:24], f.Length)
	binary.LittleEndian.PutUint64(b[24:32], uint64(f.ByteSize))
	binary.LittleEndian.PutUint32(b[32:36], f.FramesCRC)
	binary.LittleEndian.PutUint32(b[36:40], crc32.Checksum(b[:36], castagnoli))
	return append(dst, b[:]...)
}

// hasFooterMagic reports whether b starts with the footer magic.
func hasFooterMagic(b []byte) bool {
	return len(b) >= len(footerMagic) && bytes.Equal(b[:len(footerMagic)], footerMagic[:])
}

// DecodeFooter decodes a footer. ok is false unless b holds FooterSize bytes
// starting with the magic and the footer's own CRC matches.
func DecodeFooter(b []byte) (f Footer, ok bool) {
	if len(b) < FooterSize || !hasFooterMagic(b) {
		return Footer{}, false
	}
	if crc32.Checksum(b[:36], castagnoli) != binary.LittleEndian.Uint32(b[36:40]) {
		return Footer{}, false
	}
	size := binary.LittleEndian.Uint64(b[24:32])
	if size > 1<<62 {
		return Footer{}, false
	}
	return Footer{
		StartOffset: binary.LittleEndian.Uint64(b[8:16]),
		Length:      binary.LittleEndian.Uint64(b[16:24]),
		ByteSize:    int64(size),
		FramesCRC:   binary.LittleEndian.Uint32(b[32:36]),
	}, true
}

// frameHeader is a decoded frame header.
type frameHeader struct {
	crc    uint32
	length uint32
	offset uint64
}

func decodeHeader(b []byte) frameHeader {
	return frameHeader{
		crc:    binary.LittleEndian.Uint32(b[0:4]),
		length: binary.LittleEndian.Uint32(b[4:8]),
		offset: binary.LittleEndian.Uint64(b[8:16]),
	}
}

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
