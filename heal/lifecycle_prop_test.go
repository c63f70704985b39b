package heal

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
	"pgregory.net/rapid"
)

// TestDecommissionNeverBelowFactor drives random clusters through a
// decommission pass after pass: the plan's commands are applied to a
// meta.Table (a random share of backfills fail, and then their segment's
// command is not applied, as the executor does). After every command no
// sealed segment's set has fewer than the replication factor members, and
// no set gains the decommissioning broker. With a spare broker in every
// rack and no failures it ends drained.
func TestDecommissionNeverBelowFactor(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rf := rapid.IntRange(1, 3).Draw(rt, "rf")
		n := rapid.IntRange(rf+1, 7).Draw(rt, "brokers")
		nracks := rapid.IntRange(0, 3).Draw(rt, "racks")
		var rackNames []string
		for i := range nracks {
			rackNames = append(rackNames, fmt.Sprintf("r%d", i))
		}
		tb := meta.NewTable(rf)
		idx := uint64(0)
		apply := func(c meta.Command) error {
			idx++
			return tb.Apply(idx, c)
		}
		for _, b := range brokers(n, rackNames...) {
			if err := apply(meta.RegisterBroker{Broker: b}); err != nil {
				rt.Fatal(err)
			}
		}
		nsegs := rapid.IntRange(1, 30).Draw(rt, "segments")
		for i := range nsegs {
			perm := rapid.Permutation(brokersIDs(n)).Draw(rt, fmt.Sprintf("set%d", i))
			s := seg(fmt.Sprintf("s%03d", i), perm[:rf]...)
			s.Sealed, s.Checksum = false, 0
			if err := apply(meta.CreateSegment{Segment: s}); err != nil {
				rt.Fatal(err)
			}
			if err := apply(meta.SealSegment{ID: s.ID, Length: 10, ByteSize: 1000, Checksum: meta.CRC32C(7)}); err != nil {
				rt.Fatal(err)
			}
		}
		d := meta.BrokerID(rapid.IntRange(1, n).Draw(rt, "decommission"))
		if err := apply(meta.SetBrokerMode{Broker: d, Mode: meta.ModeDecommissioning}); err != nil {
			rt.Fatal(err)
		}
		failShare := rapid.SampledFrom([]float64{0, 0, 0.3}).Draw(rt, "fail")
		pol := Policy{Grace: 10 * time.Second, MaxBackfills: rapid.IntRange(0, 4).Draw(rt, "max"), MaxBackfillsPerBroker: rapid.IntRange(0, 3).Draw(rt, "per")}
		var pl Planner
		var st State
		now := t0
		var last Drain
		for pass := 0; pass < 200; pass++ {
			v := tb.View()
			var reports []ProbeReport
			for i := 1; i <= n; i++ {
				reports = append(reports, ProbeReport{Broker: meta.BrokerID(i), Index: v.Index()})
			}
			plan, next, err := pl.Step(st, Observation{View: v, Reports: reports, Start: now, Now: now, Policy: pol})
			if err != nil {
				rt.Fatal(err)
			}
			st = next
			k := slices.IndexFunc(plan.Report.Decommission, func(x Drain) bool { return x.Broker == d })
			if k < 0 {
				rt.Fatalf("pass %d: no progress for %d", pass, d)
			}
			last = plan.Report.Decommission[k]
			if last.Drained {
				break
			}
			failed := map[meta.SegmentID]bool{}
			for _, a := range plan.Actions {
				if a.Op.IsBackfill() {
					if a.Target == d {
						rt.Fatalf("pass %d: %s targets the decommissioning broker %d", pass, a, d)
					}
					if failShare > 0 && rapid.Float64Range(0, 1).Draw(rt, "f") < failShare {
						failed[a.Segment.ID] = true
					}
				}
			}
			for _, cmd := range plan.Commands {
				if failed[cmd.ID] {
					continue
				}
				if err := apply(cmd); err != nil {
					rt.Fatalf("pass %d: %v", pass, err)
				}
				s, _ := tb.Segment(cmd.ID)
				if len(s.Replicas) < rf {
					rt.Fatalf("pass %d: %s has %v, fewer than %d", pass, s.ID, s.Replicas, rf)
				}
				if s.HasReplica(d) && !slices.Contains(cmd.Expected, d) {
					rt.Fatalf("pass %d: %s gained the decommissioning broker: %v", pass, s.ID, s.Replicas)
				}
			}
			now = now.Add(time.Second)
		}
		spare := n-1 >= rf && (nracks == 0 || sparePerRack(n, nracks, d))
		if spare && !last.Drained {
			rt.Fatalf("not drained after 200 passes: %+v", last)
		}
		if !spare && last.Drained && tb.View().Held(d) > 0 {
			rt.Fatalf("drained while holding %d", tb.View().Held(d))
		}
	})
}

func brokersIDs(n int) []meta.BrokerID {
	var out []meta.BrokerID
	for i := 1; i <= n; i++ {
		out = append(out, meta.BrokerID(i))
	}
	return out
}

// sparePerRack reports whether d's rack has another broker (racks are
// assigned in turn), so a move never loses a rack.
func sparePerRack(n, nracks int, d meta.BrokerID) bool {
	r := (int(d) - 1) % nracks
	count := 0
	for i := 1; i <= n; i++ {
		if (i-1)%nracks == r {
			count++
		}
	}
	return count >= 2
}
