package harness

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/malachi-log/malachi/meta"
)

// The on-disk format of a copy (store/doc.go): frames
// crc32c(u32) | payload_len(u32) | offset(u64) | payload, then a 40-byte seal
// footer magic(8) | start_offset(u64) | length(u64) | byte_size(u64) |
// crc32c of the frames (u32) | crc32c of the 36 bytes before it (u32).
// The harness reads copies itself, as an auditor independent of the broker
// that wrote them.
const (
	frameHeaderSize = 16
	footerSize      = 40
	footerMagic     = "MLCHSEAL"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrAudit marks a copy whose bytes do not match its segment's seal.
var ErrAudit = errors.New("malachi: copy does not match its seal")

// AuditCopy reads the whole file at path and checks it is a byte-exact
// sealed copy of seg: every frame's CRC and offset, the frames' total CRC
// against seg.Checksum, the footer's fields and CRC, and the file's size.
// A mismatch wraps ErrAudit with the byte offset where it was found.
func AuditCopy(path string, seg meta.Segment) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	want := SealedSize(seg)
	if fi.Size() != want {
		return fmt.Errorf("%w: %s: %d bytes, sealed copy measures %d", ErrAudit, path, fi.Size(), want)
	}
	r := bufio.NewReaderSize(f, 256<<10)
	var hdr [frameHeaderSize]byte
	var payload []byte
	var pos int64
	next := seg.StartOffset
	total := crc32.New(castagnoli)
	for pos < seg.ByteSize {
		if seg.ByteSize-pos < frameHeaderSize {
			return fmt.Errorf("%w: %s: frame header at byte %d runs past byte_size %d", ErrAudit, path, pos, seg.ByteSize)
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("%w: %s: frame header at byte %d: %v", ErrAudit, path, pos, err)
		}
		n := int64(binary.LittleEndian.Uint32(hdr[4:8]))
		off := binary.LittleEndian.Uint64(hdr[8:16])
		if pos+frameHeaderSize+n > seg.ByteSize {
			return fmt.Errorf("%w: %s: frame at byte %d: payload of %d bytes runs past byte_size %d", ErrAudit, path, pos, n, seg.ByteSize)
		}
		if off != next {
			return fmt.Errorf("%w: %s: frame at byte %d: offset %d, want %d", ErrAudit, path, pos, off, next)
		}
		if int64(cap(payload)) < n {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return fmt.Errorf("%w: %s: frame at byte %d: payload: %v", ErrAudit, path, pos, err)
		}
		c := crc32.Update(0, castagnoli, hdr[4:])
		c = crc32.Update(c, castagnoli, payload)
		if c != binary.LittleEndian.Uint32(hdr[0:4]) {
			return fmt.Errorf("%w: %s: frame at byte %d (offset %d): crc32c mismatch", ErrAudit, path, pos, off)
		}
		total.Write(hdr[:])
		total.Write(payload)
		pos += frameHeaderSize + n
		next++
	}
	if next != seg.EndOffset() {
		return fmt.Errorf("%w: %s: %d records, sealed length %d", ErrAudit, path, next-seg.StartOffset, seg.Length)
	}
	var foot [footerSize]byte
	if _, err := io.ReadFull(r, foot[:]); err != nil {
		return fmt.Errorf("%w: %s: footer at byte %d: %v", ErrAudit, path, pos, err)
	}
	return auditFooter(foot, path, pos, seg, total.Sum32())
}

// auditFooter checks the seal footer read at byte pos of path against
// seg and the frames' crc32c.
func auditFooter(foot [footerSize]byte, path string, pos int64, seg meta.Segment, frames uint32) error {
	if string(foot[:8]) != footerMagic {
		return fmt.Errorf("%w: %s: no seal footer magic at byte %d", ErrAudit, path, pos)
	}
	if crc32.Checksum(foot[:36], castagnoli) != binary.LittleEndian.Uint32(foot[36:40]) {
		return fmt.Errorf("%w: %s: footer at byte %d: crc32c mismatch", ErrAudit, path, pos)
	}
	start := binary.LittleEndian.Uint64(foot[8:16])
	length := binary.LittleEndian.Uint64(foot[16:24])
	size := int64(binary.LittleEndian.Uint64(foot[24:32]))
	if start != seg.StartOffset || length != seg.Length || size != seg.ByteSize {
		return fmt.Errorf("%w: %s: footer says start %d length %d byte_size %d, metadata %d %d %d",
			ErrAudit, path, start, length, size, seg.StartOffset, seg.Length, seg.ByteSize)
	}
	framesCRC := binary.LittleEndian.Uint32(foot[32:36])
	if framesCRC != frames {
		return fmt.Errorf("%w: %s: footer frames crc32c %08x, frames hash to %08x", ErrAudit, path, framesCRC, frames)
	}
	if seg.Checksum != meta.CRC32C(framesCRC) {
		return fmt.Errorf("%w: %s: frames crc32c %08x, metadata checksum %s", ErrAudit, path, framesCRC, seg.Checksum)
	}
	return nil
}
