package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/internal/pebblelog"
)

// ErrKeyNotFound is what the StableStore returns for a key never set.
// Its text is exactly "not found", without the package prefix our other
// errors carry: hashicorp/raft compares GetUint64's error by its text
// (api.go, HasExistingState and NewRaft) and treats anything else as
// fatal.
var ErrKeyNotFound = errors.New("not found")

// Key layout in the raft-log Pebble: one byte of prefix, then
//
//	'l' + big-endian uint64 index -> encoded raft.Log
//	's' + key                     -> stable value
//
// Big-endian indices sort numerically, so the first and last log entries
// are the first and last keys with prefix 'l'.
const (
	prefixLog    = 'l'
	prefixStable = 's'
)

// logStore is hashicorp/raft's LogStore and StableStore on one Pebble DB
// in its own directory. Every write is a batch committed with
// pebble.Sync: raft assumes a stored entry survives a crash.
//
// It is safe for concurrent use (Pebble is).
type logStore struct {
	db *pebble.DB
}

var (
	_ raft.LogStore    = (*logStore)(nil)
	_ raft.StableStore = (*logStore)(nil)
)

// openLogStore opens (creating if needed) the store in dir. Pebble logs
// through log, never to stderr.
func openLogStore(dir string, log zerolog.Logger) (*logStore, error) {
	opts := &pebble.Options{
		Logger: pebblelog.New(log, "raft-log"),
		// The raft log is small and written sequentially: keep memory low.
		MemTableSize:                4 << 20,
		MemTableStopWritesThreshold: 4,
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft log %s: %w", dir, err)
	}
	return &logStore{db: db}, nil
}

func (s *logStore) Close() error { return s.db.Close() }

func logKey(index uint64) []byte {
	var k [9]byte
	k[0] = prefixLog
	binary.BigEndian.PutUint64(k[1:], index)
	return k[:]
}

var (
	logLower = []byte{prefixLog}
	logUpper = []byte{prefixLog + 1}
)

// FirstIndex implements raft.LogStore: the first stored index, 0 if none.
func (s *logStore) FirstIndex() (uint64, error) { return s.edgeIndex(true) }

// LastIndex implements raft.LogStore: the last stored index, 0 if none.
func (s *logStore) LastIndex() (uint64, error) { return s.edgeIndex(false) }

func (s *logStore) edgeIndex(first bool) (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logLower, UpperBound: logUpper})
	if err != nil {
		return 0, fmt.Errorf("cluster: raft log iterator: %w", err)
	}
	var ok bool
	if first {
		ok = it.First()
	} else {
		ok = it.Last()
	}
	var idx uint64
	if ok {
		k := it.Key()
		if len(k) != 9 {
			_ = it.Close()
			return 0, fmt.Errorf("cluster: raft log: malformed key %x", k)
		}
		idx = binary.BigEndian.Uint64(k[1:])
	}
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("cluster: raft log iterator: %w", err)
	}
	return idx, nil
}

// GetLog implements raft.LogStore. A missing index is raft.ErrLogNotFound.
func (s *logStore) GetLog(index uint64, out *raft.Log) error {
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("cluster: raft log get %d: %w", index, err)
	}
	defer closer.Close()
	if err := decodeLog(v, out); err != nil {
		return fmt.Errorf("cluster: raft log entry %d: %w", index, err)
	}
	return nil
}

// StoreLog implements raft.LogStore.
func (s *logStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: all entries in one synced batch.
func (s *logStore) StoreLogs(logs []*raft.Log) error {
	b := s.db.NewBatch()
	defer b.Close()
	var buf []byte
	for _, l := range logs {
		buf = encodeLog(buf[:0], l)
		if err := b.Set(logKey(l.Index), buf, nil); err != nil {
			return fmt.Errorf("cluster: raft log store %d: %w", l.Index, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cluster: raft log commit of %d entries: %w", len(logs), err)
	}
	return nil
}

// DeleteRange implements raft.LogStore: deletes [min, max], inclusive.
func (s *logStore) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	end := logUpper
	if max < math.MaxUint64 {
		end = logKey(max + 1)
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(logKey(min), end, nil); err != nil {
		return fmt.Errorf("cluster: raft log delete [%d, %d]: %w", min, max, err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cluster: raft log delete [%d, %d]: %w", min, max, err)
	}
	return nil
}

func stableKey(k []byte) []byte {
	return append([]byte{prefixStable}, k...)
}

// Set implements raft.StableStore.
func (s *logStore) Set(key, val []byte) error {
	if err := s.db.Set(stableKey(key), val, pebble.Sync); err != nil {
		return fmt.Errorf("cluster: stable set %q: %w", key, err)
	}
	return nil
}

// Get implements raft.StableStore. A missing key is ErrKeyNotFound. The
// returned slice belongs to the caller.
func (s *logStore) Get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: stable get %q: %w", key, err)
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, nil
}

// SetUint64 implements raft.StableStore.
func (s *logStore) SetUint64(key []byte, val uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], val)
	return s.Set(key, b[:])
}

// GetUint64 implements raft.StableStore. A missing key is ErrKeyNotFound.
func (s *logStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("cluster: stable %q: %d bytes, want 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Entry encoding (version 1):
//
//	u8 version | u64 index | u64 term | u8 type | i64 appended_at unix ns
//	| u32 len | data | u32 len | extensions
const logVersion = 1

func encodeLog(buf []byte, l *raft.Log) []byte {
	buf = append(buf, logVersion)
	buf = binary.BigEndian.AppendUint64(buf, l.Index)
	buf = binary.BigEndian.AppendUint64(buf, l.Term)
	buf = append(buf, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	buf = binary.BigEndian.AppendUint64(buf, uint64(at))
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(l.Extensions)))
	buf = append(buf, l.Extensions...)
	return buf
}

var errShortEntry = errors.New("cluster: raft log entry truncated")

// decodeLog fills out from b; out's slices are fresh copies.
func decodeLog(b []byte, out *raft.Log) error {
	const head = 1 + 8 + 8 + 1 + 8
	if len(b) < head+4 {
		return errShortEntry
	}
	if b[0] != logVersion {
		return fmt.Errorf("cluster: raft log entry version %d, want %d", b[0], logVersion)
	}
	out.Index = binary.BigEndian.Uint64(b[1:])
	out.Term = binary.BigEndian.Uint64(b[9:])
	out.Type = raft.LogType(b[17])
	at := int64(binary.BigEndian.Uint64(b[18:]))
	out.AppendedAt = time.Time{}
	if at != 0 {
		out.AppendedAt = time.Unix(0, at)
	}
	b = b[head:]
	data, b, ok := lenPrefixed(b)
	if !ok {
		return errShortEntry
	}
	ext, b, ok := lenPrefixed(b)
	if !ok || len(b) != 0 {
		return errShortEntry
	}
	out.Data, out.Extensions = data, ext
	return nil
}

func lenPrefixed(b []byte) (v, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(len(b)) < uint64(n) {
		return nil, nil, false
	}
	if n == 0 {
		return nil, b, true
	}
	return append([]byte(nil), b[:n]...), b[n:], true
}
