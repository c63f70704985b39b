package pass

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// Simulation-level tests of the mass-failure guards: the in-memory brokers and
// control plane of sim_test.go, the real Coordinator, no random faults.

func simCoordinator(t *testing.T, s *sim, mod func(*Config)) *Coordinator {
	t.Helper()
	cfg := Config{
		Metadata: simControl{s}, Prober: simBrokers{s}, Backfiller: simBrokers{s}, Settler: simBrokers{s}, Deleter: simBrokers{s},
		Policy:      heal.Policy{Grace: 3 * time.Second, SettleBatch: 16, MaxBackfillsPerBroker: 4, MaxBackfills: 12},
		Now:         func() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.now },
		Concurrency: 1,
		ReturnCheck: -1,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pass advances the simulated clock by a second and runs one pass.
func (s *sim) pass(t *testing.T, c *Coordinator) heal.Report {
	t.Helper()
	s.mu.Lock()
	s.tick++
	s.now = s.now.Add(time.Second)
	s.mu.Unlock()
	rep, err := c.Pass(context.Background())
	if err != nil {
		t.Fatalf("tick %d: %v", s.tick, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.violations) > 0 {
		t.Fatalf("violations: %v", s.violations)
	}
	return rep
}

func sum(m map[meta.SegmentID]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// 3 of 5 brokers lost within one grace window: no backfill
// starts (no read, no command) on any pass, the hold is reported on every
// pass, the segments left without a copy are reported lost meanwhile, and
// the hold lifts on its own when two of them return.
func TestSimMassFailureNoBackfillAndHoldReported(t *testing.T) {
	s := newSim(t, 1, 5, 30, 3)
	c := simCoordinator(t, s, nil)
	if rep := s.pass(t, c); rep.HoldReason != "" || rep.Backfills != 0 {
		t.Fatalf("healthy pass: %s", rep)
	}
	s.mu.Lock()
	for _, b := range []meta.BrokerID{1, 2, 3} {
		s.brokers[b].up = false
	}
	before := s.table.Snapshot()
	s.mu.Unlock()
	sawLost := false
	for pass := 0; pass < 8; pass++ { // well past the 3s grace
		rep := s.pass(t, c)
		if !strings.HasPrefix(rep.HoldReason, "brokers_missing: 3 of 5") || rep.HoldReleased {
			t.Fatalf("pass %d: hold_reason %q", pass, rep.HoldReason)
		}
		if n := sum(s.reads) + sum(s.sets); n != 0 || rep.Backfills != 0 || rep.Commands != 0 {
			t.Fatalf("pass %d: %d reads/commands under a hold; report %s", pass, n, rep)
		}
		sawLost = sawLost || len(rep.Lost) > 0
	}
	if !sawLost {
		t.Error("no segment with all three replicas on 1-3 was reported lost")
	}
	s.mu.Lock()
	after := s.table.Snapshot()
	s.mu.Unlock()
	if after.Index != before.Index {
		t.Errorf("metadata changed under a hold: index %d -> %d", before.Index, after.Index)
	}
	// Two return: one of five missing is not a mass failure; healing
	// goes ahead and converges.
	s.mu.Lock()
	s.brokers[1].up, s.brokers[2].up = true, true
	s.mu.Unlock()
	for pass := 0; pass < 10; pass++ {
		if rep := s.pass(t, c); rep.HoldReason != "" {
			t.Fatalf("hold not lifted: %q", rep.HoldReason)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok, why := s.converged(); !ok || sum(s.reads) == 0 {
		t.Errorf("not converged after the hold lifted (%d reads): %s", sum(s.reads), why)
	}
}

// a dead broker answers again while the backfills replacing it
// run: they are cancelled, no replica-set change is applied for its
// segments, the bytes saved are reported, and the next pass finds the
// cluster healthy without copying anything.
func TestSimReturningBrokerCancelsBackfillsNoSetChange(t *testing.T) {
	s := newSim(t, 2, 6, 30, 3)
	c := simCoordinator(t, s, func(cfg *Config) { cfg.ReturnCheck = 2 * time.Millisecond })
	s.pass(t, c)
	s.mu.Lock()
	s.brokers[1].up = false
	s.blockFills = true
	s.fillStarted = func() {
		s.mu.Lock()
		s.brokers[1].up = true // restarted; its copies are intact
		s.mu.Unlock()
	}
	before := s.table.Snapshot()
	var mine []meta.SegmentID
	for _, sg := range before.Segments {
		if sg.Sealed && sg.HasReplica(1) {
			mine = append(mine, sg.ID)
		}
	}
	s.mu.Unlock()
	var rep heal.Report
	for pass := 0; pass < 6 && rep.Backfills == 0; pass++ {
		rep = s.pass(t, c)
	}
	if rep.Backfills == 0 {
		t.Fatal("broker 1 never counted dead")
	}
	if len(rep.Returned) == 0 || rep.BytesSaved <= 0 || len(rep.Healed) != 0 || len(rep.Failed) != 0 {
		t.Errorf("report %+v", rep)
	}
	for _, id := range rep.Returned {
		if !slices.Contains(mine, id) {
			t.Errorf("returned %s is not broker 1's", id)
		}
	}
	s.mu.Lock()
	after := s.table.Snapshot()
	sets := maps.Clone(s.sets)
	s.blockFills = false
	s.mu.Unlock()
	if len(sets) != 0 || after.Index != before.Index {
		t.Errorf("replica sets changed: commands %v, index %d -> %d", sets, before.Index, after.Index)
	}
	reads := sum(s.reads)
	rep = s.pass(t, c)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rep.Backfills != 0 || len(rep.Dead) != 0 || sum(s.reads) != reads {
		t.Errorf("next pass: %s", rep)
	}
	if ok, why := s.converged(); !ok {
		t.Errorf("not healthy: %s", why)
	}
}

// a lost segment is reported on every pass, and after the first
// failed attempt from each source no read names its replicas again (the
// in-memory brokers count Backfill calls). A
// segment whose every copy is corrupt is lost from the first pass, costs
// no read, and no copy of it is deleted.
func TestSimLostSegmentReportedEveryPassNoReadsAfterFirstAttempt(t *testing.T) {
	s := newSim(t, 3, 6, 30, 3)
	c := simCoordinator(t, s, nil)
	s.pass(t, c)
	s.mu.Lock()
	var sealed []meta.Segment
	for _, sg := range s.snap().Segments {
		if sg.Sealed {
			sealed = append(sealed, sg)
		}
	}
	x, y := sealed[0], sealed[1]
	// x: one copy deleted, the other two silently rotten (no scrubber has
	// looked): the probe sees two intact sources, both refuse.
	delete(s.brokers[x.Replicas[0]].copies, x.ID)
	s.brokers[x.Replicas[1]].copies[x.ID].rotten = true
	s.brokers[x.Replicas[2]].copies[x.ID].rotten = true
	// y: every copy found corrupt by the scrubber.
	for _, r := range y.Replicas {
		s.brokers[r].copies[y.ID].corrupt = true
	}
	s.mu.Unlock()

	fills := func(id meta.SegmentID) (int, int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.reads[id], s.sets[id]
	}
	lostFrom, readsAtLost := -1, 0
	for pass := 0; pass < 12; pass++ {
		rep := s.pass(t, c)
		if !rep.IsLost(y.ID) || rep.FailedReason(y.ID) != heal.NoIntactSource {
			t.Fatalf("pass %d: %s not reported lost: %+v", pass, y.ID, rep.Lost)
		}
		if n, _ := fills(y.ID); n != 0 {
			t.Fatalf("pass %d: %d reads of all-corrupt %s", pass, n, y.ID)
		}
		r, sets := fills(x.ID)
		if sets != 0 {
			t.Fatalf("pass %d: command for %s", pass, x.ID)
		}
		if rep.IsLost(x.ID) && lostFrom < 0 {
			lostFrom, readsAtLost = pass, r
		}
		if lostFrom >= 0 {
			if !rep.IsLost(x.ID) {
				t.Fatalf("pass %d: %s lost since pass %d, not reported now: %+v", pass, x.ID, lostFrom, rep.Failed)
			}
			if r != readsAtLost {
				t.Fatalf("pass %d: reads of lost %s went %d -> %d", pass, x.ID, readsAtLost, r)
			}
		}
		if pass == 11 {
			l := rep.Lost[slices.IndexFunc(rep.Lost, func(l heal.LostSegment) bool { return l.Segment == x.ID })]
			if l.StartOffset != x.StartOffset || l.EndOffset != x.EndOffset() || l.ByteSize != x.ByteSize || !slices.Equal(l.Replicas, x.Replicas) {
				t.Errorf("lost entry %+v for %+v", l, x)
			}
			if rep.LostBytes != x.ByteSize+y.ByteSize {
				t.Errorf("lost bytes %d", rep.LostBytes)
			}
		}
	}
	// One attempt per source: one Backfill of the missing copy from each
	// of the two rotten replicas.
	if lostFrom != 2 || readsAtLost != 2 {
		t.Errorf("%s lost from pass %d after %d reads; want pass 2 after 2", x.ID, lostFrom, readsAtLost)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range y.Replicas {
		if s.brokers[r].copies[y.ID] == nil {
			t.Errorf("a corrupt copy of %s was deleted from %d with no intact copy left", y.ID, r)
		}
	}
}
