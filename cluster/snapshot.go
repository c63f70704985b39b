package cluster

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strconv"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
)

// The raft snapshot is written in the compact format (snapcodec.go) from
// a meta.View and read into a meta.Builder one segment at a time: neither
// side holds the whole encoding or a flat copy of the segments. Restore
// also reads the format before it, the JSON of a meta.Snapshot (version 1,
// unversioned in itself: any JSON reader of meta.Snapshot reads it), so
// that snapshots written by earlier releases load; writeSnapshot still
// writes it, for tests.

// Snapshot implements raft.FSM. It runs on raft's FSM goroutine, with no
// Apply concurrent, and takes a View (no copy); Persist then streams it
// while commands keep applying, each copying only the chunks it changes.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{view: f.view()}, nil
}

// Restore implements raft.FSM: it replaces the whole state with the one
// a Persist wrote, building the new table as the segments stream in. A
// snapshot that would change a segment this state holds sealed (its
// offsets, byte_size or checksum, or unseal it: meta invariant 4) is
// refused with an error wrapping ErrBadSnapshot and meta.ErrSealed that
// names the segment and the field, and the state is left as it was.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	prev := f.view() // raft runs no Apply during Restore: the view stays current
	b := meta.NewBuilder(prev)
	var sealedErr error
	hdr, err := decodeAnySnapshot(rc, func(s *meta.Segment) error {
		err := b.Add(s)
		if errors.Is(err, meta.ErrSealed) {
			sealedErr = err
		}
		return err
	})
	if sealedErr != nil {
		err = fmt.Errorf("%w: snapshot at index %d: %w", ErrBadSnapshot, hdr.Index, sealedErr)
		f.log.Error().Err(err).Uint64("index", hdr.Index).Msg("cluster: snapshot refused: it would change a sealed segment")
		return err
	}
	if err != nil {
		return err
	}
	b.SetTopics(hdr.Topics)
	b.SetGroups(hdr.Groups)
	t := b.Finish(hdr.Index, hdr.ReplicationFactor, hdr.Brokers)
	checkRestored(prev, t, hdr.Index)
	f.mu.Lock()
	f.table, f.cur = t, nil
	f.applied = hdr.Index
	ch := f.changed
	f.changed = make(chan struct{})
	f.mu.Unlock()
	close(ch)
	f.log.Info().Uint64("index", hdr.Index).Int("segments", t.Len()).Msg("cluster: state restored from snapshot")
	return nil
}

type fsmSnapshot struct{ view *meta.View }

// Persist implements raft.FSMSnapshot.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	v := s.view
	if err := writeCompact(sink, viewHeader(v), v.Len(), v.All()); err != nil {
		_ = sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("cluster: snapshot close: %w", err)
	}
	return nil
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() { s.view = nil }

// writeSnapshot streams s as the JSON of meta.Snapshot.
func writeSnapshot(w io.Writer, s *meta.Snapshot) error {
	return writeSegments(w, s.Index, s.ReplicationFactor, s.Brokers, s.Topics, s.Groups, func(yield func(int, *meta.Segment) bool) {
		for i := range s.Segments {
			if !yield(i, &s.Segments[i]) {
				return
			}
		}
	})
}

// writeSegments writes the JSON of a meta.Snapshot one segment at a time
// (one per line), so memory does not grow with the number of segments.
// The topics and groups keys are written only when there are topics or
// committed offsets, so a snapshot without them reads as before.
func writeSegments(w io.Writer, index uint64, factor int, brokers []meta.Broker, topics []meta.Topic, groups []meta.GroupOffsets, segs iter.Seq2[int, *meta.Segment]) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	if brokers == nil {
		brokers = []meta.Broker{}
	}
	bs, err := json.Marshal(brokers)
	if err != nil {
		return fmt.Errorf("cluster: snapshot brokers: %w", err)
	}
	bw.WriteString(`{"index":`)
	bw.WriteString(strconv.FormatUint(index, 10))
	bw.WriteString(`,"replication_factor":`)
	bw.WriteString(strconv.Itoa(factor))
	bw.WriteString(`,"brokers":`)
	bw.Write(bs)
	if len(topics) > 0 {
		ts, err := json.Marshal(topics)
		if err != nil {
			return fmt.Errorf("cluster: snapshot topics: %w", err)
		}
		bw.WriteString(`,"topics":`)
		bw.Write(ts)
	}
	if len(groups) > 0 {
		gs, err := json.Marshal(groups)
		if err != nil {
			return fmt.Errorf("cluster: snapshot groups: %w", err)
		}
		bw.WriteString(`,"groups":`)
		bw.Write(gs)
	}
	bw.WriteString(`,"segments":[`)
	buf := make([]byte, 0, 512)
	for i, s := range segs {
		if i > 0 {
			bw.WriteByte(',')
		}
		buf = append(appendSegment(buf[:0], s), '\n')
		if _, err := bw.Write(buf); err != nil {
			return fmt.Errorf("cluster: snapshot write: %w", err)
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

// readSnapshot parses what writeSnapshot or Persist wrote into a flat
// meta.Snapshot (tests and tools; Restore streams).
func readSnapshot(r io.Reader) (meta.Snapshot, error) {
	var segs []meta.Segment
	s, err := decodeAnySnapshot(r, func(seg *meta.Segment) error {
		if n := len(segs); n > 0 && segs[n-1].ID >= seg.ID {
			return fmt.Errorf("segments not sorted or duplicated at %s", seg.ID)
		}
		segs = append(segs, seg.Clone())
		return nil
	})
	if err != nil {
		return meta.Snapshot{}, err
	}
	s.Segments = segs
	if s.Segments == nil {
		s.Segments = []meta.Segment{}
	}
	return s, nil
}

// decodeSnapshot parses the JSON of a meta.Snapshot, handing each segment
// to add in stream order (the *Segment is reused: add copies what it
// keeps), and returns the rest. An error from add ends the parse. It
// checks that brokers are sorted; add checks the segments' order. Errors
// wrap ErrBadSnapshot and, for add's, add's error.
func decodeSnapshot(r io.Reader, add func(*meta.Segment) error) (meta.Snapshot, error) {
	var s meta.Snapshot
	rd := &reader{br: bufio.NewReaderSize(r, 1<<20)}
	fail := func(what string, err error) (meta.Snapshot, error) {
		return s, fmt.Errorf("%w: %s at byte %d: %w", ErrBadSnapshot, what, rd.off, err)
	}
	if err := rd.expect('{'); err != nil {
		return fail("start", err)
	}
	for first := true; ; first = false {
		if c, err := rd.next(); err != nil {
			return fail("key", err)
		} else if c == '}' {
			break
		}
		if !first {
			if err := rd.expect(','); err != nil {
				return fail("key", err)
			}
		}
		raw, err := rd.value()
		var key string
		if err == nil {
			err = json.Unmarshal(raw, &key)
		}
		if err == nil {
			err = rd.expect(':')
		}
		if err != nil {
			return fail("key", err)
		}
		if err := decodeField(rd, key, &s, add); err != nil {
			return fail(strconv.Quote(key), err)
		}
	}
	if !slices.IsSortedFunc(s.Brokers, func(a, b meta.Broker) int { return cmp.Compare(a.ID, b.ID) }) {
		return s, fmt.Errorf("%w: brokers not sorted by id", ErrBadSnapshot)
	}
	for i := range s.Topics {
		if err := s.Topics[i].Validate(); err != nil {
			return s, fmt.Errorf("%w: topics: %w", ErrBadSnapshot, err)
		}
		if i > 0 && s.Topics[i-1].Name >= s.Topics[i].Name {
			return s, fmt.Errorf("%w: topics not sorted by name or duplicated at %s", ErrBadSnapshot, s.Topics[i].Name)
		}
	}
	if err := checkGroups(s.Groups); err != nil {
		return s, err
	}
	if s.Brokers == nil {
		s.Brokers = []meta.Broker{}
	}
	return s, nil
}

// decodeField reads the value of key into s, or streams segments to add.
func decodeField(rd *reader, key string, s *meta.Snapshot, add func(*meta.Segment) error) error {
	if key == "segments" {
		if err := rd.expect('['); err != nil {
			return err
		}
		var seg meta.Segment
		for n := 0; ; n++ {
			if c, err := rd.next(); err != nil {
				return err
			} else if c == ']' {
				return rd.expect(']')
			}
			if n > 0 {
				if err := rd.expect(','); err != nil {
					return err
				}
			}
			raw, err := rd.value()
			if err == nil {
				err = decodeSegment(raw, &seg)
			}
			if err != nil {
				return fmt.Errorf("segment %d: %w", n, err)
			}
			if err := add(&seg); err != nil {
				return err
			}
		}
	}
	raw, err := rd.value()
	if err != nil {
		return err
	}
	switch key {
	case "index":
		return json.Unmarshal(raw, &s.Index)
	case "replication_factor":
		return json.Unmarshal(raw, &s.ReplicationFactor)
	case "brokers":
		return json.Unmarshal(raw, &s.Brokers)
	case "topics":
		return json.Unmarshal(raw, &s.Topics)
	case "groups":
		return json.Unmarshal(raw, &s.Groups)
	}
	return fmt.Errorf("unknown key %q", key)
}

// checkGroups checks a snapshot's committed offsets as the table keeps
// them (meta invariant 11): each group valid, groups sorted by id and
// unique, each one's offsets sorted by topic and partition. Errors wrap
// ErrBadSnapshot and name the group.
func checkGroups(groups []meta.GroupOffsets) error {
	for i, g := range groups {
		if err := g.Validate(); err != nil {
			return fmt.Errorf("%w: groups: %w", ErrBadSnapshot, err)
		}
		if i > 0 && groups[i-1].Group >= g.Group {
			return fmt.Errorf("%w: groups not sorted by id or duplicated at %s", ErrBadSnapshot, g.Group)
		}
		if !slices.IsSortedFunc(g.Offsets, func(a, b meta.PartitionOffset) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		}) {
			return fmt.Errorf("%w: group %s: offsets not sorted by topic and partition", ErrBadSnapshot, g.Group)
		}
	}
	return nil
}
