package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/malachi-log/malachi/meta"
)

// FormatVersion is the store format this build writes and reads:
//
//	1: every copy in <dir>/copies/<id>.seg (no FORMAT file);
//	2: copies sharded, <dir>/copies/<shard>/<id>.seg, FORMAT says 2.
//
// Open migrates a format-1 store to 2 and refuses a newer one.
const FormatVersion = 2

// Shards is the number of shard directories under <dir>/copies.
const Shards = 256

const (
	formatFile   = "FORMAT"
	formatPrefix = "malachi store format "
	segSuffix    = ".seg"
)

// shardNames[i] is the name of shard directory i: two lower-case hex digits.
var shardNames = func() (n [Shards]string) {
	for i := range n {
		n[i] = fmt.Sprintf("%02x", i)
	}
	return n
}()

// Shard is the shard of a segment id: the low 8 bits of the 32-bit FNV-1a
// hash of the id's bytes (offset basis 2166136261, prime 16777619). It is
// part of the on-disk format: never change it without a new FormatVersion.
func Shard(id meta.SegmentID) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h & (Shards - 1))
}

// ShardName is the directory name of shard i (0 <= i < Shards): "00".."ff".
func ShardName(i int) string { return shardNames[i] }

// CopyPath is the path of the copy of id in a store directory dir of the
// current format, whether or not the file exists: dir/copies/<shard>/<id>.seg.
func CopyPath(dir string, id meta.SegmentID) string {
	return filepath.Join(dir, "copies", shardNames[Shard(id)], string(id)+segSuffix)
}

// readFormat returns the format version recorded in dir/FORMAT, 1 when
// there is no such file (a store of the single-directory layout, or a new
// one). A file that says nothing this build understands is an error.
func readFormat(fsys FS, dir string) (int, error) {
	path := filepath.Join(dir, formatFile)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var b [64]byte
	n, err := f.ReadAt(b[:], 0)
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return 0, err
	case n == len(b):
		return 0, fmt.Errorf("%w: %s is longer than %d bytes", ErrFormat, path, len(b)-1)
	case n == 0:
		return 0, fmt.Errorf("%w: %s is empty", ErrFormat, path)
	}
	s := strings.TrimSpace(string(b[:n]))
	v, ok := strings.CutPrefix(s, formatPrefix)
	ver, perr := strconv.Atoi(v)
	if !ok || perr != nil || ver < 1 {
		return 0, fmt.Errorf("%w: %s says %q, want %q and a version", ErrFormat, path, s, formatPrefix)
	}
	return ver, nil
}

// writeFormat records version in dir/FORMAT atomically: a temporary file
// written and fsynced, renamed over FORMAT, and dir fsynced. A crash leaves
// the old FORMAT (or none) or the new one, never a torn one.
func writeFormat(fsys FS, dir string, version int) error {
	tmp := filepath.Join(dir, formatFile+".tmp")
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt([]byte(formatPrefix+strconv.Itoa(version)+"\n"), 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := fsys.Rename(tmp, filepath.Join(dir, formatFile)); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

// prepareLayout brings dir to the current format: it refuses a newer one,
// creates missing shard directories, moves every copy still directly in
// copies/ into its shard (migration from format 1) and records the format.
// Every step can be repeated: a crash anywhere leaves a store the next
// Open finishes (see the package doc, Migration).
func (db *DB) prepareLayout() error {
	ver, err := readFormat(db.fs, db.dir)
	if err != nil {
		return err
	}
	if ver > FormatVersion {
		return fmt.Errorf("%w: %s records store format %d, newer than format %d this build knows; refusing to open it (run a newer build)",
			ErrFormat, filepath.Join(db.dir, formatFile), ver, FormatVersion)
	}
	if err := db.fs.MkdirAll(db.copies, 0o755); err != nil {
		return err
	}
	created, err := db.makeShards()
	if err != nil {
		return err
	}
	if created {
		// The shard directories' entries (and copies/ itself) must be
		// durable before a copy is moved or created in one.
		for _, d := range []string{db.copies, db.dir} {
			if err := db.fs.SyncDir(d); err != nil {
				return fmt.Errorf("sync %s: %w", d, err)
			}
		}
	}
	moved, err := db.moveLoose()
	if err != nil {
		return err
	}
	if ver < FormatVersion {
		if err := writeFormat(db.fs, db.dir, FormatVersion); err != nil {
			return fmt.Errorf("record format %d: %w", FormatVersion, err)
		}
		db.log.Info().Int("from", ver).Int("to", FormatVersion).Int("copies_moved", moved).Str("dir", db.dir).
			Msg("store: format migrated")
	}
	return nil
}

// makeShards creates the shard directories that do not exist and reports
// whether it created any.
func (db *DB) makeShards() (bool, error) {
	created := false
	for i := range Shards {
		p := filepath.Join(db.copies, shardNames[i])
		if _, err := db.fs.Stat(p); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		if err := db.fs.MkdirAll(p, 0o755); err != nil {
			return false, err
		}
		created = true
	}
	return created, nil
}

// moveLoose renames every copy directly in copies/ (the format-1 place) to
// its shard, then makes the moves durable: each shard that received one is
// fsynced before copies/ (whose fsync makes the old names' removal
// durable), so that at every instant the copy has a durable name. When
// the shard already holds a file of the copy's name, the shard's file is
// the copy (only this function puts a file there in a store being
// migrated): an old name of the same file is removed, another file is left
// where it is, with a warning, and never registered.
func (db *DB) moveLoose() (int, error) {
	ents, err := db.fs.ReadDir(db.copies)
	if err != nil {
		return 0, err
	}
	var touched [Shards]bool
	moved, changed := 0, false
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), segSuffix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		id := meta.SegmentID(name)
		if id.Validate() != nil {
			db.log.Warn().Str("file", e.Name()).Msg("store: ignoring a file whose name is not a segment id")
			continue
		}
		from := filepath.Join(db.copies, e.Name())
		to := db.Path(id)
		if fi, err := db.fs.Stat(to); err == nil {
			// Both names: a rename interrupted between its link and its
			// unlink leaves one file under two names; drop the old one.
			// Two different files are left alone: the shard's is the copy.
			if err := db.dropLink(from, fi); err != nil {
				return moved, err
			}
			touched[Shard(id)], changed = true, true
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return moved, err
		}
		if err := db.fs.Rename(from, to); err != nil {
			return moved, err
		}
		touched[Shard(id)], changed = true, true
		moved++
	}
	if !changed {
		return 0, nil
	}
	for i, t := range touched {
		if !t {
			continue
		}
		if err := db.fs.SyncDir(filepath.Join(db.copies, shardNames[i])); err != nil {
			return moved, err
		}
	}
	return moved, db.fs.SyncDir(db.copies)
}

// dropLink removes the old-layout name from when it names the same file as
// the shard's name whose information is shard; otherwise it leaves it, with
// a warning.
func (db *DB) dropLink(from string, shard os.FileInfo) error {
	fi, err := db.fs.Stat(from)
	if err != nil {
		return err
	}
	if !sameFile(fi, shard) {
		db.log.Warn().Str("file", from).
			Msg("store: a file of the old layout names a copy its shard already holds in another file; the shard's file is the copy, this one is left alone")
		return nil
	}
	return db.fs.Remove(from)
}

// loadShards registers the copies of every shard directory. A file in the
// wrong shard (placed by hand) is ignored with a warning: the store would
// look for it elsewhere.
func (db *DB) loadShards() error {
	for i := range Shards {
		d := filepath.Join(db.copies, shardNames[i])
		ents, err := db.fs.ReadDir(d)
		if err != nil {
			return err
		}
		for _, e := range ents {
			name, ok := strings.CutSuffix(e.Name(), segSuffix)
			if !ok || !e.Type().IsRegular() {
				continue
			}
			id := meta.SegmentID(name)
			if id.Validate() != nil || Shard(id) != i {
				db.log.Warn().Str("file", filepath.Join(d, e.Name())).
					Msg("store: ignoring a file whose name is not a segment id of its shard")
				continue
			}
			db.m[id] = &copyState{id: id, path: db.Path(id)}
		}
	}
	return nil
}
