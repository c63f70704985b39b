package store

import (
	"errors"
	"fmt"
	"os"

	"github.com/malachi-log/malachi/meta"
)

// SettleResult reports what Settle did.
type SettleResult struct {
	// FooterWritten: the copy was not sealed (or its footer was damaged)
	// and Settle wrote the footer.
	FooterWritten bool
	// SyncedAndRolled: the copy was the active segment; its data was synced
	// and it stopped taking appends.
	SyncedAndRolled bool
	// BytesCut is how many bytes past byte_size+FooterSize were cut.
	BytesCut int64
	// End is the copy's durable end after Settle.
	End End
}

// checkSegment validates the segment a caller passes for the copy of id.
func checkSegment(op string, id meta.SegmentID, seg meta.Segment) error {
	switch {
	case seg.ID != id:
		return fmt.Errorf("%w: %s %s: segment metadata is for %q", ErrInvalid, op, id, seg.ID)
	case !seg.Sealed:
		return fmt.Errorf("%w: %s %s: segment is not sealed", ErrInvalid, op, id)
	case !seg.Checksum.IsSet():
		return fmt.Errorf("%w: %s %s: sealed segment without a checksum", ErrInvalid, op, id)
	case seg.ByteSize < 0:
		return fmt.Errorf("%w: %s %s: byte_size %d is negative", ErrInvalid, op, id, seg.ByteSize)
	case seg.StartOffset+seg.Length < seg.StartOffset:
		return fmt.Errorf("%w: %s %s: start_offset %d + length %d overflows", ErrInvalid, op, id, seg.StartOffset, seg.Length)
	}
	return nil
}

// agree checks that a scan bounded by seg.ByteSize found exactly the
// segment's frames: their number, offsets and checksum. It returns a
// *ShortError when the frames end early and a *CorruptError when they
// disagree with the segment.
func agree(r scanResult, seg meta.Segment) error {
	if r.Bytes < seg.ByteSize {
		return &ShortError{End: r.End, Want: seg.ByteSize}
	}
	if r.Frames != seg.Length {
		return corruptf(r.Bytes, "%d frames end at byte_size %d, segment has %d records", r.Frames, seg.ByteSize, seg.Length)
	}
	if want, _ := seg.Checksum.Value(); r.crc != want {
		return corruptf(0, "frames checksum %v, segment records %v", meta.CRC32C(r.crc), seg.Checksum)
	}
	return nil
}

// Settle brings the copy of id to the sealed segment seg: if the copy is
// the active segment it syncs its data and rolls it (no more appends); it
// writes the seal footer if the copy is not sealed; it cuts the file to
// seg.ByteSize+FooterSize; it fences the copy; and it syncs the directory
// (through Options.DirSyncer). Settling a settled copy costs one directory
// sync.
//
// A copy that carries its own valid seal footer (agreeing with its frames
// and their checksum) which disagrees with seg (start offset, length,
// byte_size or checksum) is refused with a *SealConflictError
// (ErrSealConflict): its file is left byte for byte as it is, nothing is
// cut, no footer is written, the copy is not latched (invariant 8).
// Otherwise seg wins: a copy whose valid frames end before seg.ByteSize is
// short: Settle returns an error wrapping ErrShort (errors.As *ShortError
// gives its durable end) and changes nothing beyond the roll. A copy whose
// frames disagree with seg (count, offsets, checksum) returns ErrCorrupt.
// I/O errors latch the copy (ErrLatched).
func (db *DB) Settle(id meta.SegmentID, seg meta.Segment) (SettleResult, error) {
	var res SettleResult
	if err := checkSegment("settle", id, seg); err != nil {
		return res, err
	}
	c, err := db.acquire("settle", id)
	if err != nil {
		return res, err
	}
	defer c.mu.Unlock()
	if err := db.settle(c, seg, &res); err != nil {
		return res, err
	}
	if err := db.syncDir(c, "settle"); err != nil {
		return res, err
	}
	return res, nil
}

// settle does Settle's work on the locked copy c but the directory sync.
func (db *DB) settle(c *copyState, seg meta.Segment, res *SettleResult) error {
	if !c.active && c.synced && db.unchangedSince(c, seg) {
		res.End = footerEnd(c.settled.footer)
		return nil
	}
	if c.active {
		if err := c.f.Datasync(); err != nil {
			return db.fail(c, "settle: sync", err)
		}
		err := c.f.Close()
		c.f, c.active = nil, false
		if err != nil {
			return db.fail(c, "settle: close", err)
		}
		res.SyncedAndRolled = true
	}
	f, err := db.openFile(c, "settle", os.O_RDWR)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := db.scanFile(c, "settle", f, scanOpts{limit: seg.ByteSize, start: seg.StartOffset, startKnown: true, whole: true})
	if err != nil {
		return err
	}
	if !r.Footer || !footerAgrees(r.footer, seg) || r.crc != r.footer.FramesCRC {
		// Not already settled to seg: the copy's own seal, if it has
		// one, must agree with seg before anything is cut (invariant 8).
		if err := db.checkSeal(c, "settle", f, seg); err != nil {
			return err
		}
	}
	if err := agree(r, seg); err != nil {
		c.adopt(r)
		c.sealed = false
		return fmt.Errorf("settle %s: %w", c.id, err)
	}
	want := seg.ByteSize + FooterSize
	if !r.Footer || r.footer.FramesCRC != r.crc {
		ft := Footer{StartOffset: seg.StartOffset, Length: seg.Length, ByteSize: seg.ByteSize, FramesCRC: r.crc}
		if r.FileSize > want {
			res.BytesCut = r.FileSize - want
		}
		if err := db.writeFooter(c, "settle", f, ft); err != nil {
			return err
		}
		res.FooterWritten = true
		r.Footer, r.footer = true, ft
	} else if r.FileSize != want {
		res.BytesCut = r.FileSize - want
		if err := f.Truncate(want); err != nil {
			return db.fail(c, "settle: truncate", err)
		}
		if err := f.Sync(); err != nil {
			return db.fail(c, "settle: sync", err)
		}
	} else if !c.synced {
		// Already settled, as far as the page cache says: make it so on
		// the disk before saying so (invariant 10). The caller syncs the
		// directory.
		if err := db.rewriteFooter(c, "settle", f, r.footer); err != nil {
			return err
		}
	}
	c.synced = true
	r.FileSize, r.Cause = want, nil
	c.adopt(r)
	res.End = r.End
	db.mark(c, r.footer)
	return nil
}

// checkSeal reads the whole copy in f, unbounded by seg, and returns a
// *SealConflictError when the copy carries its own valid seal (a footer
// that ends its frames, agrees with them and records their checksum) that
// disagrees with seg; nil when it carries none or an agreeing one. It
// changes nothing but latches c on an I/O error. Caller holds c.mu.
func (db *DB) checkSeal(c *copyState, op string, f File, seg meta.Segment) error {
	r, err := db.scanFile(c, op, f, scanOpts{limit: -1, whole: true})
	if err != nil {
		return err
	}
	if !r.Footer || r.footer.FramesCRC != r.crc || footerAgrees(r.footer, seg) {
		return nil
	}
	err = &SealConflictError{Op: op, Segment: c.id, Footer: r.footer, Meta: seg}
	db.log.Error().Str("segment", string(c.id)).Err(err).Msg("store: request refused: the segment metadata disagrees with the copy's own seal")
	return err
}

// Verify reads the whole copy of id and checks it against the sealed
// segment seg: every frame's CRC, contiguous offsets from seg.StartOffset,
// seg.Length frames ending exactly at seg.ByteSize, the seal footer there
// and the frames' checksum against seg.Checksum. Bytes after a valid footer
// are settle's business (see End.Cause) and not an error here.
//
// Errors: *CorruptError (ErrCorrupt) with the byte where the damage is;
// *ShortError (ErrShort) when the frames end early; ErrNotSealed when no
// footer follows the frames; ErrLatched on an I/O error.
func (db *DB) Verify(id meta.SegmentID, seg meta.Segment) error {
	if err := checkSegment("verify", id, seg); err != nil {
		return err
	}
	c, err := db.acquire("verify", id)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	return db.view(c, "verify", func(f File) error {
		r, err := db.scanFile(c, "verify", f, scanOpts{limit: seg.ByteSize, start: seg.StartOffset, startKnown: true, whole: true})
		if err != nil {
			return err
		}
		return verified(id, r, seg)
	})
}

// verified checks a bounded, whole scan against seg.
func verified(id meta.SegmentID, r scanResult, seg meta.Segment) error {
	if r.Bytes < seg.ByteSize {
		var ce *CorruptError
		if errors.As(r.Cause, &ce) && errors.Is(ce, ErrCorrupt) {
			return fmt.Errorf("verify %s: %w", id, ce)
		}
		return fmt.Errorf("verify %s: %w", id, &ShortError{End: r.End, Want: seg.ByteSize})
	}
	if err := agree(r, seg); err != nil {
		return fmt.Errorf("verify %s: %w", id, err)
	}
	if !r.Footer {
		var ce *CorruptError
		if r.magic && errors.As(r.Cause, &ce) {
			return fmt.Errorf("verify %s: %w", id, &CorruptError{Offset: ce.Offset, Reason: ce.Reason, Err: ErrCorrupt})
		}
		return fmt.Errorf("%w: verify %s: no seal footer at byte_size %d (file size %d)", ErrNotSealed, id, seg.ByteSize, r.FileSize)
	}
	if r.footer.FramesCRC != r.crc {
		return fmt.Errorf("verify %s: %w", id, corruptf(seg.ByteSize, "seal footer records checksum %v, frames have %v", meta.CRC32C(r.footer.FramesCRC), meta.CRC32C(r.crc)))
	}
	return nil
}
