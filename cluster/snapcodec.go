package cluster

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"iter"
	"strings"

	"github.com/malachi-log/malachi/meta"
)

// The compact snapshot format (version 2), what Persist writes. The JSON
// of a meta.Snapshot (version 1, snapshot.go) spends ~160 bytes on a
// segment, most of it field names; this spends ~25 at 10^7 segments (1,589
// MB of JSON become ~270 MB), and reads without a JSON scan:
//
//	magic      "malachi-snapshot\n"
//	version    uvarint, 2
//	header     uvarint length, then the JSON of a meta.Snapshot with no
//	           segments ("segments":[]): everything but the segments, in
//	           version 1's own form and read by its own decoder, so a
//	           field added to meta.Snapshot (and to decodeField) travels
//	           without a change here
//	count      uvarint, the number of segments
//	segments   count records, in id order:
//	  id         uvarint bytes shared with the previous id, uvarint length
//	             of the rest, the rest
//	  flags      one byte: 1 sealed, 2 checksum recorded, 4 replicas nil
//	  start      zigzag varint: StartOffset minus the previous segment's
//	             EndOffset (0 for segments that follow each other)
//	  length     uvarint
//	  byte_size  zigzag varint
//	  checksum   4 bytes, little endian, the CRC32C value (flag 2 only)
//	  replicas   uvarint count, then each broker id as a uvarint (unless
//	             flag 4)
//	  version    uvarint
//	crc        4 bytes, little endian: CRC32C (Castagnoli) of every byte
//	           before it
//
// Restore tells the formats apart by the first bytes: the magic, or JSON.

// compactMagic opens a compact snapshot; JSON cannot start with it.
const compactMagic = "malachi-snapshot\n"

// compactVersion is the format version after the magic.
const compactVersion = 2

// Flags of a compact segment record.
const (
	flagSealed      = 1
	flagChecksum    = 2
	flagNilReplicas = 4
)

// maxCompactList bounds an id's or a replica set's length in a compact
// record: beyond it the snapshot is corrupt, not large.
const maxCompactList = 1 << 16

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// viewHeader is everything of v's but the segments, as a meta.Snapshot.
// TestSnapshotCarriesEveryField fails when meta.Snapshot gains a field
// this does not fill.
func viewHeader(v *meta.View) meta.Snapshot {
	return meta.Snapshot{Index: v.Index(), ReplicationFactor: v.ReplicationFactor(), Brokers: v.Brokers(), Topics: v.Topics(), Groups: v.Groups()}
}

// writeCompact writes hdr (its Segments ignored) and the n segments segs
// yields, in id order, in the compact format.
func writeCompact(w io.Writer, hdr meta.Snapshot, n int, segs iter.Seq2[int, *meta.Segment]) error {
	hdr.Segments = []meta.Segment{}
	if hdr.Brokers == nil {
		hdr.Brokers = []meta.Broker{}
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("cluster: snapshot header: %w", err)
	}
	cw := &compactWriter{w: w, buf: make([]byte, 0, 1<<18)}
	cw.buf = append(cw.buf, compactMagic...)
	cw.buf = binary.AppendUvarint(cw.buf, compactVersion)
	cw.buf = binary.AppendUvarint(cw.buf, uint64(len(js)))
	cw.buf = append(cw.buf, js...)
	cw.buf = binary.AppendUvarint(cw.buf, uint64(n))
	var prev meta.Segment
	count := 0
	for _, s := range segs {
		if cw.buf, err = appendCompact(cw.buf, &prev, s); err != nil {
			return err
		}
		prev = *s
		count++
		if len(cw.buf) >= 1<<18-1024 {
			cw.flush()
		}
	}
	if count != n {
		return fmt.Errorf("cluster: snapshot: %d segments written, %d announced", count, n)
	}
	cw.flush()
	cw.buf = binary.LittleEndian.AppendUint32(cw.buf, cw.crc)
	if _, err := w.Write(cw.buf); err != nil && cw.err == nil {
		cw.err = err
	}
	if cw.err != nil {
		return fmt.Errorf("cluster: snapshot write: %w", cw.err)
	}
	return nil
}

// compactWriter buffers the encoding and keeps its CRC32C.
type compactWriter struct {
	w   io.Writer
	buf []byte
	crc uint32
	err error
}

func (cw *compactWriter) flush() {
	cw.crc = crc32.Update(cw.crc, castagnoli, cw.buf)
	if cw.err == nil {
		_, cw.err = cw.w.Write(cw.buf)
	}
	cw.buf = cw.buf[:0]
}

// appendCompact appends s's record, prev being the segment before it
// (zero for the first).
func appendCompact(b []byte, prev, s *meta.Segment) ([]byte, error) {
	if s.Checksum != meta.NoChecksum && !s.Checksum.IsSet() || uint64(s.Checksum)>>33 != 0 {
		return b, fmt.Errorf("cluster: snapshot: segment %s: checksum %#x is not a CRC32C value", s.ID, uint64(s.Checksum))
	}
	if len(s.ID) >= maxCompactList || len(s.Replicas) >= maxCompactList {
		return b, fmt.Errorf("cluster: snapshot: segment %s: id of %d bytes or %d replicas, more than %d", s.ID[:min(len(s.ID), 40)], len(s.ID), len(s.Replicas), maxCompactList)
	}
	shared := 0
	for shared < len(prev.ID) && shared < len(s.ID) && prev.ID[shared] == s.ID[shared] {
		shared++
	}
	b = binary.AppendUvarint(b, uint64(shared))
	b = binary.AppendUvarint(b, uint64(len(s.ID)-shared))
	b = append(b, s.ID[shared:]...)
	var flags byte
	if s.Sealed {
		flags |= flagSealed
	}
	if s.Checksum.IsSet() {
		flags |= flagChecksum
	}
	if s.Replicas == nil {
		flags |= flagNilReplicas
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, int64(s.StartOffset-prev.EndOffset()))
	b = binary.AppendUvarint(b, s.Length)
	b = binary.AppendVarint(b, s.ByteSize)
	if v, ok := s.Checksum.Value(); ok {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	if s.Replicas != nil {
		b = binary.AppendUvarint(b, uint64(len(s.Replicas)))
		for _, r := range s.Replicas {
			b = binary.AppendUvarint(b, uint64(r))
		}
	}
	return binary.AppendUvarint(b, s.Version), nil
}

// decodeAnySnapshot reads a snapshot in either format (the compact one,
// or the JSON of version 1), handing each segment to add as
// decodeSnapshot does, and returns the rest.
func decodeAnySnapshot(r io.Reader, add func(*meta.Segment) error) (meta.Snapshot, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	if head, _ := br.Peek(len(compactMagic)); string(head) == compactMagic {
		return decodeCompact(br, add)
	}
	return decodeSnapshot(br, add)
}

// decodeCompact reads the compact format. Each segment's ID lives in
// memory never written again (add may keep it); its Replicas are reused
// (add copies them). Errors wrap ErrBadSnapshot and, for add's, add's
// error, and say at which byte and segment.
func decodeCompact(r io.Reader, add func(*meta.Segment) error) (meta.Snapshot, error) {
	d := &compactReader{r: r, buf: make([]byte, 1<<18)}
	fail := func(what string, err error) (meta.Snapshot, error) {
		return meta.Snapshot{}, fmt.Errorf("%w: compact format: %s at byte %d: %w", ErrBadSnapshot, what, d.off+int64(d.pos), err)
	}
	if err := d.fill(len(compactMagic)); err != nil || string(d.buf[:len(compactMagic)]) != compactMagic {
		return fail("magic", cmpErr(err, errors.New("not a compact snapshot")))
	}
	d.pos = len(compactMagic)
	if v, err := d.uvarint(); err != nil || v != compactVersion {
		return fail("version", cmpErr(err, fmt.Errorf("version %d: this build reads 1 (JSON) and %d", v, compactVersion)))
	}
	raw, err := d.bytes()
	if err != nil {
		return fail("header", err)
	}
	hdr, err := decodeSnapshot(bytes.NewReader(raw), func(s *meta.Segment) error {
		return fmt.Errorf("segment %s in the header", s.ID)
	})
	if err != nil {
		return fail("header", err)
	}
	n, err := d.uvarint()
	if err != nil {
		return fail("segment count", err)
	}
	var seg meta.Segment
	for i := uint64(0); i < n; i++ {
		if err := d.segment(&seg); err != nil {
			return fail(fmt.Sprintf("segment %d of %d (near %q)", i, n, seg.ID), err)
		}
		if err := add(&seg); err != nil {
			return hdr, fmt.Errorf("%w: segment %d: %w", ErrBadSnapshot, i, err)
		}
	}
	if err := d.checkEnd(); err != nil {
		return fail("end", err)
	}
	return hdr, nil
}

// cmpErr is err, or else alt.
func cmpErr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// compactReader reads the compact format from r through its own buffer,
// keeping the CRC32C of the bytes consumed.
type compactReader struct {
	r        io.Reader
	buf      []byte
	pos, end int   // unread bytes: buf[pos:end]
	off      int64 // bytes of the stream before buf[0]
	crc      uint32
	eof      error // the read error that ended the stream (io.EOF at its end)
	ids      strings.Builder
	prevID   []byte
	prevEnd  uint64
}

// fill makes at least k bytes readable, or returns why it cannot.
func (d *compactReader) fill(k int) error {
	if d.end-d.pos >= k {
		return nil
	}
	d.crc = crc32.Update(d.crc, castagnoli, d.buf[:d.pos])
	d.off += int64(d.pos)
	d.end = copy(d.buf, d.buf[d.pos:d.end])
	d.pos = 0
	if k > len(d.buf) {
		d.buf = append(d.buf, make([]byte, k-len(d.buf))...)
	}
	for d.end < k && d.eof == nil {
		var m int
		m, d.eof = d.r.Read(d.buf[d.end:])
		d.end += m
	}
	if d.end >= k {
		return nil
	}
	if d.eof == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return d.eof
}

// uvarint reads an unsigned varint.
func (d *compactReader) uvarint() (uint64, error) {
	if d.end-d.pos < binary.MaxVarintLen64 {
		if err := d.fill(binary.MaxVarintLen64); err != nil && err != io.ErrUnexpectedEOF {
			return 0, err
		}
	}
	v, m := binary.Uvarint(d.buf[d.pos:d.end])
	if m <= 0 {
		if m == 0 {
			return 0, io.ErrUnexpectedEOF
		}
		return 0, errors.New("varint overflows 64 bits")
	}
	d.pos += m
	return v, nil
}

// varint reads a zigzag varint.
func (d *compactReader) varint() (int64, error) {
	u, err := d.uvarint()
	return int64(u>>1) ^ -int64(u&1), err
}

// bytes reads a uvarint length and that many bytes, valid until the next
// read.
func (d *compactReader) bytes() ([]byte, error) {
	n, err := d.uvarint()
	if err != nil {
		return nil, err
	}
	if n > 1<<30 {
		return nil, fmt.Errorf("length %d: more than 1 GB", n)
	}
	if err := d.fill(int(n)); err != nil {
		return nil, err
	}
	b := d.buf[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return b, nil
}

// segment reads one record into s, reusing s's replica array.
func (d *compactReader) segment(s *meta.Segment) error {
	shared, err := d.uvarint()
	if err != nil {
		return err
	}
	rest, err := d.uvarint()
	if err != nil {
		return err
	}
	if shared > uint64(len(d.prevID)) || rest >= maxCompactList || shared+rest >= maxCompactList {
		return fmt.Errorf("id of %d+%d bytes after one of %d", shared, rest, len(d.prevID))
	}
	if err := d.fill(int(rest) + 1); err != nil {
		return err
	}
	d.prevID = append(d.prevID[:shared], d.buf[d.pos:d.pos+int(rest)]...)
	d.pos += int(rest)
	s.ID = d.intern(d.prevID)
	flags := d.buf[d.pos]
	d.pos++
	if flags&^(flagSealed|flagChecksum|flagNilReplicas) != 0 {
		return fmt.Errorf("segment %s: flags %#x", s.ID, flags)
	}
	s.Sealed = flags&flagSealed != 0
	delta, err := d.varint()
	if err == nil {
		s.StartOffset = d.prevEnd + uint64(delta)
		s.Length, err = d.uvarint()
	}
	if err == nil {
		s.ByteSize, err = d.varint()
	}
	if err == nil {
		err = d.checksum(s, flags)
	}
	if err == nil {
		err = d.replicas(s, flags)
	}
	if err == nil {
		s.Version, err = d.uvarint()
	}
	if err != nil {
		return fmt.Errorf("segment %s: %w", s.ID, err)
	}
	d.prevEnd = s.EndOffset()
	return nil
}

func (d *compactReader) checksum(s *meta.Segment, flags byte) error {
	s.Checksum = meta.NoChecksum
	if flags&flagChecksum == 0 {
		return nil
	}
	if err := d.fill(4); err != nil {
		return err
	}
	s.Checksum = meta.CRC32C(binary.LittleEndian.Uint32(d.buf[d.pos:]))
	d.pos += 4
	return nil
}

func (d *compactReader) replicas(s *meta.Segment, flags byte) error {
	if flags&flagNilReplicas != 0 {
		s.Replicas = nil
		return nil
	}
	n, err := d.uvarint()
	if err != nil {
		return err
	}
	if n >= maxCompactList {
		return fmt.Errorf("%d replicas", n)
	}
	rs := s.Replicas[:0]
	if rs == nil {
		rs = make([]meta.BrokerID, 0, max(4, n)) // empty, not nil
	}
	for range n {
		r, err := d.uvarint()
		if err != nil {
			return err
		}
		if r > 1<<32-1 {
			return fmt.Errorf("broker id %d: more than 32 bits", r)
		}
		rs = append(rs, meta.BrokerID(r))
	}
	s.Replicas = rs
	return nil
}

// idBlock is the size of the blocks the decoded ids are copied into.
const idBlock = 64 << 10

// intern copies id into a block of ids that is never written again where
// a string points (what add may keep), sparing an allocation per segment.
func (d *compactReader) intern(id []byte) meta.SegmentID {
	if d.ids.Cap()-d.ids.Len() < len(id) {
		d.ids = strings.Builder{}
		d.ids.Grow(max(idBlock, len(id)))
	}
	start := d.ids.Len()
	d.ids.Write(id)
	return meta.SegmentID(d.ids.String()[start:])
}

// checkEnd reads the CRC32C trailer, checks it against the bytes before
// it, and checks that nothing follows.
func (d *compactReader) checkEnd() error {
	if err := d.fill(4); err != nil {
		return err
	}
	sum := crc32.Update(d.crc, castagnoli, d.buf[:d.pos])
	if got := binary.LittleEndian.Uint32(d.buf[d.pos:]); got != sum {
		return fmt.Errorf("crc32c %08x, computed %08x", got, sum)
	}
	d.pos += 4
	if err := d.fill(1); err == nil {
		return fmt.Errorf("%d bytes or more after the end", d.end-d.pos)
	} else if err != io.ErrUnexpectedEOF {
		return err
	}
	return nil
}
