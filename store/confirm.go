package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"

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

func confirmSpan(id meta.SegmentID) (lo, hi []byte) {
	lo = append(append([]byte{confirmPrefix}, id...), 0)
	hi = append(append([]byte{confirmPrefix}, id...), 1)
	return lo, hi
}

// Confirm records, durably, that the copy of id with file identity fi is
// confirmed. It replaces any earlier confirmation of id.
func (db *DB) Confirm(id meta.SegmentID, fi FileIdentity) error {
	c, err := db.acquire("confirm", id)
	if err != nil {
		return err
	}
	defer c.mu.Unlock()
	if fi.Size < 0 {
		return fmt.Errorf("%w: confirm %s: negative size %d", ErrInvalid, id, fi.Size)
	}
	conf, err := db.confirmDB("confirm", id, true)
	if err != nil {
		return err
	}
	b := conf.NewBatch()
	defer b.Close()
	lo, hi := confirmSpan(id)
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return fmt.Errorf("store: confirm %s: %w", id, err)
	}
	if err := b.Set(confirmKey(id, fi), nil, nil); err != nil {
		return fmt.Errorf("store: confirm %s: %w", id, err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: confirm %s: %w", id, err)
	}
	return nil
}

// Confirmed reports whether the copy of id was confirmed with exactly the
// file identity fi (so a replaced file is not confirmed).
func (db *DB) Confirmed(id meta.SegmentID, fi FileIdentity) (bool, error) {
	c, err := db.acquire("confirmed", id)
	if err != nil {
		return false, err
	}
	defer c.mu.Unlock()
	conf, err := db.confirmDB("confirmed", id, false)
	if err != nil {
		return false, err
	}
	_, closer, err := conf.Get(confirmKey(id, fi))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: confirmed %s: %w", id, err)
	}
	closer.Close()
	return true, nil
}

func (db *DB) unconfirm(id meta.SegmentID) error {
	conf, err := db.confirmDB("delete", id, true)
	if err != nil {
		return err
	}
	lo, hi := confirmSpan(id)
	return conf.DeleteRange(lo, hi, pebble.Sync)
}

func openConfirm(dir string, log zerolog.Logger, failed *atomic.Pointer[failure]) (*pebble.DB, error) {
	return pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{l: log, failed: failed}})
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
		if free, ok := freeBytes(db.dir); ok && free < db.minFree {
			return nil, fmt.Errorf("%w: %s %s: %d bytes free under %s, fewer than Options.ConfirmMinFree %d",
				ErrConfirmState, op, id, free, db.dir, db.minFree)
		}
	}
	if db.conf == nil {
		conf, err := openConfirm(filepath.Join(db.dir, "confirm"), db.log, &db.confFailed)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: open: %w", ErrConfirmState, op, id, err)
		}
		db.conf = conf
	}
	return db.conf, nil
}

// pebbleLogger routes Pebble's messages to zerolog, so Pebble never writes to
// stderr on its own.
type pebbleLogger struct {
	l      zerolog.Logger
	failed *atomic.Pointer[failure]
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info().Str("component", "pebble").Msgf(format, args...)
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error().Str("component", "pebble").Msgf(format, args...)
}

// Fatalf is how Pebble reports an error it cannot unwind (a failed MANIFEST
// or WAL write). Pebble requires that Fatalf not return: when it does,
// Pebble retries the failed flush in a tight loop. So the adapter logs at
// fatal level, marks the confirmation DB failed and panics, as Pebble's own
// logger would exit. The store makes this unlikely on a full disk: it opens
// Pebble only when confirmations are first used and refuses to write to it
// with less than Options.ConfirmMinFree bytes free (ErrConfirmState).
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.WithLevel(zerolog.FatalLevel).Str("component", "pebble").Msg(msg)
	if p.failed != nil {
		p.failed.CompareAndSwap(nil, &failure{msg: msg})
	}
	panic("pebble: " + msg)
}

type failure struct{ msg string }
