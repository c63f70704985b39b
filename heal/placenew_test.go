package heal

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// TestPlaceNew: each row is one sentence of PlaceNew's rule, over a
// cluster of registered brokers 1..5 heard from just now, placed by
// broker 1, at factor 3, unless the row changes it.
func TestPlaceNew(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ids := func(v ...meta.BrokerID) []meta.BrokerID { return v }
	for _, tc := range []struct {
		name   string
		change func(c *Candidates)
		want   []meta.BrokerID
		err    error
		says   []string // what the error names
	}{
		{name: "the first candidates in id order", want: ids(1, 2, 3)},
		{name: "Rotate starts the set further on, wrapping around",
			change: func(c *Candidates) { c.Rotate = 3 }, want: ids(4, 5, 1)},
		{name: "Rotate is taken modulo the candidates, negative too",
			change: func(c *Candidates) { c.Rotate = -1 }, want: ids(5, 1, 2)},
		{name: "a broker not heard from within the horizon is left out",
			change: func(c *Candidates) { c.Heard[2] = now.Add(-3 * time.Second) }, want: ids(1, 3, 4)},
		{name: "heard exactly at the horizon is not within it",
			change: func(c *Candidates) { c.Heard[2] = now.Add(-2 * time.Second) }, want: ids(1, 3, 4)},
		{name: "a broker the control plane does not name is left out",
			change: func(c *Candidates) { delete(c.Heard, 2) }, want: ids(1, 3, 4)},
		{name: "the placing broker is live however long ago it was heard",
			change: func(c *Candidates) { c.Heard[1] = now.Add(-time.Hour) }, want: ids(1, 2, 3)},
		{name: "a broker the coordinator counts dead or suspect is left out",
			change: func(c *Candidates) { c.Unplaceable = map[meta.BrokerID]bool{2: true, 3: true} }, want: ids(1, 4, 5)},
		{name: "but never the placing broker",
			change: func(c *Candidates) { c.Unplaceable = map[meta.BrokerID]bool{1: true} }, want: ids(1, 2, 3)},
		{name: "a broker without an admin address is left out",
			change: func(c *Candidates) { c.Brokers[1].AdminAddr = "" }, want: ids(1, 3, 4)},
		{name: "a decommissioning broker is left out while enough others are candidates",
			change: func(c *Candidates) {
				c.Brokers[0].Mode, c.Brokers[2].Mode = meta.ModeDecommissioning, meta.ModeDecommissioning
			},
			want: ids(2, 4, 5)},
		{name: "decommissioning brokers fill a set that others cannot, lowest ids first",
			change: func(c *Candidates) {
				for i := range c.Brokers[:4] {
					c.Brokers[i].Mode = meta.ModeDecommissioning
				}
			},
			want: ids(5, 1, 2)},
		{name: "a broker in maintenance is a candidate",
			change: func(c *Candidates) { c.Brokers[0].Mode, c.Brokers[0].Until = meta.ModeMaintenance, now.Add(time.Hour) }, want: ids(1, 2, 3)},
		{name: "fewer candidates than the factor: all of them",
			change: func(c *Candidates) { c.Heard = map[meta.BrokerID]time.Time{1: now, 4: now} }, want: ids(1, 4)},
		{name: "no candidate: ErrNoBroker, naming why each broker was left out",
			change: func(c *Candidates) {
				c.Brokers[0].AdminAddr = ""
				c.Unplaceable = map[meta.BrokerID]bool{2: true}
				c.Heard = map[meta.BrokerID]time.Time{1: now, 2: now, 3: now.Add(-time.Minute)}
			},
			err: ErrNoBroker,
			says: []string{"5 registered", "not heard from within 2s: [3 4 5]",
				"dead, suspect or unauthenticated on the last heal pass: [2]", "without an admin address yet: [1]"}},
		{name: "no broker registered: ErrNoBroker, saying so",
			change: func(c *Candidates) { c.Brokers = nil }, err: ErrNoBroker, says: []string{"no broker is registered"}},
		{name: "a factor below 1 is invalid",
			change: func(c *Candidates) { c.Factor = 0 }, err: ErrInvalid, says: []string{"replication factor 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Candidates{Self: 1, Now: now, Horizon: 2 * time.Second, Factor: 3, Heard: map[meta.BrokerID]time.Time{}}
			for _, b := range brokers(5) {
				b.AdminAddr = "127.0.0.1:700" + b.ID.String()
				c.Brokers = append(c.Brokers, b)
				c.Heard[b.ID] = now.Add(-time.Second)
			}
			if tc.change != nil {
				tc.change(&c)
			}
			got, err := PlaceNew(c)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || got != nil {
					t.Fatalf("PlaceNew = %v, %v; want no set and %v", got, err, tc.err)
				}
				for _, s := range tc.says {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("PlaceNew = %v, %v; want %v", got, err, tc.want)
			}
			// The order of Brokers does not matter.
			slices.Reverse(c.Brokers)
			if again, err := PlaceNew(c); err != nil || !slices.Equal(again, got) {
				t.Errorf("brokers reversed: %v, %v; want %v", again, err, got)
			}
		})
	}
}

// TestPlaceNewRoundRobin: consecutive Rotate values spread the segments'
// replicas evenly over the candidates.
func TestPlaceNewRoundRobin(t *testing.T) {
	now := time.Unix(1e9, 0)
	c := Candidates{Self: 1, Now: now, Horizon: time.Second, Factor: 3, Heard: map[meta.BrokerID]time.Time{}}
	for _, b := range brokers(4) {
		b.AdminAddr = "a"
		c.Brokers = append(c.Brokers, b)
		c.Heard[b.ID] = now
	}
	held := map[meta.BrokerID]int{}
	for r := range 8 {
		c.Rotate = r
		set, err := PlaceNew(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range set {
			held[b]++
		}
	}
	for _, b := range brokers(4) {
		if held[b.ID] != 6 {
			t.Fatalf("replicas held %v after 8 segments of 3 on 4 brokers, want 6 each", held)
		}
	}
}
