package nemesis

import (
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/meta"
)

var allKinds = slices.Concat(harness.ProcessKinds, harness.FileKinds, harness.DiskKinds, harness.NetKinds, []FaultKind{harness.KindQuorumLoss})

func TestScheduleDeterministic(t *testing.T) {
	a := Draw(42, 10*time.Minute, 5, 3, allKinds, 2)
	b := Draw(42, 10*time.Minute, 5, 3, allKinds, 2)
	if !a.Equal(b) {
		t.Fatalf("two draws with seed 42 differ:\n%s\n%s", a, b)
	}
	c := Draw(43, 10*time.Minute, 5, 3, allKinds, 2)
	if a.Equal(c) {
		t.Fatalf("seeds 42 and 43 drew the same schedule:\n%s", a)
	}
	if n := len(a.Epochs); n != 10 {
		t.Fatalf("10 minutes: %d epochs, want 10", n)
	}
	// Kinds given in another order are the same input.
	rev := slices.Clone(allKinds)
	slices.Reverse(rev)
	if d := Draw(42, 10*time.Minute, 5, 3, rev, 2); !a.Equal(d) {
		t.Fatalf("the order of the kinds changed the draw")
	}
}

func TestScheduleBounds(t *testing.T) {
	counts := map[FaultKind]int{}
	for seed := uint64(1); seed <= 300; seed++ {
		s := Draw(seed, 10*time.Minute, 5, 3, allKinds, 2)
		if s.Limit != 2 || s.Majority != 3 {
			t.Fatalf("limit %d majority %d, want 2 and 3", s.Limit, s.Majority)
		}
		for i, ep := range s.Epochs {
			for _, e := range ep.Events {
				counts[e.Kind]++
				if e.At < 0 || e.End() > ep.Window || e.Length <= 0 {
					t.Fatalf("seed %d epoch %d: %s outside its window %v", seed, i, e, ep.Window)
				}
				for _, b := range e.Brokers {
					if b < 1 || b > 5 {
						t.Fatalf("seed %d: %s names broker %d", seed, e, b)
					}
				}
				if (e.Kind == harness.KindDiskFull || e.Kind == harness.KindReadOnly) && !slices.Equal(e.Brokers, []meta.BrokerID{2}) {
					t.Fatalf("seed %d: %s not on the disk broker 2", seed, e)
				}
				if e.Kind == harness.KindSwap && slices.Contains(e.Brokers, 2) {
					t.Fatalf("seed %d: %s swaps the disk broker's data directory", seed, e)
				}
				if e.Kind == harness.KindQuorumLoss {
					if len(ep.Events) != 1 || len(e.Brokers) != 3 {
						t.Fatalf("seed %d: quorum loss %s not alone or not a majority (%d events)", seed, e, len(ep.Events))
					}
				}
			}
			if ep.Events != nil && ep.Events[0].Kind == harness.KindQuorumLoss {
				continue
			}
			// At every instant: at most Limit brokers busy, one fault a broker.
			for at := time.Duration(0); at < ep.Window; at += 100 * time.Millisecond {
				on := map[meta.BrokerID]int{}
				for _, e := range ep.Events {
					if e.At <= at && at < e.End() {
						for _, b := range e.Brokers {
							on[b]++
						}
					}
				}
				if len(on) > s.Limit {
					t.Fatalf("seed %d epoch %d at %v: %d brokers faulted at once, limit %d\n%s", seed, i, at, len(on), s.Limit, s)
				}
				for b, n := range on {
					if n > 1 {
						t.Fatalf("seed %d epoch %d at %v: broker %d has %d faults at once\n%s", seed, i, at, b, n, s)
					}
				}
			}
		}
	}
	for _, k := range allKinds {
		if counts[k] == 0 {
			t.Errorf("300 draws never chose %s", k)
		}
	}
	// Without a disk broker the disk kinds are not drawn.
	s := Draw(7, 10*time.Minute, 5, 3, allKinds, 0)
	if c := s.Count(); c[harness.KindDiskFull]+c[harness.KindReadOnly] > 0 || slices.Contains(s.Kinds, harness.KindDiskFull) {
		t.Fatalf("disk kinds drawn without a disk broker: %v", c)
	}
	// RF 1 allows no destructive fault at all.
	if s := Draw(7, 2*time.Minute, 5, 1, harness.ProcessKinds, 0); len(s.Count()) != 0 {
		t.Fatalf("rf 1: %v drawn", s.Count())
	}
}

// TestLostBytesCountsEachSealedCopyOnALostBroker: the heal bound's bytes
// are one segment's size per lost broker holding it, sealed segments
// only (an active one is rolled, not healed).
func TestLostBytesCountsEachSealedCopyOnALostBroker(t *testing.T) {
	snap := meta.Snapshot{Segments: []meta.Segment{
		{ID: "a", Sealed: true, ByteSize: 100, Replicas: []meta.BrokerID{1, 2, 3}},
		{ID: "b", Sealed: true, ByteSize: 10, Replicas: []meta.BrokerID{3, 4, 5}},
		{ID: "c", Sealed: false, ByteSize: 1000, Replicas: []meta.BrokerID{1, 2, 3}},
	}}
	if got := lostBytes(snap, []meta.BrokerID{1, 2}); got != 200 {
		t.Errorf("brokers 1 and 2 lost: %d bytes, want 200 (segment a twice)", got)
	}
	if got := lostBytes(snap, []meta.BrokerID{3}); got != 110 {
		t.Errorf("broker 3 lost: %d bytes, want 110 (a and b)", got)
	}
	if got := lostBytes(snap, nil); got != 0 {
		t.Errorf("nothing lost: %d bytes", got)
	}
}
