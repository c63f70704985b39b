package pass

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// The deterministic simulation: in-memory brokers and a control plane on
// meta.Table, a seeded random fault schedule, the real Planner and
// Coordinator, invariants checked after every tick, and convergence to full
// replication within a bound once faults stop.

const simFooter = 40 // a sealed copy measures ByteSize+simFooter, like store's

type simCopy struct {
	size      int64
	latched   bool
	confirmed bool
	// corrupt: the scrubber found a checksum mismatch (the probe reports
	// Corrupt); rotten: the bytes are bad but no scrubber has looked yet
	// (the probe sees an intact copy). Either way the copy refuses as a
	// backfill source. A restart clears neither.
	corrupt bool
	rotten  bool
}

// intact reports whether the copy holds the segment's whole, valid bytes.
func (c *simCopy) intact(seg meta.Segment) bool {
	return c != nil && !c.latched && !c.corrupt && !c.rotten && c.size >= seg.ByteSize
}

type simBroker struct {
	up     bool
	copies map[meta.SegmentID]*simCopy
}

type sim struct {
	t    testing.TB
	seed uint64
	rng  *rand.Rand

	mu      sync.Mutex
	table   *meta.Table
	index   uint64
	brokers map[meta.BrokerID]*simBroker
	now     time.Time
	tick    int
	faulty  bool // faults are being injected

	// leadership: the pass's context is cancelled after this many
	// mutating calls (0: never).
	cancelAfter int
	calls       int
	cancel      context.CancelFunc

	cached     *meta.Snapshot
	violations []string
	stats      map[string]int

	// Traffic, per segment: Backfill calls (reads), and
	// SetReplicas commands (sets).
	reads map[meta.SegmentID]int
	sets  map[meta.SegmentID]int
	// blockFills, when set, makes every Backfill wait for its context to
	// end; fillStarted is called (without the lock) when the first waits.
	blockFills  bool
	fillStarted func()

	// lostSeg has no intact copy from the start (every copy corrupt): it
	// must be reported lost on every pass once a leader has seen it, cost
	// no read and keep its copies. lostSince is the tick the current
	// leader first reported it (-1: not yet).
	lostSeg   meta.SegmentID
	lostSince int
}

func (s *sim) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf("tick %d: ", s.tick)+fmt.Sprintf(format, args...))
}

// chance decides a fault from a hash of the seed, the tick and the call, so
// that the schedule does not depend on goroutine interleaving.
func (s *sim) chance(p float64, parts ...any) bool {
	if !s.faulty {
		return false
	}
	h := fnv.New64a()
	fmt.Fprint(h, s.seed, s.tick, parts)
	return float64(h.Sum64()%1_000_000)/1_000_000 < p
}

func (s *sim) apply(c meta.Command) error {
	s.index++
	s.cached = nil
	return s.table.Apply(s.index, c)
}

// snap returns the table's snapshot, cached until the next command. The
// caller must not modify it.
func (s *sim) snap() *meta.Snapshot {
	if s.cached == nil {
		sn := s.table.Snapshot()
		s.cached = &sn
	}
	return s.cached
}

func newSim(t testing.TB, seed uint64, nBrokers, nSegs, rf int) *sim {
	s := &sim{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), table: meta.NewTable(rf),
		brokers: map[meta.BrokerID]*simBroker{}, now: t0, stats: map[string]int{},
		reads: map[meta.SegmentID]int{}, sets: map[meta.SegmentID]int{}}
	racks := []string{"r1", "r2", "r3"}
	for i := 1; i <= nBrokers; i++ {
		id := meta.BrokerID(i)
		s.brokers[id] = &simBroker{up: true, copies: map[meta.SegmentID]*simCopy{}}
		if err := s.apply(meta.RegisterBroker{Broker: meta.Broker{ID: id, Rack: racks[i%len(racks)]}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < nSegs; i++ {
		id := meta.SegmentID(fmt.Sprintf("s%03d", i))
		perm := s.rng.Perm(nBrokers)[:rf]
		var reps []meta.BrokerID
		for _, p := range perm {
			reps = append(reps, meta.BrokerID(p+1))
		}
		if err := s.apply(meta.CreateSegment{Segment: meta.Segment{ID: id, StartOffset: uint64(i) * 100, Replicas: reps}}); err != nil {
			t.Fatal(err)
		}
		size := int64(1000 + s.rng.IntN(1000))
		for _, r := range reps {
			s.brokers[r].copies[id] = &simCopy{size: size, confirmed: true}
		}
		if i%10 == 9 {
			continue // stays active
		}
		if err := s.apply(meta.SealSegment{ID: id, Length: 100, ByteSize: size, Checksum: meta.CRC32C(uint32(i))}); err != nil {
			t.Fatal(err)
		}
		for _, r := range reps {
			s.brokers[r].copies[id].size = size + simFooter
		}
	}
	return s
}

// ---- the interfaces, over the simulated world ----

type simControl struct{ s *sim }

func (c simControl) View(ctx context.Context) (*meta.View, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.table.View(), nil // immutable: later commands do not change it
}

func (c simControl) SetReplicas(ctx context.Context, cmd meta.SetSegmentReplicas) error {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.step(ctx); err != nil {
		return err
	}
	s.sets[cmd.ID]++
	cur, ok := s.table.Segment(cmd.ID)
	if !ok {
		return fmt.Errorf("sim: unknown segment %s", cmd.ID)
	}
	if s.chance(0.1, "stale", cmd.ID) && len(cur.Replicas) > 1 {
		// Someone else changed the set first: rotate it.
		rot := append(slices.Clone(cur.Replicas[1:]), cur.Replicas[0])
		if err := s.apply(meta.SetSegmentReplicas{ID: cmd.ID, Expected: cur.Replicas, Replicas: rot}); err != nil {
			s.violate("rotate %s: %v", cmd.ID, err)
		}
		cur, _ = s.table.Segment(cmd.ID)
	}
	if meta.SameReplicas(cur.Replicas, cmd.Expected) {
		s.checkCommand(cur, cmd)
	}
	return s.apply(cmd)
}

// checkCommand checks invariants 1 and 2 on a command about to be recorded.
func (s *sim) checkCommand(cur meta.Segment, cmd meta.SetSegmentReplicas) {
	if !cur.Sealed {
		s.violate("command for active segment %s", cmd.ID)
	}
	if err := meta.ValidateReplicas(cmd.Replicas); err != nil {
		s.violate("command %s: %v", cmd.ID, err)
	}
	rf := s.snap().ReplicationFactor
	if len(cmd.Replicas) > max(rf, len(cmd.Expected)) {
		s.violate("command %s: %v exceeds rf %d", cmd.ID, cmd.Replicas, rf)
	}
	if len(cmd.Replicas) < min(len(cmd.Expected), rf) {
		s.violate("command %s: %v -> %v drops a copy without replacement", cmd.ID, cmd.Expected, cmd.Replicas)
	}
	for _, r := range cmd.Replicas {
		if slices.Contains(cmd.Expected, r) {
			continue
		}
		b := s.brokers[r]
		c := b.copies[cmd.ID]
		if !c.intact(cur) || c.size < cur.ByteSize+simFooter {
			s.violate("command %s adds broker %d without a complete copy (%+v)", cmd.ID, r, c)
		}
	}
}

// step counts a mutating call and plays the leadership loss.
func (s *sim) step(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.calls++
	if s.cancelAfter > 0 && s.calls >= s.cancelAfter {
		s.cancel()
		return ctx.Err()
	}
	return nil
}

type simBrokers struct{ s *sim }

func (b simBrokers) Probe(ctx context.Context, id meta.BrokerID, index uint64) (heal.ProbeReport, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	br := s.brokers[id]
	if br == nil || !br.up {
		return heal.ProbeReport{}, errors.New("sim: broker down")
	}
	snap := s.snap()
	if s.chance(0.03, "latchunknown", id) {
		// A broker that cannot read its latch state cannot answer: the
		// seed's "latch state readable" is "the broker answered".
		return heal.ProbeReport{}, errors.New("sim: latch state unreadable")
	}
	r := heal.ProbeReport{Broker: id, Index: snap.Index}
	for _, seg := range snap.Segments {
		if !seg.Sealed || !seg.HasReplica(id) {
			continue
		}
		r.Copies++
		c := br.copies[seg.ID]
		var f heal.Fact
		switch {
		case s.chance(0.02, "timeout", id, seg.ID):
			f.Flags = heal.FactTimedOut
		case c == nil:
			f.Flags = heal.FactMissing
		case c.latched:
			f.Flags = heal.FactLatched
		default:
			f.Size = c.size
			if c.corrupt {
				f.Flags |= heal.FactCorrupt
			}
			if c.confirmed {
				f.Flags |= heal.FactConfirmed
			}
		}
		r.Add(&seg, f)
	}
	return r, nil
}

// Backfill resumes at the target's durable end, as the plugin's target
// does: it opens its copy first (a latched one answers ErrNoDurableEnd),
// then reads the source.
func (b simBrokers) Backfill(ctx context.Context, target, source meta.BrokerID, seg meta.Segment) (int64, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.step(ctx); err != nil {
		return 0, err
	}
	s.reads[seg.ID]++
	if s.blockFills {
		started := s.fillStarted
		s.fillStarted = nil
		s.mu.Unlock()
		if started != nil {
			started()
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second): // never cancelled: fail, do not hang
		}
		s.mu.Lock()
		if ctx.Err() == nil {
			return 0, errors.New("sim: blocked backfill never cancelled")
		}
		return 0, ctx.Err()
	}
	tb, sb := s.brokers[target], s.brokers[source]
	if !tb.up {
		return 0, errors.New("sim: target down")
	}
	tc := tb.copies[seg.ID]
	if tc != nil && tc.latched {
		return 0, fmt.Errorf("sim: target %d copy of %s latched: %w", target, seg.ID, heal.ErrNoDurableEnd)
	}
	from := int64(0) // the target's durable end
	if tc != nil {
		from = min(tc.size, seg.ByteSize)
	}
	if !sb.up {
		return 0, errors.New("sim: source down")
	}
	sc := sb.copies[seg.ID]
	if !sc.intact(seg) {
		return 0, fmt.Errorf("sim: source %d has no intact copy of %s: %w", source, seg.ID, heal.ErrSourceRefused)
	}
	if s.chance(0.05, "backfillfail", seg.ID, target) {
		tb.copies[seg.ID] = &simCopy{size: from + (seg.ByteSize-from)/2} // partial, whole frames
		return (seg.ByteSize - from) / 2, errors.New("sim: transfer broke")
	}
	tb.copies[seg.ID] = &simCopy{size: seg.ByteSize + simFooter, confirmed: true}
	return seg.ByteSize + simFooter - from, nil
}

// upBroker takes one simulated step and returns broker id if it is up.
// The caller holds s.mu.
func (s *sim) upBroker(ctx context.Context, id meta.BrokerID) (*simBroker, error) {
	if err := s.step(ctx); err != nil {
		return nil, err
	}
	br := s.brokers[id]
	if !br.up {
		return nil, errors.New("sim: broker down")
	}
	return br, nil
}

func (b simBrokers) settleOne(ctx context.Context, id meta.BrokerID, seg meta.Segment) error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	br, err := s.upBroker(ctx, id)
	if err != nil {
		return err
	}
	c := br.copies[seg.ID]
	if c == nil || c.latched || c.size < seg.ByteSize {
		return errors.New("sim: cannot settle")
	}
	c.size = seg.ByteSize + simFooter
	return nil
}

func (b simBrokers) confirmOne(ctx context.Context, id meta.BrokerID, seg meta.Segment) error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	br, err := s.upBroker(ctx, id)
	if err != nil {
		return err
	}
	c := br.copies[seg.ID]
	if c == nil || c.latched || c.size != seg.ByteSize+simFooter {
		s.violate("confirm %s@%d of a copy not settled: %+v", seg.ID, id, c)
		return errors.New("sim: not settled")
	}
	c.confirmed = true
	return nil
}

func (b simBrokers) Delete(ctx context.Context, id meta.BrokerID, seg meta.SegmentID) error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.step(ctx); err != nil {
		return err
	}
	cur, ok := s.table.Segment(seg)
	if ok && cur.HasReplica(id) {
		s.violate("delete %s@%d while the recorded set %v names it", seg, id, cur.Replicas)
	}
	br := s.brokers[id]
	if !br.up {
		return errors.New("sim: broker down")
	}
	if c := br.copies[seg]; ok && c.intact(cur) && !s.intactElsewhere(cur, id) {
		s.violate("delete %s@%d: the last intact copy", seg, id)
	}
	if ok && !s.intactElsewhere(cur, 0) && !br.copies[seg].intact(cur) {
		s.violate("delete %s@%d: a copy of a segment with no intact copy", seg, id)
	}
	if c := br.copies[seg]; c != nil && c.corrupt {
		s.stats["deleted_corrupt"]++
	}
	delete(br.copies, seg)
	return nil
}

// ---- faults ----

// intactElsewhere reports whether seg has an intact, unlatched copy on a
// replica other than skip whose broker is up or can come back.
func (s *sim) intactElsewhere(seg meta.Segment, skip meta.BrokerID) bool {
	for _, r := range seg.Replicas {
		if r == skip {
			continue
		}
		if c := s.brokers[r].copies[seg.ID]; c.intact(seg) {
			return true
		}
	}
	return false
}

// fault injects one random fault. Copy faults keep at least one intact copy
// of every segment, so that full replication stays reachable.
func (s *sim) fault() {
	ids := mapsKeys(s.brokers)
	slices.Sort(ids)
	snap := s.snap()
	var sealed []meta.Segment
	for _, sg := range snap.Segments {
		if sg.Sealed {
			sealed = append(sealed, sg)
		}
	}
	sg := sealed[s.rng.IntN(len(sealed))]
	r := sg.Replicas[s.rng.IntN(len(sg.Replicas))]
	c := s.brokers[r].copies[sg.ID]
	switch k := s.rng.IntN(10); {
	case k < 2: // a broker leaves (at most two down at once)
		down := 0
		for _, id := range ids {
			if !s.brokers[id].up {
				down++
			}
		}
		if down < 2 {
			s.brokers[ids[s.rng.IntN(len(ids))]].up = false
		}
	case k < 4: // a broker returns, restarted: latches cleared
		for _, id := range ids {
			b := s.brokers[id]
			if !b.up {
				b.up = true
				for _, c := range b.copies {
					c.latched = false
				}
				break
			}
		}
	case k == 4 && c != nil && s.intactElsewhere(sg, r):
		delete(s.brokers[r].copies, sg.ID)
	case k == 5 && c != nil && s.intactElsewhere(sg, r):
		c.size = s.rng.Int64N(sg.ByteSize)
		c.confirmed = false
	case k == 6 && c != nil:
		c.size += 1 + s.rng.Int64N(4096)
		c.confirmed = false
	case k == 7 && c != nil && s.intactElsewhere(sg, r):
		c.latched = true
	case k == 8: // lose leadership during the next pass
		s.cancelAfter = 1 + s.rng.IntN(6)
	case k == 9 && c != nil && s.intactElsewhere(sg, r): // in-place corruption
		if s.rng.IntN(2) == 0 {
			c.corrupt = true // the scrubber found it
		} else {
			c.rotten = true // not yet: a backfill from it is refused
		}
	}
}

func mapsKeys[K comparable, V any](m map[K]V) []K {
	var ks []K
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// ---- checks ----

// converged reports whether every sealed segment has rf replicas on up
// brokers, each an intact, confirmed, unlatched copy; and a reason if not.
func (s *sim) converged() (bool, string) {
	snap := s.snap()
	for _, sg := range snap.Segments {
		if !sg.Sealed || sg.ID == s.lostSeg {
			continue
		}
		if len(sg.Replicas) < snap.ReplicationFactor {
			return false, fmt.Sprintf("%s has %v", sg.ID, sg.Replicas)
		}
		for _, r := range sg.Replicas {
			b := s.brokers[r]
			c := b.copies[sg.ID]
			if !b.up || !c.intact(sg) || !c.confirmed || c.size != sg.ByteSize+simFooter {
				return false, fmt.Sprintf("%s@%d up=%v copy=%+v", sg.ID, r, b.up, c)
			}
		}
	}
	return true, ""
}

// checkActive: active segments keep their initial set and copies.
func (s *sim) checkTick(rep heal.Report, initial map[meta.SegmentID][]meta.BrokerID) {
	snap := s.snap()
	for _, sg := range snap.Segments {
		if err := sg.Validate(); err != nil {
			s.violate("segment invalid: %v", err)
		}
		if !sg.Sealed && !meta.SameReplicas(sg.Replicas, initial[sg.ID]) {
			s.violate("active segment %s changed: %v -> %v", sg.ID, initial[sg.ID], sg.Replicas)
		}
		if sg.Sealed && len(sg.Replicas) < snap.ReplicationFactor {
			s.violate("segment %s lost replicas: %v", sg.ID, sg.Replicas)
		}
	}
	var lostBytes int64
	for _, f := range rep.Failed {
		if f.Reason == heal.ReasonNone {
			s.violate("failure without a reason: %+v", f)
		}
		if (f.Reason == heal.AllReplicasDead || f.Reason == heal.NoIntactSource) && !rep.IsLost(f.Segment) {
			s.violate("%s failed %s but is not reported lost: %+v", f.Segment, f.Reason, rep.Lost)
		}
	}
	for i, l := range rep.Lost {
		lostBytes += l.ByteSize
		if r := rep.FailedReason(l.Segment); r != l.Reason {
			s.violate("lost %s (%s) failed %s", l.Segment, l.Reason, r)
		}
		if slices.ContainsFunc(rep.Lost[:i], func(m heal.LostSegment) bool { return m.Segment == l.Segment }) {
			s.violate("lost %s reported twice in one pass", l.Segment)
		}
	}
	if lostBytes != rep.LostBytes {
		s.violate("lost bytes %d, entries sum to %d", rep.LostBytes, lostBytes)
	}
	if s.lostSeg != "" {
		if n := s.reads[s.lostSeg] + s.sets[s.lostSeg]; n != 0 {
			s.violate("%d reads or commands for %s, which has no intact copy", n, s.lostSeg)
		}
		switch {
		case rep.Index == 0: // the pass failed before planning
		case rep.IsLost(s.lostSeg) && s.lostSince < 0:
			s.lostSince = s.tick
		case !rep.IsLost(s.lostSeg) && s.lostSince >= 0:
			s.violate("%s reported lost since tick %d, not now: failed %+v", s.lostSeg, s.lostSince, rep.Failed)
		}
	}
}

// scrub plays the brokers' scrubbers: a rotten copy is found (reported
// corrupt from then on) with some chance each tick, and surely once faults
// stop.
func (s *sim) scrub() {
	for _, id := range slices.Sorted(maps.Keys(s.brokers)) {
		b := s.brokers[id]
		for _, seg := range slices.Sorted(maps.Keys(b.copies)) {
			if c := b.copies[seg]; c.rotten && (!s.faulty || s.chance(0.2, "scrub", id, seg)) {
				c.rotten, c.corrupt = false, true
				s.stats["scrubbed"]++
			}
		}
	}
}

func (s *sim) count(rep heal.Report) {
	if s.stats == nil {
		s.stats = map[string]int{}
	}
	s.stats["healed"] += len(rep.Healed)
	s.stats["resumed"] += len(rep.Resumed)
	s.stats["settled"] += len(rep.Settled)
	s.stats["confirmed"] += len(rep.Confirmed)
	s.stats["deleted"] += len(rep.Deleted)
	s.stats["stale"] += len(rep.Stale)
	s.stats["deferred"] += rep.Deferred
	s.stats["lost"] += len(rep.Lost)
	s.stats["refused"] += rep.Refused
	if rep.Aborted {
		s.stats["aborted"]++
	}
	if rep.HoldReason != "" {
		s.stats["held"]++
	}
	for _, f := range rep.Failed {
		s.stats["failed:"+f.Reason.String()]++
	}
}

func runSim(t testing.TB, seed uint64) map[string]int {
	const (
		nBrokers, nSegs, rf = 6, 40, 3
		faultTicks          = 60
		bound               = 40 // ticks to converge once faults stop
	)
	s := newSim(t, seed, nBrokers, nSegs, rf)
	// One segment lost from the start: every copy corrupt.
	for _, sg := range s.snap().Segments {
		if sg.Sealed && s.rng.IntN(4) == 0 {
			s.lostSeg, s.lostSince = sg.ID, -1
			for _, r := range sg.Replicas {
				s.brokers[r].copies[sg.ID].corrupt = true
			}
			break
		}
	}
	initial := map[meta.SegmentID][]meta.BrokerID{}
	for _, sg := range s.snap().Segments {
		initial[sg.ID] = sg.Replicas
	}
	newCoord := func() *Coordinator {
		c, err := New(Config{
			Metadata: simControl{s}, Prober: simBrokers{s}, Backfiller: simBrokers{s}, Settler: simBrokers{s}, Deleter: simBrokers{s},
			Policy:      heal.Policy{Grace: 3 * time.Second, SettleBatch: 16, MaxBackfillsPerBroker: 4, MaxBackfills: 12},
			Now:         func() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.now },
			Concurrency: 1, // deterministic: steps run one at a time in plan order
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	coord := newCoord()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (rerun: go test ./pass -run TestSimulation -sim.seed=%d): %s", seed, seed, fmt.Sprintf(format, args...))
	}
	s.faulty = true
	done := -1
	for tick := 0; tick < faultTicks+bound; tick++ {
		s.mu.Lock()
		s.tick = tick
		s.now = s.now.Add(time.Second)
		if tick == faultTicks {
			// Faults stop: every broker comes back but one, which stays
			// lost if every segment keeps an intact copy without it.
			s.faulty = false
			s.cancelAfter = 0
			for _, b := range s.brokers {
				if !b.up {
					b.up = true
					for _, c := range b.copies {
						c.latched = false
					}
				}
			}
			victim := meta.BrokerID(1 + s.rng.IntN(nBrokers))
			ok := true
			for _, sg := range s.snap().Segments {
				if sg.Sealed && sg.ID != s.lostSeg && !s.intactElsewhere(sg, victim) {
					ok = false
				}
			}
			s.brokers[victim].up = !ok
		}
		if s.faulty {
			for n := s.rng.IntN(3); n > 0; n-- {
				s.fault()
			}
		}
		s.scrub()
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel, s.calls = cancel, 0
		lostLeader := s.cancelAfter > 0
		s.mu.Unlock()

		rep, err := coord.Pass(ctx)
		midPass := ctx.Err() != nil
		cancel()

		s.mu.Lock()
		if lostLeader {
			s.stats["leader_lost"]++
			if midPass {
				s.stats["leader_lost_mid_pass"]++
				if err == nil || !rep.Aborted {
					s.violate("pass went on after leadership was lost: err=%v aborted=%v", err, rep.Aborted)
				}
			}
			s.cancelAfter = 0
			if err == nil && rep.Aborted {
				s.violate("aborted pass without an error")
			}
			coord = newCoord() // a new leader takes over
		}
		s.checkTick(rep, initial)
		if lostLeader {
			s.lostSince = -1 // the new leader has no memory of the loss
		}
		s.count(rep)
		if len(s.violations) > 0 {
			s.mu.Unlock()
			fail("%v", s.violations)
		}
		if tick >= faultTicks {
			if ok, _ := s.converged(); ok && done < 0 {
				done = tick
			}
		}
		s.mu.Unlock()
	}
	if done < 0 {
		_, why := s.converged()
		for _, f := range coord.Last().Failed {
			t.Logf("failed: %+v", f)
		}
		fail("not converged %d ticks after faults stopped: %s; last report %s", bound, why, coord.Last().String())
	}
	if last := coord.Last(); s.lostSeg != "" && !last.IsLost(s.lostSeg) {
		fail("%s, every copy corrupt, not reported lost on the last pass: %s", s.lostSeg, coord.Last().String())
	}
	s.stats["converged_after"] += done - faultTicks
	return s.stats
}

func (b simBrokers) Settle(ctx context.Context, id meta.BrokerID, segs []meta.Segment, errs []error) error {
	return eachCopy(ctx, id, segs, errs, b.settleOne)
}

func (b simBrokers) Confirm(ctx context.Context, id meta.BrokerID, segs []meta.Segment, errs []error) error {
	return eachCopy(ctx, id, segs, errs, b.confirmOne)
}
