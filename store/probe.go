package store

import (
	"fmt"

	"github.com/malachi-log/malachi/meta"
)

// StatTarget says where the copy of id lives, for a stat relative to a
// directory descriptor the DB keeps open until Close: dirfd is the copy's
// shard directory (opened O_PATH at Open), and the file name is
// name+suffix (string(id), ".seg"). It neither allocates nor locks nor
// checks that the copy exists: a stat finds out.
//
// After Close it answers dirfd -1, so a stat made with it fails (EBADF)
// instead of reaching whatever file a reused descriptor number names. A
// descriptor obtained before Close is safe to use only while the caller
// holds HoldDirs: Close waits for every hold to be released before it
// closes the descriptors. Where O_PATH is not available (not Linux) dirfd
// is always -1: use Path.
func (db *DB) StatTarget(id meta.SegmentID) (dirfd int, name, suffix string) {
	if db.closed.Load() {
		return -1, string(id), segSuffix
	}
	return int(db.dirfds[Shard(id)].Load()), string(id), segSuffix
}

// HoldDirs keeps the shard directory descriptors of StatTarget open until
// ReleaseDirs: a prober holds them for a batch of stats. It returns
// ErrClosed (and holds nothing) once Close has begun. Holds are cheap (a
// read lock) and may be taken by many callers at once; Close waits for
// them, so a holder must not block on the DB's Close.
func (db *DB) HoldDirs() error {
	db.dirMu.RLock()
	if db.closed.Load() {
		db.dirMu.RUnlock()
		return fmt.Errorf("%w: hold shard directories of %s", ErrClosed, db.dir)
	}
	return nil
}

// ReleaseDirs releases a hold taken by a successful HoldDirs.
func (db *DB) ReleaseDirs() { db.dirMu.RUnlock() }

// ProbeFacts answers, from memory, what the probe needs besides the stat:
// latched (with the latch error, which wraps ErrLatched and its cause) and
// the confirmed file identity, if any. No allocation, no I/O, no per-copy
// lock: a read lock of the copy map, an atomic load, a read lock of the
// confirmation mirror.
//
// The confirmations are those loaded by the first use of the confirmation
// DB: before it (see LoadConfirmations) no copy reads as confirmed, which
// costs the probe's caller a check, never a wrong "confirmed".
//
//lint:ignore ST1008 latch is a fact about the copy the call reports, not a failure of the call
func (db *DB) ProbeFacts(id meta.SegmentID) (latch error, confirmed FileIdentity, isConfirmed bool) {
	db.mu.RLock()
	c := db.m[id]
	db.mu.RUnlock()
	if c != nil {
		if le := c.latched.Load(); le != nil {
			latch = le
		}
	}
	db.confMu.RLock()
	confirmed, isConfirmed = db.confirmed[id]
	db.confMu.RUnlock()
	return latch, confirmed, isConfirmed
}

// LoadConfirmations opens the confirmation DB if it is not yet open and
// loads its confirmations into memory, for ProbeFacts. Once they are
// loaded it costs a lock and a flag. Errors: ErrConfirmState, ErrClosed.
func (db *DB) LoadConfirmations() error {
	if db.closed.Load() {
		return fmt.Errorf("%w: load confirmations of %s", ErrClosed, db.dir)
	}
	db.confMu.RLock()
	open := db.conf != nil
	db.confMu.RUnlock()
	if open {
		return nil
	}
	_, err := db.confirmDB("load confirmations", "", false)
	return err
}
