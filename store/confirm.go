package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/internal/pebblelog"
	"github.com/malachi-log/malachi/meta"
)

// FileIdentity identifies the file of a copy: a replaced file or a swapped
// disk has another device or inode, a changed file another size.
type FileIdentity struct {
	Dev, Ino uint64
	Size     int64
}

// Identity stats the copy's file (without opening it).
func (db *DB) Identity(id meta.SegmentID) (FileIdentity, error) {
	c, err := db.acquire("identity", id)
	if err != nil {
		return FileIdentity{}, err
	}
	defer c.mu.Unlock()
	fi, err := db.fs.Stat(c.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			db.forget(c)
			return FileIdentity{}, fmt.Errorf("%w: identity %s: file gone: %w", ErrUnknownCopy, id, err)
		}
		return FileIdentity{}, db.fail(c, "identity: stat", err)
	}
	dev, ino, ok := fileIDs(fi)
	if !ok {
		return FileIdentity{}, fmt.Errorf("store: identity %s: the file system reports no device and inode", id)
	}
	return FileIdentity{Dev: dev, Ino: ino, Size: fi.Size()}, nil
}

// Confirmation keys: "c" | segment id | 0x00 | dev | ino | size (big-endian),
// with an empty value. A segment id holds no 0x00 (meta invariant 2).
const confirmPrefix = 'c'

func confirmKey(id meta.SegmentID, fi FileIdentity) []byte {
	k := make([]byte, 0, 2+len(id)+24)
	k = append(k, confirmPrefix)
	k = append(k, id...)
	k = append(k, 0)
	k = binary.BigEndian.AppendUint64(k, fi.Dev)
	k = binary.BigEndian.AppendUint64(k, fi.Ino)
	k = binary.BigEndian.AppendUint64(k, uint64(fi.Size))
	return k
}

// Confirm records, durably, that the copy of id with file identity fi is
// confirmed. It replaces any earlier confirmation of id (a point delete of
// its key: Confirm writes no range tombstone).
func (db *DB) Confirm(id meta.SegmentID, fi FileIdentity) error {
	c, err := db.acquire("confirm", id)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	if fi.Size < 0 {
		return fmt.Errorf("%w: confirm %s: negative size %d", ErrInvalid, id, fi.Size)
	}
	serr := []error{nil}
	if db.syncCopies("confirm", []*copyState{c}, serr); serr[0] != nil {
		return serr[0]
	}
	conf, err := db.confirmDB("confirm", id, true)
	if err != nil {
		return err
	}
	old, had := db.confirmedOf(id)
	if had && old == fi {
		return nil
	}
	b := conf.NewBatch()
	defer b.Close()
	if had {
		if err := b.Delete(confirmKey(id, old), nil); err != nil {
			return fmt.Errorf("store: confirm %s: %w", id, err)
		}
	}
	if err := b.Set(confirmKey(id, fi), nil, nil); err != nil {
		return fmt.Errorf("store: confirm %s: %w", id, err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: confirm %s: %w", id, err)
	}
	db.setConfirmed(id, fi, true)
	return nil
}

// Confirmed reports whether the copy of id was confirmed with exactly the
// file identity fi (so a replaced file is not confirmed). It answers from
// memory.
func (db *DB) Confirmed(id meta.SegmentID, fi FileIdentity) (bool, error) {
	c, err := db.acquire("confirmed", id)
	if err != nil {
		return false, err
	}
	defer c.mu.Unlock()
	if _, err := db.confirmDB("confirmed", id, false); err != nil {
		return false, err
	}
	got, ok := db.confirmedOf(id)
	return ok && got == fi, nil
}

// unconfirm forgets the confirmation of id, durably. A copy without one
// needs no write, so no free space (once the DB is open).
func (db *DB) unconfirm(id meta.SegmentID) error {
	if _, err := db.confirmDB("delete", id, false); err != nil {
		return err
	}
	old, had := db.confirmedOf(id)
	if !had {
		return nil
	}
	conf, err := db.confirmDB("delete", id, true)
	if err != nil {
		return err
	}
	if err := conf.Delete(confirmKey(id, old), pebble.Sync); err != nil {
		return err
	}
	db.setConfirmed(id, FileIdentity{}, false)
	return nil
}

func (db *DB) confirmedOf(id meta.SegmentID) (FileIdentity, bool) {
	db.confMu.RLock()
	defer db.confMu.RUnlock()
	fi, ok := db.confirmed[id]
	return fi, ok
}

func (db *DB) setConfirmed(id meta.SegmentID, fi FileIdentity, ok bool) {
	db.confMu.Lock()
	defer db.confMu.Unlock()
	if db.confirmed == nil {
		return // closed meanwhile
	}
	if ok {
		db.confirmed[id] = fi
	} else {
		delete(db.confirmed, id)
	}
	db.confVersion.Add(1)
}

// loadConfirmed reads every confirmation of conf. A segment with more than
// one (left by a crash of an older build between its range delete and its
// set, or by a hand edit) keeps the last in key order, and the others are
// deleted, durably, so that one key per segment holds again.
func loadConfirmed(conf *pebble.DB) (map[meta.SegmentID]FileIdentity, error) {
	it, err := conf.NewIter(&pebble.IterOptions{LowerBound: []byte{confirmPrefix}, UpperBound: []byte{confirmPrefix + 1}})
	if err != nil {
		return nil, err
	}
	out := map[meta.SegmentID]FileIdentity{}
	var extra [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		id, fi, valid := parseConfirmKey(k)
		if !valid {
			it.Close()
			return nil, fmt.Errorf("confirmation key %q is malformed", k)
		}
		if old, dup := out[id]; dup {
			extra = append(extra, confirmKey(id, old))
		}
		out[id] = fi
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	if len(extra) > 0 {
		b := conf.NewBatch()
		defer b.Close()
		for _, k := range extra {
			if err := b.Delete(k, nil); err != nil {
				return nil, err
			}
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseConfirmKey is confirmKey's inverse.
func parseConfirmKey(k []byte) (meta.SegmentID, FileIdentity, bool) {
	if len(k) < 1+1+1+24 || k[0] != confirmPrefix {
		return "", FileIdentity{}, false
	}
	sep := len(k) - 25
	if k[sep] != 0 || bytes.IndexByte(k[1:sep], 0) >= 0 {
		return "", FileIdentity{}, false
	}
	rest := k[sep+1:]
	fi := FileIdentity{Dev: binary.BigEndian.Uint64(rest), Ino: binary.BigEndian.Uint64(rest[8:]), Size: int64(binary.BigEndian.Uint64(rest[16:]))}
	return meta.SegmentID(k[1:sep]), fi, true
}

// openConfirm opens the confirmation DB, on fsys's PebbleFS when it has
// one. Pebble reports an error it cannot unwind (a failed MANIFEST or WAL
// write) through Fatalf, which must not return (when it does, Pebble
// retries the failed flush in a tight loop): pebblelog logs it and panics, and first marks the DB failed here, so
// every later use answers ErrConfirmState. The store makes this unlikely
// on a full disk: it opens Pebble only when confirmations are first used
// and refuses to write to it with less than Options.ConfirmMinFree bytes
// free.
func openConfirm(dir string, fsys FS, log zerolog.Logger, failed *atomic.Pointer[failure]) (*pebble.DB, error) {
	onFatal := func(msg string) { failed.CompareAndSwap(nil, &failure{msg: msg}) }
	opts := &pebble.Options{Logger: pebblelog.New(log, "confirm").OnFatal(onFatal)}
	if p, ok := fsys.(PebbleFSer); ok && p.PebbleFS() != nil {
		opts.FS = p.PebbleFS()
	}
	return pebble.Open(dir, opts)
}

// confirmDB returns the confirmation DB, opening it on first use. Before a
// write (and before opening) it checks that the file system has at least
// Options.ConfirmMinFree bytes free: Pebble treats a failed write as fatal.
func (db *DB) confirmDB(op string, id meta.SegmentID, write bool) (*pebble.DB, error) {
	db.confMu.Lock()
	defer db.confMu.Unlock()
	if f := db.confFailed.Load(); f != nil {
		return nil, fmt.Errorf("%w: %s %s: %s", ErrConfirmState, op, id, f.msg)
	}
	if db.conf == nil || write {
		if free, ok := db.freeBytes(); ok && free < db.minFree {
			return nil, fmt.Errorf("%w: %s %s: %d bytes free under %s, fewer than Options.ConfirmMinFree %d",
				ErrConfirmState, op, id, free, db.dir, db.minFree)
		}
	}
	if db.conf == nil {
		conf, err := openConfirm(filepath.Join(db.dir, "confirm"), db.fs, db.host, &db.confFailed)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: open: %w", ErrConfirmState, op, id, err)
		}
		confirmed, err := loadConfirmed(conf)
		if err != nil {
			conf.Close()
			return nil, fmt.Errorf("%w: %s %s: load confirmations: %w", ErrConfirmState, op, id, err)
		}
		db.conf, db.confirmed = conf, confirmed
		db.confVersion.Add(1)
	}
	return db.conf, nil
}

type failure struct{ msg string }
