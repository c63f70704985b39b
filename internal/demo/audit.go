package demo

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// The on-disk format of a copy (DESIGN.md, store/): frames
// crc32c(u32) | payload_len(u32) | offset(u64) | payload, then a 40-byte seal
// footer magic(8) | start_offset(u64) | length(u64) | byte_size(u64) |
// crc32c of the frames (u32) | crc32c of the 36 bytes before it (u32).
// The demo reads copies itself, as an auditor independent of the broker
// that wrote them.
const (
	frameHeaderSize = 16
	footerSize      = 40
	footerMagic     = "MLCHSEAL"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errAudit marks a copy whose bytes do not match its segment's seal.
var errAudit = errors.New("malachi: copy does not match its seal")

// auditCopyFile reads the whole file at path and checks it is a byte-exact
// sealed copy of seg: every frame's CRC and offset, the frames' total CRC
// against seg.Checksum, the footer's fields and CRC, and the file's size.
// A mismatch wraps errAudit with the byte offset where it was found.
func auditCopyFile(path string, seg meta.Segment) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	want := seg.ByteSize + footerSize
	if fi.Size() != want {
		return fmt.Errorf("%w: %s: %d bytes, sealed copy measures %d", errAudit, path, fi.Size(), want)
	}
	r := bufio.NewReaderSize(f, 256<<10)
	var hdr [frameHeaderSize]byte
	var payload []byte
	var pos int64
	next := seg.StartOffset
	total := crc32.New(castagnoli)
	for pos < seg.ByteSize {
		if seg.ByteSize-pos < frameHeaderSize {
			return fmt.Errorf("%w: %s: frame header at byte %d runs past byte_size %d", errAudit, path, pos, seg.ByteSize)
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("%w: %s: frame header at byte %d: %v", errAudit, path, pos, err)
		}
		n := int64(binary.LittleEndian.Uint32(hdr[4:8]))
		off := binary.LittleEndian.Uint64(hdr[8:16])
		if pos+frameHeaderSize+n > seg.ByteSize {
			return fmt.Errorf("%w: %s: frame at byte %d: payload of %d bytes runs past byte_size %d", errAudit, path, pos, n, seg.ByteSize)
		}
		if off != next {
			return fmt.Errorf("%w: %s: frame at byte %d: offset %d, want %d", errAudit, path, pos, off, next)
		}
		if int64(cap(payload)) < n {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return fmt.Errorf("%w: %s: frame at byte %d: payload: %v", errAudit, path, pos, err)
		}
		c := crc32.Update(0, castagnoli, hdr[4:])
		c = crc32.Update(c, castagnoli, payload)
		if c != binary.LittleEndian.Uint32(hdr[0:4]) {
			return fmt.Errorf("%w: %s: frame at byte %d (offset %d): crc32c mismatch", errAudit, path, pos, off)
		}
		total.Write(hdr[:])
		total.Write(payload)
		pos += frameHeaderSize + n
		next++
	}
	if next != seg.EndOffset() {
		return fmt.Errorf("%w: %s: %d records, sealed length %d", errAudit, path, next-seg.StartOffset, seg.Length)
	}
	var foot [footerSize]byte
	if _, err := io.ReadFull(r, foot[:]); err != nil {
		return fmt.Errorf("%w: %s: footer at byte %d: %v", errAudit, path, pos, err)
	}
	if string(foot[:8]) != footerMagic {
		return fmt.Errorf("%w: %s: no seal footer magic at byte %d", errAudit, path, pos)
	}
	if crc32.Checksum(foot[:36], castagnoli) != binary.LittleEndian.Uint32(foot[36:40]) {
		return fmt.Errorf("%w: %s: footer at byte %d: crc32c mismatch", errAudit, path, pos)
	}
	start := binary.LittleEndian.Uint64(foot[8:16])
	length := binary.LittleEndian.Uint64(foot[16:24])
	size := int64(binary.LittleEndian.Uint64(foot[24:32]))
	if start != seg.StartOffset || length != seg.Length || size != seg.ByteSize {
		return fmt.Errorf("%w: %s: footer says start %d length %d byte_size %d, metadata %d %d %d",
			errAudit, path, start, length, size, seg.StartOffset, seg.Length, seg.ByteSize)
	}
	framesCRC := binary.LittleEndian.Uint32(foot[32:36])
	if framesCRC != total.Sum32() {
		return fmt.Errorf("%w: %s: footer frames crc32c %08x, frames hash to %08x", errAudit, path, framesCRC, total.Sum32())
	}
	if seg.Checksum != meta.CRC32C(framesCRC) {
		return fmt.Errorf("%w: %s: frames crc32c %08x, metadata checksum %s", errAudit, path, framesCRC, seg.Checksum)
	}
	return nil
}

// fileKey identifies one version of a file, so that an audit is repeated
// only when the file changed.
type fileKey struct {
	ino, dev uint64
	size     int64
	mtime    time.Time
}

func statKey(path string) (fileKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileKey{}, err
	}
	k := fileKey{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.ino, k.dev = uint64(st.Ino), uint64(st.Dev)
	}
	return k, nil
}

// auditor caches audit results by file version: a poll re-reads only the
// copies whose file changed since it was last read.
type auditor struct {
	cache map[string]auditEntry
	// BytesRead counts the bytes read by audits, for the report.
	BytesRead int64
}

type auditEntry struct {
	key     fileKey
	version uint64 // segment version audited against
	err     error
}

func newAuditor() *auditor { return &auditor{cache: map[string]auditEntry{}} }

// Check audits the copy of seg at path unless the same file version was
// already audited against the same segment version.
func (a *auditor) Check(path string, seg meta.Segment) error {
	k, err := statKey(path)
	if err != nil {
		delete(a.cache, path)
		return err
	}
	if e, ok := a.cache[path]; ok && e.key == k && e.version == seg.Version {
		return e.err
	}
	err = auditCopyFile(path, seg)
	a.BytesRead += k.size
	a.cache[path] = auditEntry{key: k, version: seg.Version, err: err}
	return err
}

// Forget drops the cached result for path, after the demo changed the file
// itself in a way its mtime might not show.
func (a *auditor) Forget(path string) { delete(a.cache, path) }
