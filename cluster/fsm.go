package cluster

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// fsm is the raft state machine: a meta.Table, plus a sorted cache of its
// Snapshot so that reading the whole table each heal tick costs a copy,
// not a map walk and a sort.
//
// INVARIANT: when cacheOK, cache equals table.Snapshot() (same values;
// the cache shares no memory with table). When shared, cache's slices
// have been handed out (View, raft's Snapshot) and are immutable: the
// next change copies them first (copy-on-write). Protected by mu.
type fsm struct {
	log zerolog.Logger

	mu      sync.RWMutex
	table   *meta.Table
	factor  int    // replication factor, as in table
	applied uint64 // last raft index of a command entry applied, or of the restored snapshot's table
	cache   meta.Snapshot
	cacheOK bool
	shared  bool
	// changed is closed (and replaced) after every batch applied or
	// restore, to wake Barrier waiters on followers.
	changed chan struct{}
}

func newFSM(log zerolog.Logger) *fsm {
	return &fsm{log: log, table: meta.NewTable(0), changed: make(chan struct{})}
}

var _ raft.BatchingFSM = (*fsm)(nil)

// applyResult is what ApplyBatch returns for each command entry: the
// future's Response on the node that proposed it.
type applyResult struct{ err error }

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch implements raft.BatchingFSM. Every command entry, refused or
// not, yields an applyResult; other entry types yield nil.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	f.mu.Lock()
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		f.applied = max(f.applied, l.Index)
		c, err := meta.DecodeCommand(l.Data)
		if err != nil {
			// Only a peer running different code can propose this.
			f.log.Error().Err(err).Uint64("index", l.Index).Msg("cluster: undecodable command in the log; skipped")
			out[i] = applyResult{err: fmt.Errorf("cluster: command at index %d: %w", l.Index, err)}
			continue
		}
		err = f.table.Apply(l.Index, c)
		if rf, ok := c.(meta.SetReplicationFactor); ok && err == nil {
			f.factor = rf.Factor
		}
		f.patchCache(c, err)
		out[i] = applyResult{err: err}
	}
	ch := f.changed
	f.changed = make(chan struct{})
	f.mu.Unlock()
	close(ch)
	return out
}

// patchCache updates the cache after c was applied with result err.
// Caller holds mu for writing.
func (f *fsm) patchCache(c meta.Command, err error) {
	if !f.cacheOK {
		return
	}
	f.cache.Index = f.table.Index() // a value: never shared
	if err != nil {
		return // refused: only the index moved
	}
	if _, ok := c.(meta.SetReplicationFactor); !ok && f.shared {
		f.cache = copySnapshot(&f.cache)
		f.shared = false
	}
	switch c := c.(type) {
	case meta.SetSegmentReplicas:
		f.replaceSegment(c.ID)
	case meta.SealSegment:
		f.replaceSegment(c.ID)
	case meta.CreateSegment:
		n := len(f.cache.Segments)
		if n == 0 || f.cache.Segments[n-1].ID < c.Segment.ID {
			seg, _ := f.table.Segment(c.Segment.ID)
			f.cache.Segments = append(f.cache.Segments, seg) // ids created in order: the common case
		} else {
			f.cacheOK, f.cache = false, meta.Snapshot{}
		}
	case meta.RegisterBroker:
		bs := f.cache.Brokers
		i := sort.Search(len(bs), func(i int) bool { return bs[i].ID >= c.Broker.ID })
		if i < len(bs) && bs[i].ID == c.Broker.ID {
			bs[i] = c.Broker
		} else {
			f.cache.Brokers = slices.Insert(bs, i, c.Broker)
		}
	case meta.SetReplicationFactor:
		f.cache.ReplicationFactor = c.Factor
	default:
		f.cacheOK, f.cache = false, meta.Snapshot{}
	}
}

func (f *fsm) replaceSegment(id meta.SegmentID) {
	segs := f.cache.Segments
	i := sort.Search(len(segs), func(i int) bool { return segs[i].ID >= id })
	seg, ok := f.table.Segment(id)
	if i < len(segs) && segs[i].ID == id && ok {
		segs[i] = seg
		return
	}
	f.cacheOK, f.cache = false, meta.Snapshot{}
}

// snapshot returns a deep copy of the table's snapshot, rebuilding the
// cache first if a command invalidated it.
func (f *fsm) snapshot() meta.Snapshot {
	f.mu.RLock()
	if f.cacheOK {
		s := copySnapshot(&f.cache)
		f.mu.RUnlock()
		return s
	}
	f.mu.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fillCache()
	return copySnapshot(&f.cache)
}

// view returns the cache itself, marked shared: no copy when nothing
// changed since the last call. The caller must not modify it.
func (f *fsm) view() meta.Snapshot {
	f.mu.RLock()
	if f.cacheOK && f.shared {
		s := f.cache
		f.mu.RUnlock()
		return s
	}
	f.mu.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fillCache()
	f.shared = true
	return f.cache
}

// fillCache rebuilds the cache if needed. Caller holds mu for writing.
func (f *fsm) fillCache() {
	if !f.cacheOK {
		f.cache = f.table.Snapshot()
		f.cacheOK, f.shared = true, false
	}
}

func (f *fsm) segment(id meta.SegmentID) (meta.Segment, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Segment(id)
}

// appliedIndex returns the last applied command index and a channel closed
// at the next change.
func (f *fsm) appliedIndex() (uint64, <-chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied, f.changed
}

// copySnapshot deep-copies s with three allocations: brokers, segments,
// and one array holding every replica set.
func copySnapshot(s *meta.Snapshot) meta.Snapshot {
	out := meta.Snapshot{Index: s.Index, ReplicationFactor: s.ReplicationFactor}
	out.Brokers = append(make([]meta.Broker, 0, len(s.Brokers)), s.Brokers...)
	out.Segments = make([]meta.Segment, len(s.Segments))
	copy(out.Segments, s.Segments)
	n := 0
	for i := range s.Segments {
		n += len(s.Segments[i].Replicas)
	}
	arena := make([]meta.BrokerID, n)
	off := 0
	for i := range out.Segments {
		r := out.Segments[i].Replicas
		if len(r) == 0 {
			out.Segments[i].Replicas = nil
			continue
		}
		k := copy(arena[off:], r)
		out.Segments[i].Replicas = arena[off : off+k : off+k]
		off += k
	}
	return out
}

// Snapshot implements raft.FSM. It runs on raft's FSM goroutine, with no
// Apply concurrent, and takes the cache as a shared view (no copy);
// Persist then streams it while commands keep applying, each change
// copying the cache first.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{snap: f.view()}, nil
}

// Restore implements raft.FSM: it replaces the whole state with the one
// a Persist wrote. A snapshot that would change a segment this state holds
// sealed (its offsets, byte_size or checksum, or unseal it: meta invariant
// 4) is refused with an error wrapping ErrBadSnapshot and meta.ErrSealed
// that names the segment and the field, and the state is left as it was.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := readSnapshot(rc)
	if err != nil {
		return err
	}
	t := meta.TableFromSnapshot(s) // clones: the cache keeps s
	f.mu.Lock()
	if err := f.table.CheckRestore(&s); err != nil {
		f.mu.Unlock()
		f.log.Error().Err(err).Uint64("index", s.Index).Msg("cluster: snapshot refused: it would change a sealed segment")
		return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	f.table, f.cache, f.cacheOK, f.shared = t, s, true, false
	f.applied = s.Index
	f.factor = s.ReplicationFactor
	ch := f.changed
	f.changed = make(chan struct{})
	f.mu.Unlock()
	close(ch)
	f.log.Info().Uint64("index", s.Index).Int("segments", len(s.Segments)).Msg("cluster: state restored from snapshot")
	return nil
}

type fsmSnapshot struct{ snap meta.Snapshot }

// Persist implements raft.FSMSnapshot.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(sink, &s.snap); err != nil {
		_ = sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("cluster: snapshot close: %w", err)
	}
	return nil
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() { s.snap = meta.Snapshot{} }

// writeSnapshot streams s as the JSON of meta.Snapshot, one segment at a
// time, so memory does not grow with the number of segments.
func writeSnapshot(w io.Writer, s *meta.Snapshot) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	brokers, err := json.Marshal(s.Brokers)
	if err != nil {
		return fmt.Errorf("cluster: snapshot brokers: %w", err)
	}
	bw.WriteString(`{"index":`)
	bw.WriteString(strconv.FormatUint(s.Index, 10))
	bw.WriteString(`,"replication_factor":`)
	bw.WriteString(strconv.Itoa(s.ReplicationFactor))
	bw.WriteString(`,"brokers":`)
	bw.Write(brokers)
	bw.WriteString(`,"segments":[`)
	enc := json.NewEncoder(bw)
	for i := range s.Segments {
		if i > 0 {
			bw.WriteByte(',')
		}
		if err := enc.Encode(&s.Segments[i]); err != nil {
			return fmt.Errorf("cluster: snapshot segment %s: %w", s.Segments[i].ID, err)
		}
	}
	bw.WriteString("]}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("cluster: snapshot write: %w", err)
	}
	return nil
}

// ErrBadSnapshot is wrapped by Restore when a snapshot cannot be read.
var ErrBadSnapshot = errors.New("cluster: bad snapshot")

// readSnapshot parses what writeSnapshot wrote, one segment at a time,
// and checks the sort order the rest of the system relies on.
func readSnapshot(r io.Reader) (meta.Snapshot, error) {
	var s meta.Snapshot
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	fail := func(what string, err error) (meta.Snapshot, error) {
		return meta.Snapshot{}, fmt.Errorf("%w: %s at byte %d: %v", ErrBadSnapshot, what, dec.InputOffset(), err)
	}
	expect := func(want json.Delim) error {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := t.(json.Delim); !ok || d != want {
			return fmt.Errorf("got %v, want %v", t, want)
		}
		return nil
	}
	if err := expect('{'); err != nil {
		return fail("start", err)
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fail("key", err)
		}
		key, _ := t.(string)
		switch key {
		case "index":
			err = dec.Decode(&s.Index)
		case "replication_factor":
			err = dec.Decode(&s.ReplicationFactor)
		case "brokers":
			err = dec.Decode(&s.Brokers)
		case "segments":
			if err := expect('['); err != nil {
				return fail("segments", err)
			}
			for dec.More() {
				s.Segments = append(s.Segments, meta.Segment{})
				if err := dec.Decode(&s.Segments[len(s.Segments)-1]); err != nil {
					return fail(fmt.Sprintf("segment %d", len(s.Segments)-1), err)
				}
			}
			err = expect(']')
		default:
			err = fmt.Errorf("unknown key %v", t)
		}
		if err != nil {
			return fail(fmt.Sprintf("%q", key), err)
		}
	}
	if err := expect('}'); err != nil {
		return fail("end", err)
	}
	if !slices.IsSortedFunc(s.Brokers, func(a, b meta.Broker) int { return cmp.Compare(a.ID, b.ID) }) {
		return meta.Snapshot{}, fmt.Errorf("%w: brokers not sorted by id", ErrBadSnapshot)
	}
	for i := 1; i < len(s.Segments); i++ {
		if s.Segments[i-1].ID >= s.Segments[i].ID {
			return meta.Snapshot{}, fmt.Errorf("%w: segments not sorted or duplicated at %s", ErrBadSnapshot, s.Segments[i].ID)
		}
	}
	if s.Brokers == nil {
		s.Brokers = []meta.Broker{}
	}
	if s.Segments == nil {
		s.Segments = []meta.Segment{}
	}
	return s, nil
}
