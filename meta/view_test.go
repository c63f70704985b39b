package meta

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// refTable is the map-based Table this package had before views: the
// reference the chunked Table is checked against.
type refTable struct {
	index  uint64
	factor int
	segs   map[SegmentID]Segment
	bs     map[BrokerID]Broker
}

func (r *refTable) apply(index uint64, c Command) error {
	r.index = max(r.index, index)
	if err := c.Validate(); err != nil {
		return err
	}
	switch c := c.(type) {
	case RegisterBroker:
		r.bs[c.Broker.ID] = c.Broker
	case CreateSegment:
		if _, ok := r.segs[c.Segment.ID]; ok {
			return ErrSegmentExists
		}
		s := c.Segment.Clone()
		s.Version = 1
		r.segs[s.ID] = s
	case SealSegment, SetSegmentReplicas:
		var id SegmentID
		var apply func(Segment) (Segment, error)
		if s, ok := c.(SealSegment); ok {
			id, apply = s.ID, s.ApplyTo
		} else {
			id, apply = c.(SetSegmentReplicas).ID, c.(SetSegmentReplicas).ApplyTo
		}
		prev, ok := r.segs[id]
		if !ok {
			return ErrUnknownSegment
		}
		next, err := apply(prev)
		if err != nil {
			return err
		}
		if err := SealedChange(c.Op(), prev, next); err != nil {
			return err
		}
		r.segs[id] = next
	case SetReplicationFactor:
		r.factor = c.Factor
	}
	return nil
}

func (r *refTable) snapshot() Snapshot {
	s := Snapshot{Index: r.index, ReplicationFactor: r.factor, Brokers: []Broker{}, Segments: make([]Segment, 0, len(r.segs))}
	for _, b := range r.bs {
		s.Brokers = append(s.Brokers, b)
	}
	for _, seg := range r.segs {
		s.Segments = append(s.Segments, seg.Clone())
	}
	slices.SortFunc(s.Brokers, func(a, b Broker) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(s.Segments, func(a, b Segment) int { return cmp.Compare(a.ID, b.ID) })
	return s
}

// heldFilter is today's probe: a scan of every segment.
func heldFilter(s *Snapshot, b BrokerID) []Segment {
	var out []Segment
	for _, seg := range s.Segments {
		if seg.HasReplica(b) {
			out = append(out, seg)
		}
	}
	return out
}

// checkView checks every accessor of v against want, the flat snapshot of
// the same moment.
func checkView(t *testing.T, v *View, want Snapshot, brokers int) {
	t.Helper()
	if got := v.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatalf("view at %d: Snapshot differs from the table's at that moment:\n%+v\nwant\n%+v", want.Index, got, want)
	}
	if v.Index() != want.Index || v.ReplicationFactor() != want.ReplicationFactor || v.Len() != len(want.Segments) ||
		!reflect.DeepEqual(v.Brokers(), want.Brokers) {
		t.Fatalf("view at %d: header or length differs", want.Index)
	}
	for i := range want.Segments {
		w := &want.Segments[i]
		if !reflect.DeepEqual(*v.At(i), *w) {
			t.Fatalf("view at %d: At(%d) = %+v, want %+v", want.Index, i, *v.At(i), *w)
		}
		if p, ok := v.Find(w.ID); !ok || p != i {
			t.Fatalf("view at %d: Find(%s) = %d, %v; want %d", want.Index, w.ID, p, ok, i)
		}
		if s, ok := v.Segment(w.ID); !ok || s != v.At(i) {
			t.Fatalf("view at %d: Segment(%s) is not At(%d)", want.Index, w.ID, i)
		}
	}
	if _, ok := v.Find("~absent"); ok {
		t.Fatal("Find found an absent id")
	}
	for b := BrokerID(1); b <= BrokerID(brokers); b++ {
		var got []Segment
		for s := range v.HeldBy(b) {
			got = append(got, *s)
		}
		slices.SortFunc(got, func(a, b Segment) int { return cmp.Compare(a.ID, b.ID) })
		if w := heldFilter(&want, b); !reflect.DeepEqual(got, w) || v.Held(b) != len(w) {
			t.Fatalf("view at %d: HeldBy(%d) = %d segments (Held %d), the filter %d", want.Index, b, len(got), v.Held(b), len(w))
		}
	}
}

// TestViewsMatchFlatSnapshots applies random commands (creates in random
// id order, interleaved like partitions, replica changes, seals, refused
// ones) to a Table and to the map-based reference; views taken at random
// points must equal the flat snapshot of their moment, checked again after
// all later applies (copy-on-write), and HeldBy must equal the filter.
// Small chunks make splits and copies frequent.
func TestViewsMatchFlatSnapshots(t *testing.T) {
	for _, chunk := range []int{4, 64, 2048} {
		seeds := uint64(3)
		if chunk == 2048 {
			seeds = 1
		}
		for seed := range seeds {
			t.Run(fmt.Sprintf("chunk=%d/seed=%d", chunk, seed), func(t *testing.T) {
				saved := listChunk
				listChunk = chunk
				defer func() { listChunk = saved }()
				n := 3000
				if chunk == 2048 {
					n = 12000
				}
				randomViews(t, rand.New(rand.NewPCG(seed, uint64(chunk))), n)
			})
		}
	}
}

func randomViews(t *testing.T, rng *rand.Rand, ops int) {
	const brokers = 6
	tab, ref := NewTable(0), &refTable{segs: map[SegmentID]Segment{}, bs: map[BrokerID]Broker{}}
	var ids []SegmentID
	type held struct {
		v    *View
		want Snapshot
	}
	var views []held
	replicas := func() []BrokerID {
		p := rng.Perm(brokers)[:1+rng.IntN(3)]
		out := make([]BrokerID, len(p))
		for i, b := range p {
			out[i] = BrokerID(b + 1)
		}
		return out
	}
	next := make([]int, 8) // next offset per partition: ids arrive interleaved
	for idx := uint64(1); idx <= uint64(ops); idx++ {
		var c Command
		switch r := rng.IntN(20); {
		case r < 9 || len(ids) == 0:
			p := rng.IntN(len(next))
			id := SegmentID(fmt.Sprintf("orders-%d-%06d", p, next[p]))
			if rng.IntN(10) == 0 && len(ids) > 0 {
				id = ids[rng.IntN(len(ids))] // refused: exists
			} else {
				next[p]++
				ids = append(ids, id)
			}
			c = CreateSegment{Segment: Segment{ID: id, StartOffset: idx, Replicas: replicas()}}
		case r < 12:
			id := ids[rng.IntN(len(ids))]
			c = SealSegment{ID: id, Length: uint64(rng.IntN(2)), ByteSize: 0, Checksum: CRC32C(uint32(rng.IntN(2)))}
		case r < 18:
			id := ids[rng.IntN(len(ids))]
			exp := ref.segs[id].Replicas
			if rng.IntN(8) == 0 {
				exp = replicas() // usually stale
			}
			c = SetSegmentReplicas{ID: id, Expected: exp, Replicas: replicas()}
		case r < 19:
			c = RegisterBroker{Broker: Broker{ID: BrokerID(1 + rng.IntN(brokers)), Rack: fmt.Sprint(rng.IntN(3))}}
		default:
			c = SetReplicationFactor{Factor: 1 + rng.IntN(3)}
		}
		errT, errR := tab.Apply(idx, c), ref.apply(idx, c)
		sentinel := errors.Is(errR, ErrSegmentExists) || errors.Is(errR, ErrUnknownSegment)
		if (errT == nil) != (errR == nil) || sentinel && !errors.Is(errT, errR) {
			t.Fatalf("index %d %s: table %v, reference %v", idx, c.Op(), errT, errR)
		}
		if rng.IntN(ops/40+1) == 0 {
			want := ref.snapshot()
			v := tab.View()
			if tab.View() != v {
				t.Fatal("View with no change since is not the same view")
			}
			checkView(t, v, want, brokers)
			views = append(views, held{v, want})
		}
	}
	want := ref.snapshot()
	if got := tab.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatal("table and reference differ at the end")
	}
	checkView(t, tab.View(), want, brokers)
	for _, h := range views {
		checkView(t, h.v, h.want, brokers) // unchanged by every later apply
	}
	if len(views) < 10 {
		t.Fatalf("only %d views taken", len(views))
	}
	// The same state built from the flat snapshot answers the same.
	checkView(t, NewView(want), want, brokers)
}

// A copy Table.Segment returned and a *Segment from a View never change
// when later commands apply.
func TestViewAndSegmentShareNothingWritable(t *testing.T) {
	tab := NewTable(3)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tab.Apply(1, CreateSegment{Segment: Segment{ID: "a", Replicas: []BrokerID{1, 2}}}))
	cp, _ := tab.Segment("a")
	v := tab.View()
	at := v.At(0)
	must(tab.Apply(2, SetSegmentReplicas{ID: "a", Expected: []BrokerID{1, 2}, Replicas: []BrokerID{2, 3}}))
	must(tab.Apply(3, SealSegment{ID: "a", Length: 0, ByteSize: 0, Checksum: CRC32C(7)}))
	if !SameReplicas(at.Replicas, []BrokerID{1, 2}) || at.Sealed || at.Version != 1 || !SameReplicas(cp.Replicas, []BrokerID{1, 2}) {
		t.Fatalf("view's segment %+v or copy %+v changed", *at, cp)
	}
	if v.Held(3) != 0 || v.Held(1) != 1 || tab.View().Held(3) != 1 || tab.View().Held(1) != 0 {
		t.Fatal("per-broker index wrong before or after the change")
	}
	cp.Replicas[0] = 99
	if s, _ := tab.Segment("a"); s.Replicas[0] != 2 {
		t.Fatal("Table.Segment's copy shares its replica set with the table")
	}
}

func TestTableFromUnsortedSnapshot(t *testing.T) {
	s := Snapshot{Index: 4, ReplicationFactor: 2, Brokers: []Broker{{ID: 2}, {ID: 1}},
		Segments: []Segment{{ID: "b", Replicas: []BrokerID{1}}, {ID: "a", Replicas: []BrokerID{2}}, {ID: "b", Version: 9, Replicas: []BrokerID{2}}}}
	v := NewView(s)
	if v.Len() != 2 || v.At(0).ID != "a" || v.At(1).Version != 9 || v.Held(2) != 2 || v.Held(1) != 0 || v.Brokers()[0].ID != 1 {
		t.Fatalf("view of an unsorted snapshot: %+v", v.Snapshot())
	}
	b := NewBuilder(v)
	if err := b.Add(&Segment{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(&Segment{ID: "a"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Builder.Add out of order = %v, want ErrInvalid", err)
	}
}
