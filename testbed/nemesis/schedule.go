package nemesis

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
)

// FaultKind names one kind of fault the nemesis injects: a kind of the
// harness's fault catalogue (testbed/harness/catalogue.go).
type FaultKind = harness.Kind

// KindNames are the names of ks, as the flags spell them.
func KindNames(ks []FaultKind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

// Event is one fault of a schedule: at At after its epoch's start, Kind on
// Brokers for Length (then undone: restarted, resumed, filler removed;
// file faults are not undone, the cluster heals them). Copies is how many
// copies a file fault hits; Seed picks them and their offsets.
type Event struct {
	At      time.Duration   `json:"at"`
	Length  time.Duration   `json:"length"`
	Kind    FaultKind       `json:"kind"`
	Brokers []meta.BrokerID `json:"brokers"`
	Copies  int             `json:"copies,omitempty"`
	Seed    uint64          `json:"seed"`
}

// End is when the event is undone, from its epoch's start.
func (e Event) End() time.Duration { return e.At + e.Length }

func (e Event) String() string {
	s := fmt.Sprintf("+%v %s on %v for %v", e.At.Round(time.Millisecond), e.Kind, e.Brokers, e.Length.Round(time.Millisecond))
	if e.Copies > 0 {
		s += fmt.Sprintf(" (%d copies)", e.Copies)
	}
	return s
}

// Epoch is a window of overlapping faults, after which every fault is
// undone and the checker runs at a quiescent point.
type Epoch struct {
	Window time.Duration `json:"window"`
	Events []Event       `json:"events"`
}

// Schedule is the whole draw: a pure function of its inputs (Draw).
type Schedule struct {
	Seed     uint64        `json:"seed"`
	Duration time.Duration `json:"duration"`
	Brokers  int           `json:"brokers"`
	RF       int           `json:"rf"`
	Kinds    []FaultKind   `json:"kinds"`
	Disk     meta.BrokerID `json:"disk_broker,omitempty"`
	Epochs   []Epoch       `json:"epochs"`
	Limit    int           `json:"limit"` // brokers under a destructive fault at once, outside quorum-loss windows
	Majority int           `json:"majority"`
}

// Equal reports whether two schedules are the same draw.
func (s Schedule) Equal(o Schedule) bool { return s.String() == o.String() }

// String prints the schedule, one event a line, as a failure shows it.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nemesis schedule: seed %d, duration %v, %d brokers, rf %d, kinds %v, at most %d brokers under destructive faults at once (majority %d)",
		s.Seed, s.Duration, s.Brokers, s.RF, s.Kinds, s.Limit, s.Majority)
	if s.Disk != 0 {
		fmt.Fprintf(&b, ", copies disk on broker %d", s.Disk)
	}
	b.WriteByte('\n')
	for i, ep := range s.Epochs {
		fmt.Fprintf(&b, "  epoch %d (window %v):\n", i+1, ep.Window)
		for _, e := range ep.Events {
			fmt.Fprintf(&b, "    %s\n", e)
		}
	}
	return b.String()
}

// Count is the number of events by kind.
func (s Schedule) Count() map[FaultKind]int {
	n := map[FaultKind]int{}
	for _, ep := range s.Epochs {
		for _, e := range ep.Events {
			n[e.Kind]++
		}
	}
	return n
}

// epochSpan is the time one epoch stands for: its 50 s fault window plus
// the heal and check that follow (about ten seconds), so that a run of
// --duration D lasts about D.
const epochSpan = 60 * time.Second

// cooldown keeps a broker out of new destructive faults after one ends,
// so that its copies can be healed before another broker's are hit.
const cooldown = 8 * time.Second

// Draw draws the schedule for seed: a pure function of (seed, duration,
// brokers, rf, kinds, disk broker). kinds are the kinds available (the
// disk kinds only with disk != 0, the broker with the copies disk; the
// network kinds only with brokers on hosts of their own).
// Bounds: outside a quorum-loss window at most min(rf-1, (brokers-1)/2)
// brokers are under a destructive fault (or its cooldown) at once, so no
// segment loses more than rf-1 copies and the control plane keeps its
// quorum; a broker has one fault at a time; a quorum-loss window is alone
// in its epoch.
func Draw(seed uint64, duration time.Duration, brokers, rf int, kinds []FaultKind, disk meta.BrokerID) Schedule {
	s := Schedule{Seed: seed, Duration: duration, Brokers: brokers, RF: rf, Disk: disk,
		Limit: min(rf-1, (brokers-1)/2), Majority: brokers/2 + 1}
	for _, k := range kinds {
		if slices.Contains(harness.DiskKinds, k) && disk == 0 {
			continue
		}
		if !slices.Contains(s.Kinds, k) {
			s.Kinds = append(s.Kinds, k)
		}
	}
	slices.Sort(s.Kinds)
	rng := rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc909))
	epochs := max(1, int(duration/epochSpan))
	window := 50 * time.Second
	if duration < epochSpan {
		window = max(10*time.Second, duration*5/6)
	}
	quorum := slices.Contains(s.Kinds, harness.KindQuorumLoss) && brokers >= 3
	for i := 0; i < epochs; i++ {
		ep := Epoch{Window: window}
		// One epoch in five (never the first) is a quorum-loss window.
		if quorum && i > 0 && rng.IntN(5) == 0 {
			ep.Events = []Event{{At: window / 4, Length: min(10*time.Second, window/2), Kind: harness.KindQuorumLoss,
				Brokers: pick(rng, brokers, s.Majority, nil), Seed: rng.Uint64()}}
		} else {
			ep.Events = s.drawEpoch(rng, window)
		}
		s.Epochs = append(s.Epochs, ep)
	}
	return s
}

// slot is a broker's busy interval in an epoch.
type slot struct {
	b        meta.BrokerID
	from, to time.Duration
}

func (s *Schedule) drawEpoch(rng *rand.Rand, window time.Duration) []Event {
	var events []Event
	var busy []slot
	kinds := slices.DeleteFunc(slices.Clone(s.Kinds), func(k FaultKind) bool { return k == harness.KindQuorumLoss })
	if len(kinds) == 0 || s.Limit < 1 {
		return nil
	}
	n := 4 + rng.IntN(5) // tries; some do not fit the bounds
	for try := 0; try < n*3 && len(events) < n; try++ {
		k := kinds[rng.IntN(len(kinds))]
		e := Event{Kind: k, At: time.Duration(rng.Int64N(int64(window * 3 / 4))), Seed: rng.Uint64()}
		switch k {
		case harness.KindKill, harness.KindPause, harness.KindSwap:
			e.Length = 2*time.Second + time.Duration(rng.Int64N(int64(8*time.Second)))
		case harness.KindRestart:
			e.Length = time.Second
		case harness.KindIsolate, harness.KindPartition, harness.KindDropOut, harness.KindDropIn:
			e.Length = 3*time.Second + time.Duration(rng.Int64N(int64(7*time.Second)))
		case harness.KindFlap, harness.KindCap:
			e.Length = 5*time.Second + time.Duration(rng.Int64N(int64(10*time.Second)))
		case harness.KindDiskFull, harness.KindReadOnly:
			e.Length = 5*time.Second + time.Duration(rng.Int64N(int64(5*time.Second)))
		default: // file faults: the length is the time allowed to heal
			e.Length = 5 * time.Second
			e.Copies = 1 + rng.IntN(3)
		}
		if e.End() > window {
			e.Length = window - e.At
		}
		want := 1
		// kill and pause sometimes strike two brokers at once: more than
		// hold_share (0.25) of five missing together, a hold is expected.
		if (k == harness.KindKill || k == harness.KindPause) && s.Limit >= 2 && rng.IntN(4) == 0 {
			want = 2
		}
		if k == harness.KindPartition {
			want = s.Limit // the minority side: a majority keeps its quorum
		}
		var targets []meta.BrokerID
		if k == harness.KindDiskFull || k == harness.KindReadOnly {
			targets = []meta.BrokerID{s.Disk}
		} else if k == harness.KindSwap && s.Disk != 0 {
			// Never the disk broker: its copies are a mount inside the
			// data directory a swap moves aside.
			targets = pick(rng, s.Brokers, want, []meta.BrokerID{s.Disk})
		} else {
			targets = pick(rng, s.Brokers, want, nil)
		}
		if !s.fits(busy, targets, e) {
			continue
		}
		e.Brokers = targets
		for _, b := range targets {
			busy = append(busy, slot{b: b, from: e.At, to: e.End() + cooldown})
		}
		events = append(events, e)
	}
	slices.SortStableFunc(events, func(a, b Event) int { return int(a.At - b.At) })
	return events
}

// fits says whether e on targets keeps the epoch within the bounds: no
// broker with two faults at once, and at no moment more than Limit brokers
// under destructive faults (a restart bounces a broker: it counts too,
// since it is briefly down).
func (s *Schedule) fits(busy []slot, targets []meta.BrokerID, e Event) bool {
	from, to := e.At, e.End()+cooldown
	for _, sl := range busy {
		if slices.Contains(targets, sl.b) && sl.from < to && from < sl.to {
			return false
		}
	}
	// The number of distinct busy brokers is largest at some slot's start.
	points := []time.Duration{from}
	for _, sl := range busy {
		if sl.from >= from && sl.from < to {
			points = append(points, sl.from)
		}
	}
	for _, t := range points {
		on := map[meta.BrokerID]bool{}
		for _, b := range targets {
			on[b] = true
		}
		for _, sl := range busy {
			if sl.from <= t && t < sl.to {
				on[sl.b] = true
			}
		}
		if len(on) > s.Limit {
			return false
		}
	}
	return true
}

// pick draws n distinct brokers of 1..brokers, none of exclude, sorted.
func pick(rng *rand.Rand, brokers, n int, exclude []meta.BrokerID) []meta.BrokerID {
	var pool []meta.BrokerID
	for i := 1; i <= brokers; i++ {
		if !slices.Contains(exclude, meta.BrokerID(i)) {
			pool = append(pool, meta.BrokerID(i))
		}
	}
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	out := pool[:min(n, len(pool))]
	slices.Sort(out)
	return out
}
