package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Undo removes one fault (and only it). Calling it twice is harmless.
type Undo func() error

// drop is one directed cut: host `to` drops every packet from hosts from.
type drop struct {
	to   int
	from []int
}

// Isolate cuts host i off from every other host, both ways (the client
// still reaches it).
func (nt *Net) Isolate(i int) (Undo, error) {
	return nt.Partition([]int{i}, nt.others(i))
}

// Partition cuts every host of a from every host of b, both ways; hosts
// in neither side keep talking to both.
func (nt *Net) Partition(a, b []int) (Undo, error) {
	var ds []drop
	for _, x := range a {
		ds = append(ds, drop{to: x, from: b})
	}
	for _, y := range b {
		ds = append(ds, drop{to: y, from: a})
	}
	return nt.apply(ds)
}

// DropOutbound loses every packet host i sends to the hosts to (nil:
// every other host); what they send to i still arrives.
func (nt *Net) DropOutbound(i int, to []int) (Undo, error) {
	if to == nil {
		to = nt.others(i)
	}
	var ds []drop
	for _, x := range to {
		ds = append(ds, drop{to: x, from: []int{i}})
	}
	return nt.apply(ds)
}

// DropInbound loses every packet the hosts from (nil: every other host)
// send to host i; what i sends still arrives.
func (nt *Net) DropInbound(i int, from []int) (Undo, error) {
	if from == nil {
		from = nt.others(i)
	}
	return nt.apply([]drop{{to: i, from: from}})
}

// others is every host but i.
func (nt *Net) others(i int) []int {
	var o []int
	for h := 1; h <= nt.hosts; h++ {
		if h != i {
			o = append(o, h)
		}
	}
	return o
}

// apply installs one nft table per receiving host, all named alike, and
// returns the Undo that deletes them.
func (nt *Net) apply(ds []drop) (Undo, error) {
	nt.mu.Lock()
	if nt.closed {
		nt.mu.Unlock()
		return nil, errors.New("netns: the net is closed")
	}
	nt.seq++
	name := fmt.Sprintf("mlcf%d", nt.seq)
	nt.mu.Unlock()
	var holders []int
	undo := func() error { return nt.removeTable(name, holders) }
	for _, d := range ds {
		if err := nt.check(append([]int{d.to}, d.from...)...); err != nil {
			undo()
			return nil, err
		}
		if len(d.from) == 0 {
			continue
		}
		var addrs []string
		for _, f := range d.from {
			addrs = append(addrs, nt.Addr(f))
		}
		script := fmt.Sprintf("table inet %s {\n chain in {\n  type filter hook input priority -10; policy accept;\n  ip saddr { %s } drop\n }\n}\n", name, strings.Join(addrs, ", "))
		if err := run(script, inNS(nt.NS(d.to), "nft", "-f", "-")...); err != nil {
			undo()
			return nil, fmt.Errorf("netns: fault %s on host %d: %w", name, d.to, err)
		}
		holders = append(holders, d.to)
	}
	nt.mu.Lock()
	nt.tables[name] = holders
	nt.mu.Unlock()
	return undo, nil
}

// check fails on a host number out of range.
func (nt *Net) check(hosts ...int) error {
	for _, h := range hosts {
		if h < 1 || h > nt.hosts {
			return fmt.Errorf("netns: no host %d (hosts 1..%d)", h, nt.hosts)
		}
	}
	return nil
}

// removeTable deletes table name from the hosts that hold it; a table
// already gone is no error.
func (nt *Net) removeTable(name string, holders []int) error {
	nt.mu.Lock()
	if h, ok := nt.tables[name]; ok {
		holders = h
	}
	delete(nt.tables, name)
	closed := nt.closed
	nt.mu.Unlock()
	if closed {
		return nil
	}
	var errs []error
	for _, h := range slices.Compact(slices.Sorted(slices.Values(holders))) {
		if err := run("", inNS(nt.NS(h), "nft", "delete", "table", "inet", name)...); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Cap limits host i's link to bytesPerSecond each way (tc tbf on both
// ends of its veth); Undo removes the cap.
func (nt *Net) Cap(i int, bytesPerSecond int64) (Undo, error) {
	if err := nt.check(i); err != nil {
		return nil, err
	}
	if bytesPerSecond < 1024 {
		return nil, fmt.Errorf("netns: cap of %d B/s on host %d: want at least 1024", bytesPerSecond, i)
	}
	burst := max(bytesPerSecond/20, 16<<10)
	tbf := []string{"tbf", "rate", fmt.Sprintf("%dbit", 8*bytesPerSecond), "burst", fmt.Sprint(burst), "latency", "100ms"}
	ends := nt.linkEnds(i)
	for _, e := range ends {
		if err := run("", inNS(e[0], append([]string{"tc", "qdisc", "replace", "dev", e[1], "root"}, tbf...)...)...); err != nil {
			nt.uncap(i)
			return nil, fmt.Errorf("netns: cap on host %d: %w", i, err)
		}
	}
	nt.mu.Lock()
	nt.caps[i] = true
	nt.mu.Unlock()
	return func() error { return nt.uncap(i) }, nil
}

// linkEnds are host i's veth ends as (namespace, device): its own eth0
// (what it sends) and its bridge port (what it receives).
func (nt *Net) linkEnds(i int) [][2]string {
	return [][2]string{{nt.NS(i), "eth0"}, {nt.bridgeNS(), fmt.Sprintf("mlc%db%d", nt.n, i)}}
}

// uncap removes host i's tbf, if any.
func (nt *Net) uncap(i int) error {
	nt.mu.Lock()
	delete(nt.caps, i)
	closed := nt.closed
	nt.mu.Unlock()
	if closed {
		return nil
	}
	var errs []error
	for _, e := range nt.linkEnds(i) {
		err := run("", inNS(e[0], "tc", "qdisc", "del", "dev", e[1], "root")...)
		if err != nil && !strings.Contains(err.Error(), "No such file") && !strings.Contains(err.Error(), "Cannot delete qdisc with handle of zero") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// HealAll stops every flap and removes every fault and cap.
func (nt *Net) HealAll() error {
	nt.mu.Lock()
	flaps := nt.flaps
	nt.flaps = map[int]*flap{}
	var names []string
	for name := range nt.tables {
		names = append(names, name)
	}
	var capped []int
	for h := range nt.caps {
		capped = append(capped, h)
	}
	nt.mu.Unlock()
	var errs []error
	for _, f := range flaps {
		if err := f.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range names {
		errs = append(errs, nt.removeTable(name, nil))
	}
	for _, h := range capped {
		errs = append(errs, nt.uncap(h))
	}
	return errors.Join(errs...)
}

// FlapEvent is one change of a flapping link.
type FlapEvent struct {
	At   time.Duration // since the flap began
	Down bool          // cut (true) or restored (false)
}

// flap is one running flapping link.
type flap struct {
	quit   chan struct{}
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	events []FlapEvent
	err    error
}

// stop ends the flap (the link left up) and returns its first error.
func (f *flap) stop() error {
	f.once.Do(func() { close(f.quit) })
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Flap cuts host i off from every other host and restores it, again and
// again, each phase lasting 0.5–2 s drawn from seed, for d (the link is
// left up at the end), as FlapPlan(i, d, seed) lists. It returns at once;
// Undo stops it early (link up) and returns the first error a change met.
// Events lists the changes made so far, each at the offset it was made.
func (nt *Net) Flap(i int, d time.Duration, seed uint64) (undo Undo, events func() []FlapEvent, err error) {
	if err := nt.check(i); err != nil {
		return nil, nil, err
	}
	f := &flap{quit: make(chan struct{}), done: make(chan struct{})}
	nt.mu.Lock()
	nt.seq++
	key := nt.seq
	nt.flaps[key] = f
	nt.mu.Unlock()
	go nt.runFlap(f, i, d, seed)
	undo = func() error {
		nt.mu.Lock()
		delete(nt.flaps, key)
		nt.mu.Unlock()
		return f.stop()
	}
	events = func() []FlapEvent {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Clone(f.events)
	}
	return undo, events, nil
}

// FlapPlan is the schedule Flap(i, d, seed) follows: the changes, each at
// its offset from the start (the phases are 0.5–2 s drawn from seed and
// i), ending with the link restored at d. Flap keeps to these offsets
// (the time an nft change takes does not push later changes back), so a
// run whose Events are fewer than FlapPlan's was cut short or fell behind.
func FlapPlan(i int, d time.Duration, seed uint64) []FlapEvent {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	var plan []FlapEvent
	down := false
	for at := time.Duration(0); at < d; {
		down = !down
		plan = append(plan, FlapEvent{At: at, Down: down})
		at += 500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))
	}
	if down {
		plan = append(plan, FlapEvent{At: d, Down: false})
	}
	return plan
}

// runFlap is Flap's loop: it makes each change of FlapPlan at its offset.
func (nt *Net) runFlap(f *flap, i int, d time.Duration, seed uint64) {
	defer close(f.done)
	start := time.Now()
	var cut Undo
	record := func(down bool, err error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err != nil && f.err == nil {
			f.err = err
		}
		f.events = append(f.events, FlapEvent{At: time.Since(start), Down: down})
	}
	defer func() {
		if cut != nil {
			record(false, cut())
		}
	}()
	for _, ev := range FlapPlan(i, d, seed) {
		select {
		case <-f.quit:
			return
		case <-time.After(time.Until(start.Add(ev.At))):
		}
		if ev.Down {
			u, err := nt.Isolate(i)
			record(true, err)
			cut = u
		} else if cut != nil {
			record(false, cut())
			cut = nil
		}
	}
}
