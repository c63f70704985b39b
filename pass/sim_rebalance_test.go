package pass

import (
	"math"
	"testing"

	"github.com/malachi-log/malachi/meta"
)

// In the deterministic simulation: a broker joins empty
// and passes run until the loads are balanced. Every pass keeps every
// sealed segment at its factor with intact copies; the potential Phi never
// rises and falls with every pass that moved something; no segment moves
// back to a broker it was moved from (no ping-pong); the end is within 10%
// of the mean by count and by bytes, with a bounded number of moves; and
// further passes move nothing.
func TestRebalanceConvergesWithoutPingPong(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5} {
		s := newSim(t, seed, 6, 90, 3)
		c := simCoordinator(t, s, func(cfg *Config) {
			cfg.Policy.Rebalance = true
			cfg.Policy.RebalanceMoves = 4
		})
		// Random placement first converges among the six, then the
		// seventh joins empty.
		six := []meta.BrokerID{1, 2, 3, 4, 5, 6}
		runRebalance(t, s, c, seed, six)
		const joined = meta.BrokerID(7)
		s.mu.Lock()
		s.brokers[joined] = &simBroker{up: true, copies: map[meta.SegmentID]*simCopy{}}
		if err := s.apply(meta.RegisterBroker{Broker: meta.Broker{ID: joined, Rack: "r4"}}); err != nil {
			t.Fatal(err)
		}
		s.mu.Unlock()
		moves, cnt := runRebalance(t, s, c, seed, append(six, joined))
		// Broker 7's share is 3*81/7 ~ 35 replicas: each move gives it at
		// most one, and what moves among the others is bounded too.
		if moves < cnt[joined] || moves > 2*cnt[joined] {
			t.Fatalf("seed %d: %d moves for broker 7's %d replicas", seed, moves, cnt[joined])
		}
		t.Logf("seed %d: %d moves, counts %v", seed, moves, cnt)
	}
}

// runRebalance runs passes until three in a row move nothing, checking the
// properties of TestRebalanceConvergesWithoutPingPong on each, and returns
// the moves and the final counts of the brokers all.
func runRebalance(t *testing.T, s *sim, c *Coordinator, seed uint64, all []meta.BrokerID) (int, map[meta.BrokerID]int) {
	t.Helper()
	from := map[meta.SegmentID]map[meta.BrokerID]bool{} // brokers a segment was moved off
	prevPhi, moves, quiet := -1.0, 0, 0
	for pass := 0; pass < 200 && quiet < 3; pass++ {
		s.mu.Lock()
		before := s.table.Snapshot()
		s.mu.Unlock()
		rep := s.pass(t, c)
		s.mu.Lock()
		after := s.table.Snapshot()
		ok, why := s.converged()
		s.mu.Unlock()
		if !ok {
			t.Fatalf("seed %d pass %d: not at the factor with intact copies: %s", seed, pass, why)
		}
		if len(rep.Healed) != 0 {
			t.Fatalf("seed %d pass %d: a move was reported healed: %v", seed, pass, rep.Healed)
		}
		for i, sg := range after.Segments {
			old := before.Segments[i].Replicas
			for _, r := range sg.Replicas {
				if !before.Segments[i].HasReplica(r) && from[sg.ID][r] {
					t.Fatalf("seed %d pass %d: %s moved back onto %d (%v -> %v)", seed, pass, sg.ID, r, old, sg.Replicas)
				}
			}
			for _, r := range old {
				if !sg.HasReplica(r) {
					if from[sg.ID] == nil {
						from[sg.ID] = map[meta.BrokerID]bool{}
					}
					from[sg.ID][r] = true
				}
			}
		}
		moves += len(rep.Moved)
		cnt, byt := loads(&after, all)
		_, phi := within(cnt, byt)
		if prevPhi >= 0 && (phi > prevPhi+1e-9 || (len(rep.Moved) > 0 && phi >= prevPhi)) {
			t.Fatalf("seed %d pass %d: Phi %.3f -> %.3f with %d moves", seed, pass, prevPhi, phi, len(rep.Moved))
		}
		prevPhi = phi
		if len(rep.Moved) == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	s.mu.Lock()
	end := s.table.Snapshot()
	s.mu.Unlock()
	cnt, byt := loads(&end, all)
	if ok, phi := within(cnt, byt); !ok {
		t.Fatalf("seed %d: not within 10%% after %d moves (Phi %.2f): counts %v bytes %v", seed, moves, phi, cnt, byt)
	}
	return moves, cnt
}

// loads returns each listed broker's replica count and bytes over the
// sealed segments of snap.
func loads(snap *meta.Snapshot, bs []meta.BrokerID) (map[meta.BrokerID]int, map[meta.BrokerID]int64) {
	c, b := map[meta.BrokerID]int{}, map[meta.BrokerID]int64{}
	for _, id := range bs {
		c[id], b[id] = 0, 0
	}
	for _, sg := range snap.Segments {
		if !sg.Sealed {
			continue
		}
		for _, r := range sg.Replicas {
			if _, ok := c[r]; ok {
				c[r]++
				b[r] += sg.ByteSize
			}
		}
	}
	return c, b
}

// within reports whether every load is within max(10% of the mean, floor)
// of the mean, and the potential Phi.
func within(c map[meta.BrokerID]int, b map[meta.BrokerID]int64) (bool, float64) {
	var tc, tb float64
	for id := range c {
		tc += float64(c[id])
		tb += float64(b[id])
	}
	k := float64(len(c))
	mc, mb := tc/k, tb/k
	bc, bb := max(0.1*mc, 1), max(0.1*mb, tb/tc, 1)
	ok, phi := true, 0.0
	for id := range c {
		x, y := (float64(c[id])-mc)/bc, (float64(b[id])-mb)/bb
		ok = ok && math.Abs(x) <= 1 && math.Abs(y) <= 1
		phi += x*x + y*y
	}
	return ok, phi
}
