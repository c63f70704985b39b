package store

import (
	"fmt"

	"github.com/malachi-log/malachi/meta"
)

// StatDirs are the store's shard directories opened for one batch of
// stats (a probe): each a descriptor that can only name the directory
// (O_PATH), for statx relative to it. They are opened anew for every
// batch, so a batch sees the directories the store's paths name now (a
// file system mounted over copies/ while the broker runs is seen by the
// next probe), and no descriptor outlives its batch. The zero value holds
// nothing; reuse one value from batch to batch to allocate nothing.
type StatDirs struct {
	fds  [Shards]int32
	base int32 // copies/, also in fds for a missing shard
	open bool
}

// OpenStatDirs opens the shard directories into d (closing what d held).
// A shard directory that does not exist is answered by copies/ itself, in
// which no copy of this format lives: a stat of a copy of that shard then
// finds no file (missing), as it would in the empty shard. It fails, with
// d holding nothing, once Close has begun (ErrClosed) or when copies/
// cannot be opened.
func (db *DB) OpenStatDirs(d *StatDirs) error {
	d.Close()
	if db.closed.Load() {
		return fmt.Errorf("%w: open shard directories of %s", ErrClosed, db.dir)
	}
	if err := openStatDirs(db.copies, db.shards[:], d); err != nil {
		return fmt.Errorf("store: %s: %w", db.dir, err)
	}
	return nil
}

// Target says where the copy of id lives, for a stat relative to a
// descriptor of d: dirfd is the copy's shard directory and the file name
// is name+suffix (string(id), ".seg"). It neither allocates nor locks nor
// checks that the copy exists: a stat finds out. On a d that holds
// nothing it answers -1 (a stat relative to it fails with EBADF).
func (d *StatDirs) Target(id meta.SegmentID) (dirfd int, name, suffix string) {
	if !d.open {
		return -1, string(id), segSuffix
	}
	return int(d.fds[Shard(id)]), string(id), segSuffix
}

// Close closes the descriptors d holds; d then holds nothing.
func (d *StatDirs) Close() {
	if d.open {
		closeStatDirs(d)
		d.open = false
	}
}

// ProbeFacts answers, from memory, what the probe needs besides the stat:
// latched (with the latch error, which wraps ErrLatched and its cause) and
// the confirmed file identity, if any. No allocation, no I/O, no per-copy
// lock: one lookup in the confirmation mirror under its read lock, and one
// in the small set of latched copies only when there is any (a lookup in
// the map of all copies missed the cache on most copies: it cost a probe
// of 10^5 copies a third of its time).
//
// The confirmations are those loaded by the first use of the confirmation
// DB: before it (see LoadConfirmations) no copy reads as confirmed, which
// costs the probe's caller a check, never a wrong "confirmed".
//
//lint:ignore ST1008 latch is a fact about the copy the call reports, not a failure of the call
func (db *DB) ProbeFacts(id meta.SegmentID) (latch error, confirmed FileIdentity, isConfirmed bool) {
	latch = db.ProbeLatch(id)
	db.confMu.RLock()
	confirmed, isConfirmed = db.confirmed[id]
	db.confMu.RUnlock()
	return latch, confirmed, isConfirmed
}

// ProbeLatch is ProbeFacts's latch alone: nil unless the copy of id is
// latched. It costs an atomic load while no copy is latched.
func (db *DB) ProbeLatch(id meta.SegmentID) error {
	if db.nLatched.Load() == 0 {
		return nil
	}
	db.latchedMu.RLock()
	defer db.latchedMu.RUnlock()
	if le, ok := db.latched[id]; ok {
		return le
	}
	return nil
}

// ConfirmationsVersion changes whenever a confirmation is recorded,
// replaced or forgotten (and when they are loaded or the DB closes): a
// caller that remembers what ProbeFacts answered for many copies keeps it
// while the version is the same, and asks again after it changed.
func (db *DB) ConfirmationsVersion() uint64 { return db.confVersion.Load() }

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
