package store

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/malachi-log/malachi/meta"
)

// OpenSource opens the sealed copy of id read-only, for a catch-up source to
// send [0, seg.ByteSize+FooterSize) from. It checks the file's size and the
// footer against seg without reading the frames (the scrubber's Verify does
// that). The caller closes the file.
//
// Errors: ErrUnknownCopy (no copy, or its file is gone), ErrNotSealed (no
// valid footer at seg.ByteSize), ErrLatched, ErrShort (the file is smaller
// than seg.ByteSize+FooterSize), ErrCorrupt (the footer disagrees with seg),
// ErrBusy. OpenSource never changes the copy, so a copy whose own seal
// disagrees with seg is refused with one of these (a source refusal), not
// with ErrSealConflict.
func (db *DB) OpenSource(id meta.SegmentID, seg meta.Segment) (File, error) {
	if err := checkSegment("open source", id, seg); err != nil {
		return nil, err
	}
	c, err := db.acquire("open source", id)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if c.active {
		return nil, fmt.Errorf("%w: open source %s: the copy is active", ErrNotSealed, id)
	}
	f, err := db.openFile(c, "open source", os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	if err := db.checkSource(c, f, seg); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (db *DB) checkSource(c *copyState, f File, seg meta.Segment) error {
	fi, err := f.Stat()
	if err != nil {
		return db.fail(c, "open source: stat", err)
	}
	want := seg.ByteSize + FooterSize
	if fi.Size() < want {
		// Rare: find where the copy really ends, for the report.
		r, err := db.scanFile(c, "open source", f, scanOpts{limit: seg.ByteSize, start: seg.StartOffset, startKnown: true})
		if err != nil {
			return err
		}
		if r.Bytes == seg.ByteSize && r.FileSize == seg.ByteSize {
			return fmt.Errorf("%w: open source %s: frames end at byte_size %d with no seal footer", ErrNotSealed, c.id, seg.ByteSize)
		}
		return fmt.Errorf("open source %s: %w", c.id, &ShortError{End: r.End, Want: seg.ByteSize})
	}
	var b [FooterSize]byte
	if _, err := f.ReadAt(b[:], seg.ByteSize); err != nil {
		return db.fail(c, "open source: read footer", err)
	}
	if !hasFooterMagic(b[:]) {
		return fmt.Errorf("%w: open source %s: no seal footer at byte_size %d", ErrNotSealed, c.id, seg.ByteSize)
	}
	ft, ok := DecodeFooter(b[:])
	if !ok {
		return fmt.Errorf("open source %s: %w", c.id, corruptf(seg.ByteSize, "seal footer CRC mismatch"))
	}
	want32, _ := seg.Checksum.Value()
	if ft.ByteSize != seg.ByteSize || ft.StartOffset != seg.StartOffset || ft.Length != seg.Length || ft.FramesCRC != want32 {
		return fmt.Errorf("open source %s: %w", c.id, corruptf(seg.ByteSize,
			"seal footer (start %d, length %d, byte_size %d, %v) disagrees with the segment (start %d, length %d, byte_size %d, %v)",
			ft.StartOffset, ft.Length, ft.ByteSize, meta.CRC32C(ft.FramesCRC), seg.StartOffset, seg.Length, seg.ByteSize, seg.Checksum))
	}
	return nil
}

// Target is a copy being written by a catch-up transfer. It holds the copy
// exclusively: every other request on it returns ErrBusy until Commit or
// Abort. A Target is used by one goroutine.
type Target struct {
	db     *DB
	c      *copyState
	f      File // the raw file, for the store's own use under c.mu
	tf     *targetFile
	seg    meta.Segment
	resume int64

	once sync.Once
	done bool
}

// OpenTarget prepares the copy of id to receive the sealed segment seg: it
// creates the copy if missing, finds its durable end (bounded by
// seg.ByteSize), cuts the file there and holds the copy until Commit or
// Abort. A copy already complete (valid footer agreeing with seg) resumes at
// seg.ByteSize+FooterSize: there is nothing to transfer, and Commit verifies
// it.
//
// A copy that carries its own valid seal footer (agreeing with its frames
// and their checksum) which disagrees with seg is refused with a
// *SealConflictError (ErrSealConflict): nothing is cut, the file is left
// byte for byte as it is and the copy is not held (invariant 8).
//
// A copy still open for appends (active: a replica that missed its seal)
// is closed for them and resumed like any other: seg says the segment is
// sealed, so no write of the write path is to come.
//
// Errors: ErrSealConflict, ErrBusy (already held), ErrLatched, ErrInvalid,
// ErrClosed.
func (db *DB) OpenTarget(id meta.SegmentID, seg meta.Segment) (*Target, error) {
	if err := checkSegment("open target", id, seg); err != nil {
		return nil, err
	}
	if db.closed.Load() {
		return nil, fmt.Errorf("%w: open target %s", ErrClosed, id)
	}
	created := false
	db.mu.Lock()
	c := db.m[id]
	if c == nil {
		c = &copyState{id: id, path: db.Path(id)}
		db.m[id] = c
		db.copiesVersion.Add(1)
		created = true
	}
	db.mu.Unlock()
	c.mu.Lock()
	if err := db.usable("open target", c); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if c.active {
		// The write path's copy of a segment the metadata seals (seg): a
		// replica its seal passed by (it did not answer). No leader
		// appends to it again; the target takes it from its durable end,
		// and Commit's fsync covers the frames it keeps.
		err := c.f.Close()
		c.f, c.active = nil, false
		if err != nil {
			c.mu.Unlock()
			return nil, db.fail(c, "open target: close the active copy", err)
		}
	}
	t, err := db.openTarget(c, seg, created)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.held = true
	c.mu.Unlock()
	return t, nil
}

func (db *DB) openTarget(c *copyState, seg meta.Segment, created bool) (*Target, error) {
	flag := os.O_RDWR
	if created {
		flag |= os.O_CREATE
	}
	c.settled, c.synced = settledMark{}, false
	f, err := db.fs.OpenFile(c.path, flag, 0o644)
	if errors.Is(err, os.ErrNotExist) {
		// The file is gone: receive it anew.
		created = true
		f, err = db.fs.OpenFile(c.path, flag|os.O_CREATE, 0o644)
	}
	if err != nil {
		if created {
			db.forget(c)
			return nil, fmt.Errorf("store: open target %s: create: %w", c.id, err)
		}
		return nil, db.fail(c, "open target", err)
	}
	r, err := db.scanFile(c, "open target", f, scanOpts{limit: seg.ByteSize, start: seg.StartOffset, startKnown: true})
	if err != nil {
		f.Close()
		return nil, err
	}
	resume := r.Bytes
	want32, _ := seg.Checksum.Value()
	if r.Bytes == seg.ByteSize && r.Footer && r.footer.FramesCRC == want32 && r.Frames == seg.Length {
		resume = seg.ByteSize + FooterSize
	} else {
		r.Footer = false
	}
	if r.FileSize > resume {
		// About to cut: the copy's own seal, if it has one, must agree
		// with seg (invariant 8).
		if err := db.checkSeal(c, "open target", f, seg); err != nil {
			f.Close()
			return nil, err
		}
	}
	if r.FileSize != resume {
		if err := f.Truncate(resume); err != nil {
			f.Close()
			return nil, db.fail(c, "open target: truncate to durable end", err)
		}
	}
	if created {
		if err := db.syncDir(c, "open target"); err != nil {
			f.Close()
			return nil, err
		}
	}
	c.adopt(r)
	t := &Target{db: db, c: c, f: f, seg: seg, resume: resume}
	t.tf = &targetFile{File: f, t: t}
	return t, nil
}

// Resume is the number of bytes already good: the transfer sends
// [Resume, seg.ByteSize+FooterSize).
func (t *Target) Resume() int64 { return t.resume }

// File is the copy's file, to write at Resume and beyond (positioned
// writes, or splice through Fd). An error from its WriteAt, Sync or
// Truncate latches the copy; report errors of splice through Abort.
func (t *Target) File() File { return t.tf }

// Commit verifies the whole copy against the segment (frames, offsets,
// footer, checksum, exact size), fsyncs the file and the directory, and
// fences the copy: it is then a sealed copy like any other. On failure it
// cuts the copy at its last valid frame (at 0 if the frames disagree with
// the checksum), releases it and returns the *ShortError or *CorruptError.
// Either way the Target is finished.
func (t *Target) Commit() error { return t.finish("commit", t.commit) }

// commit is Commit's work. Caller holds c.mu.
func (t *Target) commit() error {
	c, db := t.c, t.db
	if c.latch != nil {
		return fmt.Errorf("commit %s: %w", c.id, c.latch)
	}
	r, err := db.scanFile(c, "commit", t.f, scanOpts{limit: t.seg.ByteSize, start: t.seg.StartOffset, startKnown: true, whole: true})
	if err != nil {
		return err
	}
	if verr := verified(c.id, r, t.seg); verr != nil {
		cut := r.Bytes
		var ce *CorruptError
		if errors.As(verr, &ce) && r.Bytes == t.seg.ByteSize && r.Frames == t.seg.Length {
			if want, _ := t.seg.Checksum.Value(); r.crc != want {
				cut = 0 // the frames diverge somewhere: nothing is known good
			}
		}
		if err := t.cut(cut, r); err != nil {
			return err
		}
		return fmt.Errorf("commit: %w", verr)
	}
	want := t.seg.ByteSize + FooterSize
	if r.FileSize != want {
		if err := t.f.Truncate(want); err != nil {
			return db.fail(c, "commit: truncate", err)
		}
	}
	if err := t.f.Sync(); err != nil {
		return db.fail(c, "commit: sync", err)
	}
	r.FileSize, r.Cause = want, nil
	c.adopt(r)
	if err := db.syncDir(c, "commit"); err != nil {
		return err
	}
	c.synced = true
	if r.Footer {
		db.mark(c, r.footer)
	}
	return nil
}

// cut truncates the target's file at byte n and syncs it. Caller holds c.mu.
func (t *Target) cut(n int64, r scanResult) error {
	c, db := t.c, t.db
	if err := t.f.Truncate(n); err != nil {
		return db.fail(c, "truncate to durable end", err)
	}
	if err := t.f.Sync(); err != nil {
		return db.fail(c, "sync", err)
	}
	if n < r.Bytes {
		c.loaded = false
	} else {
		c.adopt(r)
		c.sealed = false
	}
	return nil
}

// Abort cuts the copy at its durable end, syncs it and releases it.
func (t *Target) Abort() error { return t.finish("abort", t.abort) }

// Fail finishes the Target after an I/O error of a write made to File
// through its descriptor (splice), which File's own methods could not
// see: like Abort it cuts the copy at its durable end when the disk still
// allows it, and it latches the copy with cause either way (invariant 4:
// an ENOSPC or EROFS of a transfer latches the copy as a failed WriteAt
// does). It returns the latch error, joined with the cut's error.
func (t *Target) Fail(op string, cause error) error {
	return t.finish("fail", func() error {
		var aerr error
		if t.c.latch == nil {
			aerr = t.abort()
		}
		return errors.Join(t.db.fail(t.c, "catch-up "+op, cause), aerr)
	})
}

// finish runs body, the work of Commit, Abort or Fail (op), with the copy
// locked, then releases the Target: it finishes once, and a later call
// fails with ErrClosed without running body.
func (t *Target) finish(op string, body func() error) error {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.done {
		return fmt.Errorf("%w: %s %s: target already finished", ErrClosed, op, c.id)
	}
	t.done = true
	defer t.release()
	return body()
}

// abort is Abort's cut. Caller holds c.mu.
func (t *Target) abort() error {
	c, db := t.c, t.db
	if c.latch != nil {
		return fmt.Errorf("abort %s: %w", c.id, c.latch)
	}
	r, err := db.scanFile(c, "abort", t.f, scanOpts{limit: t.seg.ByteSize, start: t.seg.StartOffset, startKnown: true})
	if err != nil {
		return err
	}
	n := r.Bytes
	want32, _ := t.seg.Checksum.Value()
	if r.Footer && r.Bytes == t.seg.ByteSize && r.footer.FramesCRC == want32 {
		n = t.seg.ByteSize + FooterSize
	} else {
		r.Footer = false
	}
	if r.FileSize == n {
		c.adopt(r)
		return nil
	}
	return t.cut(n, r)
}

// release closes the file and lets the copy serve again. Caller holds c.mu.
func (t *Target) release() {
	t.once.Do(func() {
		_ = t.f.Close()
		t.c.held = false
	})
}

// targetFile latches the copy on an I/O error of the transfer's writes.
type targetFile struct {
	File
	t *Target
}

func (f *targetFile) latch(op string, err error) {
	if err == nil {
		return
	}
	c := f.t.c
	c.mu.Lock()
	if !f.t.done {
		f.t.db.fail(c, "catch-up "+op, err)
	}
	c.mu.Unlock()
}

func (f *targetFile) WriteAt(b []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(b, off)
	f.latch("write", err)
	return n, err
}

func (f *targetFile) Sync() error {
	err := f.File.Sync()
	f.latch("sync", err)
	return err
}

func (f *targetFile) Datasync() error {
	err := f.File.Datasync()
	f.latch("sync", err)
	return err
}

func (f *targetFile) Truncate(n int64) error {
	err := f.File.Truncate(n)
	f.latch("truncate", err)
	return err
}

// Close is a no-op: the Target closes the file on Commit or Abort.
func (f *targetFile) Close() error { return nil }
