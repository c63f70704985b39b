package heal

import (
	"slices"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"pgregory.net/rapid"
)

func TestPlace(t *testing.T) {
	ids := func(v ...meta.BrokerID) []meta.BrokerID { return v }
	load := func(m map[meta.BrokerID]int) func(meta.BrokerID) int {
		return func(b meta.BrokerID) int { return m[b] }
	}
	for _, tc := range []struct {
		name     string
		current  []meta.BrokerID
		live     []meta.Broker
		rf       int
		latched  []meta.BrokerID
		load     map[meta.BrokerID]int
		want     []meta.BrokerID
		added    []meta.BrokerID
		kept     []meta.BrokerID
		replaced []meta.BrokerID
	}{
		{name: "healthy set unchanged", current: ids(1, 2, 3), live: brokers(5), rf: 3, want: ids(1, 2, 3)},
		{name: "dead replaced by least loaded", current: ids(1, 2, 3), live: brokers(5)[1:], rf: 3,
			load: map[meta.BrokerID]int{4: 5, 5: 1}, want: ids(2, 3, 5), added: ids(5), replaced: ids(1)},
		{name: "ties go to the lowest id", current: ids(3, 1, 2), live: brokers(6)[1:], rf: 3, want: ids(3, 2, 4), added: ids(4), replaced: ids(1)},
		{name: "survivors keep their order", current: ids(5, 1, 4), live: brokers(6)[1:], rf: 3, want: ids(5, 4, 2), added: ids(2), replaced: ids(1)},
		{name: "latched replaced, not a target", current: ids(1, 2, 3), live: brokers(4), rf: 3, latched: ids(2), want: ids(1, 3, 4), added: ids(4), replaced: ids(2)},
		{name: "latched kept behind without a spare", current: ids(1, 2, 3), live: brokers(3), rf: 3, latched: ids(1), want: ids(2, 3, 1), kept: ids(1)},
		{name: "dead kept behind without a spare", current: ids(1, 2, 3), live: brokers(3)[1:], rf: 3, want: ids(2, 3, 1), kept: ids(1)},
		{name: "short set filled", current: ids(2), live: brokers(4), rf: 3, want: ids(2, 1, 3), added: ids(1, 3)},
		{name: "survivors beyond the factor are kept", current: ids(1, 2, 3, 4), live: brokers(4), rf: 2, want: ids(1, 2, 3, 4)},
		{name: "all dead, no spare", current: ids(1, 2), live: nil, rf: 2, want: ids(1, 2), kept: ids(1, 2)},
		{name: "racks spread before load", current: ids(1, 2, 3), rf: 3,
			live: []meta.Broker{{ID: 2, Rack: "a"}, {ID: 3, Rack: "b"}, {ID: 4, Rack: "a"}, {ID: 5, Rack: "c"}},
			load: map[meta.BrokerID]int{4: 0, 5: 9}, want: ids(2, 3, 5), added: ids(5), replaced: ids(1)},
		{name: "a shared rack when no other is left", current: ids(1, 2, 3), rf: 3,
			live: []meta.Broker{{ID: 2, Rack: "a"}, {ID: 3, Rack: "b"}, {ID: 4, Rack: "a"}, {ID: 5, Rack: "b"}},
			load: map[meta.BrokerID]int{4: 3, 5: 1}, want: ids(2, 3, 5), added: ids(5), replaced: ids(1)},
		{name: "brokers without a rack never share one", current: ids(1, 2, 3), rf: 3,
			live: []meta.Broker{{ID: 2}, {ID: 3}, {ID: 4}, {ID: 5, Rack: "z"}},
			load: map[meta.BrokerID]int{4: 0, 5: 1}, want: ids(2, 3, 4), added: ids(4), replaced: ids(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Place(tc.current, tc.live, tc.rf, tc.latched, load(tc.load))
			if !slices.Equal(p.Replicas, tc.want) || !slices.Equal(p.Added, tc.added) || !slices.Equal(p.Kept, tc.kept) || !slices.Equal(p.Replaced, tc.replaced) {
				t.Errorf("Place = %+v\nwant replicas %v added %v kept %v replaced %v", p, tc.want, tc.added, tc.kept, tc.replaced)
			}
			// Deterministic whatever the order of live.
			rev := slices.Clone(tc.live)
			slices.Reverse(rev)
			if q := Place(tc.current, rev, tc.rf, tc.latched, load(tc.load)); !slices.Equal(q.Replicas, p.Replicas) {
				t.Errorf("live reversed: %v, want %v", q.Replicas, p.Replicas)
			}
		})
	}
}

// TestPlaceProperties: invariants 1 and 2 of the package doc, for Place.
func TestPlaceProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 9).Draw(t, "brokers")
		rf := rapid.IntRange(1, 5).Draw(t, "rf")
		all := make([]meta.BrokerID, 12)
		for i := range all {
			all[i] = meta.BrokerID(i + 1)
		}
		current := rapid.SliceOfNDistinct(rapid.SampledFrom(all), 0, rf, rapid.ID[meta.BrokerID]).Draw(t, "current")
		var live []meta.Broker
		for i := 1; i <= n; i++ {
			if rapid.Bool().Draw(t, "live") {
				live = append(live, meta.Broker{ID: meta.BrokerID(i), Rack: rapid.SampledFrom([]string{"", "a", "b"}).Draw(t, "rack")})
			}
		}
		var latched []meta.BrokerID
		for _, r := range current {
			if rapid.IntRange(0, 4).Draw(t, "latch") == 0 {
				latched = append(latched, r)
			}
		}
		loads := rapid.SliceOfN(rapid.IntRange(0, 5), 12, 12).Draw(t, "loads")
		p := Place(current, live, rf, latched, func(b meta.BrokerID) int { return loads[b-1] })

		isLive := func(b meta.BrokerID) bool {
			return slices.ContainsFunc(live, func(x meta.Broker) bool { return x.ID == b })
		}
		if err := meta.ValidateReplicas(p.Replicas); err != nil {
			t.Fatalf("healed set %v: %v", p.Replicas, err)
		}
		if len(p.Replicas) > max(rf, len(current)) {
			t.Fatalf("healed set %v exceeds rf %d", p.Replicas, rf)
		}
		for _, r := range p.Replicas {
			if !slices.Contains(current, r) && !isLive(r) {
				t.Fatalf("healed set %v names %d, neither a replica nor live", p.Replicas, r)
			}
		}
		for _, a := range p.Added {
			if !isLive(a) || slices.Contains(current, a) {
				t.Fatalf("added %d: not live or already holds a copy", a)
			}
		}
		// No copy dropped without a replacement.
		if len(p.Replicas) < len(current) {
			t.Fatalf("healed set %v is smaller than %v", p.Replicas, current)
		}
		for _, r := range current {
			if !slices.Contains(p.Replicas, r) && !slices.Contains(p.Replaced, r) {
				t.Fatalf("%d left out but not replaced", r)
			}
		}
		if len(p.Replaced) > len(p.Added) {
			t.Fatalf("replaced %v by only %v", p.Replaced, p.Added)
		}
		// Healthy survivors first, in order; kept lost replicas last.
		var surv []meta.BrokerID
		for _, r := range current {
			if isLive(r) && !slices.Contains(latched, r) {
				surv = append(surv, r)
			}
		}
		if !slices.Equal(p.Replicas[:len(surv)], surv) {
			t.Fatalf("healed set %v does not start with the survivors %v", p.Replicas, surv)
		}
		if !slices.Equal(p.Replicas[len(p.Replicas)-len(p.Kept):], p.Kept) {
			t.Fatalf("kept %v not at the end of %v", p.Kept, p.Replicas)
		}
		// A lost replica is kept only when no spare was left.
		if len(p.Kept) > 0 {
			for _, b := range live {
				if !slices.Contains(current, b.ID) && !slices.Contains(p.Added, b.ID) {
					t.Fatalf("kept %v while %d was spare", p.Kept, b.ID)
				}
			}
		}
	})
}
