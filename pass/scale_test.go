package pass

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/benchenv"
)

// The simulation at full size: the real Coordinator and Planner
// over a compact in-memory cluster. Each broker holds "every copy the
// metadata assigns me is intact and confirmed" plus a small map of
// exceptions, so 10^7 segments cost the metadata and nothing per copy.
// It runs only on request: BenchmarkScale, or TestScaleSimulation with
// -scale.segments=N.

var scaleSegments = flag.Int("scale.segments", 0, "run TestScaleSimulation over this many segments (0: skip)")

const (
	scaleRF     = 3
	scaleFooter = 40
	scaleTick   = 2 * time.Second
	scaleDead   = 13 // the broker the schedule kills for good
)

// scaleCopy is a broker's copy that is not intact and confirmed.
type scaleCopy struct {
	kind heal.Kind // Missing, Short, Overrun (settled or not), Latched, Corrupt
	size int64
}

type scaleWorld struct {
	mu     sync.Mutex
	table  *meta.Table // the real state machine; ids "s%010d" of their position
	up     []bool      // by broker id
	exc    []map[meta.SegmentID]scaleCopy
	filled map[heal.CopyRef]bool // backfilled, not yet recorded
	held   []int                 // by broker id: the segments whose recorded set names it
	now    time.Time

	wire, facts atomic.Int64 // probe answers' JSON bytes and facts, this pass
	violations  []string
}

// newScaleWorld builds, in a meta.Table (through meta.Builder, as a
// restore does), nSeg sealed segments on nb brokers in 10 racks, the
// replicas of segment i spread by i.
func newScaleWorld(tb testing.TB, nb, nSeg int) *scaleWorld {
	w := &scaleWorld{up: make([]bool, nb+1), exc: make([]map[meta.SegmentID]scaleCopy, nb+1), filled: map[heal.CopyRef]bool{}, held: make([]int, nb+1), now: t0}
	var brokers []meta.Broker
	for i := 1; i <= nb; i++ {
		brokers = append(brokers, meta.Broker{ID: meta.BrokerID(i), Rack: "r" + strconv.Itoa(i%10)})
		w.up[i] = true
		w.exc[i] = map[meta.SegmentID]scaleCopy{}
	}
	bld := meta.NewBuilder(nil)
	r := make([]meta.BrokerID, scaleRF)
	for i := 0; i < nSeg; i++ {
		k := i / nb
		r0 := i % nb
		r1 := (r0 + 1 + k%(nb-1)) % nb
		r2 := (r0 + 1 + (k+nb/2)%(nb-1)) % nb
		r[0], r[1], r[2] = meta.BrokerID(r0+1), meta.BrokerID(r1+1), meta.BrokerID(r2+1)
		for _, b := range r {
			w.held[b]++
		}
		seg := meta.Segment{ID: meta.SegmentID(fmt.Sprintf("s%010d", i)), StartOffset: uint64(i) * 1000,
			Length: 1000, ByteSize: 1 << 20, Sealed: true, Checksum: meta.CRC32C(uint32(i)), Replicas: r, Version: 2}
		if err := bld.Add(&seg); err != nil {
			tb.Fatal(err)
		}
	}
	w.table = bld.Finish(1, scaleRF, brokers)
	return w
}

// find returns a copy of the segment named id, or nil. The caller holds
// w.mu. It does not take a View: a View marks the table's chunks shared,
// and the next Apply would copy them (the plugin's FSM takes one View per
// pass, not one per command).
func (w *scaleWorld) find(id meta.SegmentID) *meta.Segment {
	seg, ok := w.table.Segment(id)
	if !ok {
		return nil
	}
	return &seg
}

// intact reports whether b's copy of seg holds the whole, valid bytes.
func (w *scaleWorld) intact(b meta.BrokerID, seg *meta.Segment) bool {
	c, ok := w.exc[b][seg.ID]
	return !ok || c.kind == heal.Overrun
}

func (w *scaleWorld) violate(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

// ---- Metadata ----

type scaleControl struct{ w *scaleWorld }

func (c scaleControl) View(ctx context.Context) (*meta.View, error) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.table.View(), ctx.Err()
}

func (c scaleControl) SetReplicas(ctx context.Context, cmd meta.SetSegmentReplicas) error {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	seg := w.find(cmd.ID)
	if seg == nil {
		return fmt.Errorf("scale: unknown segment %s", cmd.ID)
	}
	if meta.SameReplicas(seg.Replicas, cmd.Expected) {
		for _, r := range cmd.Replicas {
			if !seg.HasReplica(r) {
				if !w.filled[heal.CopyRef{Segment: cmd.ID, Broker: r}] || !w.intact(r, seg) {
					w.violate("command %s adds broker %d without a complete copy", cmd.ID, r)
				}
				delete(w.filled, heal.CopyRef{Segment: cmd.ID, Broker: r})
			}
		}
	}
	if err := w.table.Apply(w.table.Index()+1, cmd); err != nil {
		return err
	}
	for _, r := range seg.Replicas {
		if !slices.Contains(cmd.Replicas, r) {
			w.held[r]--
		}
	}
	for _, r := range cmd.Replicas {
		if !seg.HasReplica(r) {
			w.held[r]++
		}
	}
	return nil
}

// ---- Brokers ----

type scaleBrokers struct{ w *scaleWorld }

var errScaleDown = errors.New("scale: broker down")

// Probe answers from the broker's exceptions only: every other copy the
// metadata assigns it is intact and confirmed (Intact), so Add would drop it.
func (p scaleBrokers) Probe(ctx context.Context, id meta.BrokerID, index uint64) (heal.ProbeReport, error) {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if int(id) >= len(w.up) || !w.up[id] {
		return heal.ProbeReport{}, errScaleDown
	}
	view := w.table.View()
	r := heal.ProbeReport{Broker: id, Index: view.Index(), Copies: view.Held(id)}
	for sid, c := range w.exc[id] {
		seg := w.find(sid)
		if seg == nil || !seg.HasReplica(id) {
			continue
		}
		f := heal.Fact{Size: c.size, Dev: 1, Ino: uint64(seg.StartOffset) + 1}
		switch c.kind {
		case heal.Missing:
			f = heal.Fact{Flags: heal.FactMissing}
		case heal.Latched:
			f = heal.Fact{Flags: heal.FactLatched, Why: "store: copy latched: input/output error"}
		case heal.Corrupt:
			f.Flags = heal.FactCorrupt
		}
		r.Add(seg, f)
	}
	slices.SortFunc(r.Facts, func(a, b heal.Fact) int { return strings.Compare(string(a.Segment), string(b.Segment)) })
	b, err := json.Marshal(r)
	if err != nil {
		return heal.ProbeReport{}, err
	}
	w.wire.Add(int64(len(b)))
	w.facts.Add(int64(len(r.Facts)))
	return r, nil
}

// Backfill resumes at the target's durable end; a latched target copy
// answers ErrNoDurableEnd.
func (p scaleBrokers) Backfill(ctx context.Context, target, source meta.BrokerID, seg meta.Segment) (int64, error) {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if !w.up[target] || !w.up[source] {
		return 0, errScaleDown
	}
	var from int64 // the target's durable end
	switch c, ok := w.exc[target][seg.ID]; {
	case !ok || c.kind == heal.Overrun:
		from = seg.ByteSize
	case c.kind == heal.Short:
		from = c.size
	case c.kind == heal.Latched:
		return 0, fmt.Errorf("scale: target %d copy of %s latched: %w", target, seg.ID, heal.ErrNoDurableEnd)
	}
	if !w.intact(source, &seg) {
		return 0, fmt.Errorf("scale: source %d of %s: %w", source, seg.ID, heal.ErrSourceRefused)
	}
	delete(w.exc[target], seg.ID) // intact, confirmed by the backfill
	w.filled[heal.CopyRef{Segment: seg.ID, Broker: target}] = true
	return seg.ByteSize + scaleFooter - from, nil
}

func (p scaleBrokers) settleOne(ctx context.Context, id meta.BrokerID, seg meta.Segment) error {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.exc[id][seg.ID]
	if !w.up[id] || !ok || c.kind != heal.Overrun {
		return errors.New("scale: cannot settle")
	}
	w.exc[id][seg.ID] = scaleCopy{kind: heal.Overrun, size: seg.ByteSize + scaleFooter}
	return nil
}

func (p scaleBrokers) confirmOne(ctx context.Context, id meta.BrokerID, seg meta.Segment) error {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.exc[id][seg.ID]
	if !w.up[id] || !ok || c.kind != heal.Overrun || c.size != seg.ByteSize+scaleFooter {
		w.violate("confirm %s@%d of a copy not settled: %+v", seg.ID, id, c)
		return errors.New("scale: not settled")
	}
	delete(w.exc[id], seg.ID)
	return nil
}

func (p scaleBrokers) Delete(ctx context.Context, id meta.BrokerID, sid meta.SegmentID) error {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if seg := w.find(sid); seg != nil && seg.HasReplica(id) {
		w.violate("delete %s@%d while the recorded set %v names it", sid, id, seg.Replicas)
	}
	if !w.up[id] {
		return errScaleDown
	}
	delete(w.exc[id], sid)
	return nil
}

// ---- the schedule ----

// scaleFault damages n copies of distinct segments, each of which keeps
// its other copies intact; kinds in turn: latched, short, overrun,
// missing, corrupt.
func (w *scaleWorld) scaleFault(rng *rand.Rand, n int) {
	kinds := []heal.Kind{heal.Latched, heal.Short, heal.Overrun, heal.Missing, heal.Corrupt}
	view := w.table.View()
	for k := 0; k < n; {
		seg := view.At(rng.IntN(view.Len()))
		clean := true
		for _, r := range seg.Replicas {
			if _, ok := w.exc[r][seg.ID]; ok || !w.up[r] {
				clean = false
			}
		}
		if !clean {
			continue
		}
		b := seg.Replicas[rng.IntN(len(seg.Replicas))]
		c := scaleCopy{kind: kinds[k%len(kinds)]}
		switch c.kind {
		case heal.Short:
			c.size = seg.ByteSize / 2
		case heal.Overrun:
			c.size = seg.ByteSize + scaleFooter + 4096
		case heal.Corrupt:
			c.size = seg.ByteSize + scaleFooter
		}
		w.exc[b][seg.ID] = c
		k++
	}
}

// scalePass is what one pass cost and did.
type scalePass struct {
	pass              int
	phase             string
	wall, cpu         time.Duration
	allocs, bytes     uint64
	wire, facts       int64
	actions, commands int
	backfills         int
	deadHeld          int // the copies the recorded sets gave scaleDead before the pass
	report            heal.Report
}

func (p scalePass) String() string {
	return fmt.Sprintf("pass %2d %-8s wall %7.1fms cpu %7.1fms allocs %8d alloc %7.1fMB wire %8dB facts %5d backfills %5d commands %5d dead %v failed %d unsettled %d load %s",
		p.pass, p.phase, ms(p.wall), ms(p.cpu), p.allocs, float64(p.bytes)/1e6, p.wire, p.facts, p.backfills, p.commands,
		p.report.Dead, len(p.report.Failed), len(p.report.Unsettled), loadString())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// scaleCluster is a world and the leader's Coordinator over it.
type scaleCluster struct {
	w     *scaleWorld
	coord *Coordinator
	pass  int
	rng   *rand.Rand
	// beforePass and onPass, when set, are called before and after each
	// pass the schedule runs (BenchmarkScale measures through them).
	beforePass func()
	onPass     func(scalePass)
}

func newScaleCluster(tb testing.TB, nb, nSeg int) *scaleCluster {
	w := newScaleWorld(tb, nb, nSeg)
	c := &scaleCluster{w: w, rng: rand.New(rand.NewPCG(17, 17))}
	coord, err := New(Config{
		Metadata: scaleControl{w}, Prober: scaleBrokers{w}, Backfiller: scaleBrokers{w}, Settler: scaleBrokers{w}, Deleter: scaleBrokers{w},
		Policy:      heal.Policy{Grace: 5 * time.Second, SettleBatch: 256, MaxBackfillsPerBroker: 64, MaxBackfills: 20_000},
		Now:         func() time.Time { w.mu.Lock(); defer w.mu.Unlock(); return w.now },
		Concurrency: 8, PerBroker: 8, ReturnCheck: -1,
	})
	if err != nil {
		tb.Fatal(err)
	}
	c.coord = coord
	return c
}

// run runs one pass and measures it (the in-memory brokers' work, O(their
// exceptions), runs in this process and is counted too).
func (c *scaleCluster) run(tb testing.TB, phase string) scalePass {
	w := c.w
	w.mu.Lock()
	w.now = w.now.Add(scaleTick)
	deadHeld := w.held[scaleDead]
	w.mu.Unlock()
	w.wire.Store(0)
	w.facts.Store(0)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0, t0 := benchenv.ProcessCPU(), time.Now()
	rep, err := c.coord.Pass(context.Background())
	wall, cpu := time.Since(t0), benchenv.ProcessCPU()-cpu0
	runtime.ReadMemStats(&m1)
	if err != nil {
		tb.Fatalf("pass %d: %v", c.pass, err)
	}
	if len(w.violations) > 0 {
		tb.Fatalf("pass %d: %v", c.pass, w.violations)
	}
	c.pass++
	return scalePass{pass: c.pass, phase: phase, wall: wall, cpu: cpu, allocs: m1.Mallocs - m0.Mallocs, bytes: m1.TotalAlloc - m0.TotalAlloc,
		wire: w.wire.Load(), facts: w.facts.Load(), commands: rep.Commands, backfills: rep.Backfills, deadHeld: deadHeld, report: rep}
}

// healthy reports whether the last pass found nothing to do.
func (p scalePass) healthy() bool {
	r := &p.report
	return r.Anomalies == 0 && r.UnderReplicated == 0 && len(r.Failed) == 0 && len(r.Unsettled) == 0 && len(r.Dead) == 0 && len(r.Suspect) == 0
}

// schedule runs the fault schedule: healthy passes; a broker down for one
// pass (within the grace delay) and back; a broker dead for good and
// `copies` damaged copies (latched, short, overrun, missing, corrupt);
// then passes until the cluster is healthy again (at most maxPasses). It
// returns every pass's figures.
func (c *scaleCluster) schedule(tb testing.TB, copies, maxPasses int) []scalePass {
	w := c.w
	var out []scalePass
	run := func(phase string) scalePass {
		if c.beforePass != nil {
			c.beforePass()
		}
		p := c.run(tb, phase)
		if c.onPass != nil {
			c.onPass(p)
		}
		return p
	}
	log := func(p scalePass) { out = append(out, p); tb.Log(p) }
	for i := 0; i < 2; i++ {
		log(run("healthy"))
	}
	w.mu.Lock()
	w.up[7] = false // back before its grace delay runs out
	w.mu.Unlock()
	log(run("suspect"))
	w.mu.Lock()
	w.up[7], w.up[scaleDead] = true, false
	w.scaleFault(c.rng, copies)
	w.mu.Unlock()
	for i := 0; i < maxPasses; i++ {
		p := run("faulty")
		log(p)
		if p.actions == 0 && p.commands == 0 && p.backfills == 0 && len(p.report.Failed) == 0 && len(p.report.Unsettled) == 0 &&
			p.report.UnderReplicated == 0 && p.report.Anomalies == 0 {
			return out
		}
	}
	tb.Fatalf("not healed after %d passes: %s", maxPasses, out[len(out)-1].report.String())
	return out
}

// TestScaleSimulation runs the schedule over -scale.segments segments on
// 1,000 brokers (skipped without the flag): the cluster heals, healthy
// passes answer with no facts, probe answers grow with the damage, and the
// dead broker's copies are all recorded away within ceil(copies /
// MaxBackfills) passes of the one that finds it dead (the cap bounds the
// drain, not the leader).
func TestScaleSimulation(t *testing.T) {
	if *scaleSegments == 0 {
		t.Skip("run with -scale.segments=N (10000000 for the full size)")
	}
	c := newScaleCluster(t, 1000, *scaleSegments)
	var found scalePass // the pass that found scaleDead dead
	drained := 0        // the passes from it to the last of its copies recorded away
	c.onPass = func(p scalePass) {
		if found.pass == 0 && slices.Contains(p.report.Dead, scaleDead) {
			found = p
		}
		if found.pass != 0 && drained == 0 && c.w.held[scaleDead] == 0 {
			drained = p.pass - found.pass + 1
		}
	}
	passes := c.schedule(t, 1000, 60)
	if floor := ceilDiv(found.deadHeld, c.coord.cfg.Policy.MaxBackfills); found.pass == 0 || drained == 0 || drained > floor {
		t.Errorf("broker %d found dead at pass %d with %d copies, drained in %d passes, want 1 to ceil(copies/MaxBackfills) = %d",
			scaleDead, found.pass, found.deadHeld, drained, floor)
	}
	if p := passes[0]; p.facts != 0 || !p.healthy() {
		t.Errorf("healthy pass: %d facts, report %s", p.facts, p.report.String())
	}
	if w := c.w; w.up[scaleDead] {
		t.Fatalf("broker %d came back", scaleDead)
	}
	for _, seg := range c.w.table.View().All() {
		if seg.HasReplica(scaleDead) || len(seg.Replicas) != scaleRF {
			t.Fatalf("%s: replicas %v", seg.ID, seg.Replicas)
		}
	}
	c.w.mu.Lock()
	c.w.up[scaleDead] = true
	c.w.mu.Unlock()
	after := c.run(t, "healthy")
	if after.facts != 0 || !after.healthy() || after.backfills != 0 {
		t.Errorf("after healing: %d facts, report %s", after.facts, after.report.String())
	}
}

// scaleRow is one size of BenchmarkScale: the same 1,000 brokers, RF,
// fault schedule and policy at 10^6 and 10^7 segments, so that the dead
// broker holds 3,000 and 30,000 copies and its pass plans 3,000 and
// 20,000 (the MaxBackfills cap) commands. A pass linear in what it
// handles costs at most ~10x more at 10^7; a quadratic in the commands
// ~44x (worst-x1e6).
type scaleRow struct {
	name string
	nSeg int
}

var scaleRows = []scaleRow{{"segments=1e6", 1_000_000}, {"segments=1e7", 10_000_000}}

var scaleWorstProfile = flag.String("scale.worstprofile", "", "write a CPU profile of each BenchmarkScale round's worst pass to this path suffixed with .<segments> (not with -cpuprofile)")

// scaleRound is one round of a BenchmarkScale row: a fresh world, its fault
// schedule, then healthy passes.
type scaleRound struct {
	c            *scaleCluster
	perSeg       float64 // live heap of the world per segment
	withPl       float64 // and with the leader's planner scratch, after the schedule
	worst, next  scalePass
	load1        float64 // at the end of the worst pass
	drainPasses  int     // passes from finding the dead broker to its last copy recorded away
	drainCPU     time.Duration
	maxBackfills int
}

var scaleBench struct {
	round  map[string]*scaleRound
	worsts map[string][]float64 // each round's worst-pass CPU seconds, by row
}

// newScaleRound builds a world of nSeg segments, runs the fault schedule
// and one warm healthy pass, and measures them. The last round's world is
// dropped first: two worlds of 10^7 segments would not fit side by side.
func newScaleRound(b *testing.B, nSeg int) *scaleRound {
	scaleBench.round = nil
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	r := &scaleRound{c: newScaleCluster(b, 1000, nSeg)}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	r.perSeg = float64(m1.HeapAlloc-m0.HeapAlloc) / float64(nSeg)
	w := r.c.w
	profiling := false
	if *scaleWorstProfile != "" {
		// Every pass until the worst is profiled, each into the same file:
		// the worst pass's profile is the one left.
		r.c.beforePass = func() {
			if r.worst.pass != 0 {
				return
			}
			f, err := os.Create(fmt.Sprintf("%s.%d", *scaleWorstProfile, nSeg))
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
			profiling = true
		}
	}
	r.c.onPass = func(p scalePass) {
		if profiling {
			pprof.StopCPUProfile()
			profiling = false
		}
		switch {
		case r.worst.pass == 0 && slices.Contains(p.report.Dead, scaleDead):
			r.worst, r.load1 = p, -1
			if l, err := benchenv.ReadLoad(); err == nil {
				r.load1 = l.One
			}
		case r.worst.pass != 0 && p.pass == r.worst.pass+1:
			r.next = p
		}
		if r.worst.pass != 0 && r.drainPasses == 0 {
			r.drainCPU += p.cpu
			if w.held[scaleDead] == 0 {
				r.drainPasses = p.pass - r.worst.pass + 1
			}
		}
	}
	r.c.schedule(b, 1000, 60)
	r.c.onPass, r.c.beforePass = nil, nil
	if r.worst.pass == 0 || r.next.pass == 0 || r.drainPasses == 0 {
		b.Fatalf("the schedule never found broker %d dead and drained it (worst pass %d, next %d, %d copies left)", scaleDead, r.worst.pass, r.next.pass, w.held[scaleDead])
	}
	r.maxBackfills = r.c.coord.cfg.Policy.MaxBackfills
	b.Logf("worst %v", r.worst)
	b.Logf("next  %v", r.next)
	b.Logf("drain: %d passes (floor %d: %d copies, MaxBackfills %d), %.2f s CPU; load1 at the worst pass %.2f",
		r.drainPasses, ceilDiv(r.worst.deadHeld, r.maxBackfills), r.worst.deadHeld, r.maxBackfills, r.drainCPU.Seconds(), r.load1)
	w.mu.Lock()
	w.up[scaleDead] = true // back, empty: every broker answers
	w.mu.Unlock()
	r.c.run(b, "healthy") // warm
	runtime.GC()
	var m2 runtime.MemStats
	runtime.ReadMemStats(&m2)
	r.withPl = float64(m2.HeapAlloc-m0.HeapAlloc) / float64(nSeg)
	return r
}

// BenchmarkScale: the leader's passes over 10^6 and 10^7 sealed segments
// (-scale.segments: one row of that size) on 1,000 brokers at RF 3. Each
// round (each -count; the call with b.N == 1 that starts it) builds a
// fresh world and runs the fault schedule (logged pass by pass with -v);
// the pass that finds a broker dead is the worst pass. Reported: that pass
// and the next (process CPU by getrusage, the in-memory brokers'
// O(exceptions) work included; wall; allocations per planned command),
// the passes the dead broker's copies took to be recorded away against
// the floor its copies over MaxBackfills set, the load1 at the worst pass;
// then per healthy pass (b.N of them) CPU, allocations, probe answers'
// JSON bytes, and live heap per segment. The 10^7 row reports worst-x1e6,
// its worst pass's CPU over the median of the 10^6 rounds': ~10 or less
// when the pass is linear in what it handles, ~44 for a quadratic in the
// commands. Compare ns/segment with BenchmarkPass in the same run.
func BenchmarkScale(b *testing.B) {
	rows := scaleRows
	if *scaleSegments > 0 {
		rows = []scaleRow{{fmt.Sprintf("segments=%d", *scaleSegments), *scaleSegments}}
	}
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) { benchScale(b, row) })
	}
}

func benchScale(b *testing.B, row scaleRow) {
	s := &scaleBench
	r := s.round[row.name]
	if b.N == 1 || r == nil { // a new round: each -count iteration starts with b.N == 1
		r = newScaleRound(b, row.nSeg)
		s.round = map[string]*scaleRound{row.name: r}
		if s.worsts == nil {
			s.worsts = map[string][]float64{}
		}
		s.worsts[row.name] = append(s.worsts[row.name], r.worst.cpu.Seconds())
	}
	runtime.GC()
	b.ResetTimer()
	var cpu time.Duration
	var allocs uint64
	var wire, facts int64
	for i := 0; i < b.N; i++ {
		p := r.c.run(b, "healthy")
		if !p.healthy() || p.backfills != 0 {
			b.Fatalf("healthy pass is not: %s", p.report.String())
		}
		cpu += p.cpu
		allocs += p.allocs
		wire += p.wire
		facts += p.facts
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(cpu.Milliseconds())/n, "cpu-ms/pass")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n/float64(row.nSeg), "ns/segment")
	b.ReportMetric(float64(allocs)/n, "allocs/pass")
	b.ReportMetric(float64(wire)/n, "wire-B/pass")
	b.ReportMetric(float64(facts)/n, "facts/pass")
	b.ReportMetric(r.perSeg, "heap-B/segment")
	b.ReportMetric(r.withPl, "heap+leader-B/segment")
	r.reportWorst(b)
	if small := s.worsts["segments=1e6"]; row.nSeg == 10_000_000 && len(small) > 0 {
		b.ReportMetric(r.worst.cpu.Seconds()/median(small), "worst-x1e6")
	}
}

// reportWorst reports the round's worst pass, the next, and the drain.
func (r *scaleRound) reportWorst(b *testing.B) {
	b.ReportMetric(r.worst.cpu.Seconds(), "worst-cpu-s")
	b.ReportMetric(r.worst.wall.Seconds(), "worst-wall-s")
	b.ReportMetric(float64(r.worst.commands), "worst-cmds")
	b.ReportMetric(float64(r.worst.allocs)/float64(max(r.worst.commands, 1)), "worst-allocs/cmd")
	b.ReportMetric(r.next.cpu.Seconds(), "next-cpu-s")
	b.ReportMetric(r.next.wall.Seconds(), "next-wall-s")
	b.ReportMetric(float64(r.next.commands), "next-cmds")
	if r.next.commands > 0 {
		b.ReportMetric(float64(r.next.allocs)/float64(r.next.commands), "next-allocs/cmd")
	}
	b.ReportMetric(float64(r.drainPasses), "drain-passes")
	b.ReportMetric(float64(ceilDiv(r.worst.deadHeld, r.maxBackfills)), "drain-floor-passes")
	b.ReportMetric(r.drainCPU.Seconds(), "drain-cpu-s")
	b.ReportMetric(r.load1, "load1")
}

// ceilDiv is a/b rounded up; 1 when b is not positive (no cap: one pass).
func ceilDiv(a, b int) int {
	if b <= 0 {
		return 1
	}
	return (a + b - 1) / b
}

func median(xs []float64) float64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	n := len(ys)
	if n%2 == 1 {
		return ys[n/2]
	}
	return (ys[n/2-1] + ys[n/2]) / 2
}

// loadString is the load averages, or why they are unknown.
func loadString() string {
	l, err := benchenv.ReadLoad()
	if err != nil {
		return err.Error()
	}
	return l.String()
}

func (p scaleBrokers) Settle(ctx context.Context, b meta.BrokerID, segs []meta.Segment, errs []error) error {
	return eachCopy(ctx, b, segs, errs, p.settleOne)
}

func (p scaleBrokers) Confirm(ctx context.Context, b meta.BrokerID, segs []meta.Segment, errs []error) error {
	return eachCopy(ctx, b, segs, errs, p.confirmOne)
}
