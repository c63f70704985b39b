package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/testbed/harness"
)

// The leftover network tests: what a partition leaves on a broker outside
// its segments' replica sets is reported per cause by the leader (its
// heal passes, read from its pass history: harness.PassFeed), never
// counted as a replica, and collected (or made a replica by a backfill
// that resumes it) once the partition heals.

// netLeftoverDelay is the heal's leftover_delay in these tests.
const netLeftoverDelay = 5 * time.Second

// lastPass is broker id's latest heal pass as its history keeps it (false
// when it has none or did not answer).
func (c *cluster) lastPass(id int) (plugin.PassRecord, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	h, err := c.b(id).Client.Passes(ctx, 0, 1)
	if err != nil || h.Last == 0 {
		return plugin.PassRecord{}, false
	}
	if h, err = c.b(id).Client.Passes(ctx, h.Last-1, 1); err != nil || len(h.Passes) == 0 {
		return plugin.PassRecord{}, false
	}
	return h.Passes[0], true
}

// leftoverGroup returns r's group of broker b's leftovers of cause.
func leftoverGroup(r *heal.Report, b int, cause heal.Cause) (heal.LeftoverGroup, bool) {
	for _, g := range r.Leftovers {
		if g.Broker == meta.BrokerID(b) && g.Cause == cause {
			return g, true
		}
	}
	return heal.LeftoverGroup{}, false
}

// deletedOf returns a segment of segs whose copy on broker b report r
// deleted, as a leftover or otherwise.
func deletedOf(r *heal.Report, b int, segs []meta.SegmentID) (meta.SegmentID, bool) {
	for _, d := range slices.Concat(r.LeftoversDeleted, r.Deleted) {
		if d.Broker == meta.BrokerID(b) && slices.Contains(segs, d.Segment) {
			return d.Segment, true
		}
	}
	return "", false
}

// copiesOf is broker id's /v1/copies by segment (nil when it did not
// answer).
func (c *cluster) copiesOf(id int) map[meta.SegmentID]admin.Copy {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cs, err := c.b(id).Client.Copies(ctx)
	if err != nil {
		return nil
	}
	m := make(map[meta.SegmentID]admin.Copy, len(cs))
	for _, ci := range cs {
		m[ci.ID] = ci
	}
	return m
}

// statusCopies runs `malachi status --json` against broker via and
// returns the COPIES column (replicas) of broker id.
func (c *cluster) statusCopies(via, id int) int {
	c.t.Helper()
	out := c.malachi(append([]string{"status", "--admin", c.b(via).admin, "--json"}, c.operatorFlags()...)...)
	var st struct {
		Brokers []struct {
			ID     meta.BrokerID `json:"id"`
			Copies int           `json:"copies"`
		} `json:"brokers"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		c.t.Fatalf("malachi status --json: %v\n%s", err, out)
	}
	for _, b := range st.Brokers {
		if b.ID == meta.BrokerID(id) {
			return b.Copies
		}
	}
	c.t.Fatalf("malachi status --json lists no broker %d:\n%s", id, out)
	return 0
}

// returnWatch is what the test saw of a returning broker's leftovers.
type returnWatch struct {
	passes int // heal passes read
	gone   map[meta.SegmentID]time.Duration
	other  []heal.LeftoverGroup // groups of the broker with another cause
}

// watchReturn polls, until every copy of held is gone from broker f's
// /v1/copies, the metadata and f's copies, and reads every heal pass of
// the leader's from its history meanwhile, through the first that ends
// after (the caller saw the leader report all of held as
// returned_broker). Every pass's leftovers of f with another cause are
// kept in other. Every poll asserts: no set names f; a copy is gone no
// sooner than the leftover delay after healed, and only while its segment
// is sealed at RF 3 in the leader's metadata.
func (c *cluster) watchReturn(f int, held []meta.SegmentID, healed time.Time) *returnWatch {
	c.t.Helper()
	w := &returnWatch{gone: map[meta.SegmentID]time.Duration{}}
	feed := harness.NewPassFeed(time.Now())
	var seen string
	judge := func(p *plugin.PassRecord) {
		w.passes++
		g, _ := leftoverGroup(&p.Report, f, heal.ReturnedBroker)
		seen = fmt.Sprintf("pass %d of leader %d: %d copies returned_broker %v, %d leftover copies in all", p.Seq, p.Broker, g.Copies, g.Segments, p.Report.LeftoverCopies)
		for _, o := range p.Report.Leftovers {
			if o.Broker == meta.BrokerID(f) && o.Cause != heal.ReturnedBroker {
				w.other = append(w.other, o)
			}
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(w.gone) < len(held) {
		if time.Now().After(deadline) {
			c.t.Fatalf("broker %d's leftovers not collected after 2 minutes: %d of %d gone (%v); last pass read: %s",
				f, len(w.gone), len(held), w.gone, seen)
		}
		time.Sleep(20 * time.Millisecond)
		for _, p := range c.readPasses(feed) {
			judge(&p)
		}
		if len(feed.Leaders) == 0 {
			continue
		}
		snap, err := c.metadata(int(feed.Leaders[len(feed.Leaders)-1]))
		cps := c.copiesOf(f)
		if err != nil || cps == nil {
			continue
		}
		for _, id := range held {
			s, ok := snap.Segment(id)
			if !ok {
				c.t.Fatalf("segment %s is gone from the metadata", id)
			}
			if s.HasReplica(meta.BrokerID(f)) {
				c.t.Fatalf("segment %s's set %v names broker %d again: its returned copy was taken for a replica", id, s.Replicas, f)
			}
			if _, held := cps[id]; held || w.gone[id] != 0 {
				continue
			}
			w.gone[id] = time.Since(healed)
			switch {
			case w.gone[id] < netLeftoverDelay:
				c.t.Fatalf("broker %d's copy of %s was gone %v after the partition healed, before leftover_delay %v", f, id, w.gone[id], netLeftoverDelay)
			case !s.Sealed || len(s.Replicas) != 3:
				c.t.Fatalf("broker %d's copy of %s was deleted while its segment was %v (sealed %v): under-replicated", f, id, s.Replicas, s.Sealed)
			}
		}
	}
	end := time.Now()
	c.untilPass(feed, 30*time.Second, "a heal pass that ended after the leftovers went", func(p *plugin.PassRecord) (bool, string) {
		judge(p)
		return p.Ended.After(end), passLine(p)
	})
	return w
}

// returnedReported reads every heal pass of the leader's that ends from
// healed on from its history, up to the first that reports all of held
// on broker f returned_broker. It fails the test when a pass before it
// deleted one of those copies, or one is gone from f's /v1/copies before
// it (f's copies are read before the passes: a pass that reported them
// before they went has ended by then, and is read next).
func (c *cluster) returnedReported(f int, held []meta.SegmentID, healed time.Time) {
	c.t.Helper()
	feed := harness.NewPassFeed(healed)
	early := func(why string) {
		c.t.Fatalf("broker %d's copies were deleted %v after the partition healed, before the leader reported all %d of them returned_broker (leftover_delay %v): %s",
			f, time.Since(healed), len(held), netLeftoverDelay, why)
	}
	last := "no heal pass read"
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			c.t.Fatalf("broker %d's returned copies not all reported returned_broker after 60s (%s); last: %s", f, feed.Summary(), last)
		}
		time.Sleep(50 * time.Millisecond)
		cps := c.copiesOf(f)
		recs, err := feed.Next(context.Background(), c.h)
		if prob := feed.Problem(); prob != "" {
			c.t.Fatal(prob)
		}
		for _, p := range recs {
			if id, ok := deletedOf(&p.Report, f, held); ok {
				early(fmt.Sprintf("pass %d of broker %d deleted its copy of %s", p.Seq, p.Broker, id))
			}
			g, ok := leftoverGroup(&p.Report, f, heal.ReturnedBroker)
			if ok && g.Copies == len(held) {
				return
			}
			last = fmt.Sprintf("%s; returned_broker on broker %d: %d of %d copies", passLine(&p), f, g.Copies, len(held))
		}
		if err != nil || cps == nil {
			continue // a pass not read yet may have reported them
		}
		for _, id := range held {
			if _, ok := cps[id]; !ok {
				early(fmt.Sprintf("its copy of %s is gone from its /v1/copies", id))
			}
		}
	}
}

// unconfirmedReplica pauses broker r (SIGSTOP) until every copy of off
// (segments without a replica on r) is gone from broker f, and at least
// until the leftover delay and one second more have passed since
// reportedAt (measured from healed, when the caller saw f's leftovers
// reported), then resumes it. Meanwhile no copy of on (segments with a
// replica on r) may leave f: a replica's broker that does not answer is
// not confirmed, so its segment's leftovers wait, while the others are
// collected once the delay has passed. Every heal pass of the leader's
// that ends from the pause on is read from its history, through the first
// that started after r resumed. It FAILS when none that ran while r was
// paused listed r suspect (the pause did not reach the heal), when one
// listed it dead (the pause outlasted the grace delay) or when off is not
// collected within limit of pause.
func (c *cluster) unconfirmedReplica(r, f int, on, off []meta.SegmentID, healed time.Time, reportedAt, limit time.Duration) {
	c.t.Helper()
	gone := map[meta.SegmentID]time.Duration{}
	c.keptWhilePaused(f, 0, on, off, gone, healed) // before the pause
	feed := c.leaderFeed()
	paused := time.Now()
	if err := c.b(r).Pause(); err != nil {
		c.t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			c.b(r).Resume()
		}
	}()
	var resumedAt time.Time // zero while r is paused
	suspect, during := 0, 0
	judge := func(p *plugin.PassRecord) {
		if slices.Contains(p.Report.Dead, meta.BrokerID(r)) {
			c.t.Fatalf("pass %d of broker %d listed the paused broker %d dead %v after the pause: it outlasted the grace delay", p.Seq, p.Broker, r, p.Ended.Sub(paused))
		}
		if !resumedAt.IsZero() && !p.Started.Before(resumedAt) {
			return
		}
		during++
		if slices.Contains(p.Report.Suspect, meta.BrokerID(r)) {
			suspect++
		}
	}
	for len(gone) < len(off) || time.Since(healed) < reportedAt+netLeftoverDelay+time.Second {
		if time.Since(paused) > limit {
			c.t.Fatalf("broker %d paused %v: only %d of the %d copies on broker %d of segments without a replica on it were collected (%v)", r, limit, len(gone), len(off), f, gone)
		}
		time.Sleep(20 * time.Millisecond)
		for _, p := range c.readPasses(feed) {
			judge(&p)
		}
		c.keptWhilePaused(f, r, on, off, gone, healed)
	}
	resumed = true
	resumedAt = time.Now()
	if err := c.b(r).Resume(); err != nil {
		c.t.Fatal(err)
	}
	c.untilPass(feed, 30*time.Second, fmt.Sprintf("a heal pass that started after broker %d resumed", r), func(p *plugin.PassRecord) (bool, string) {
		judge(p)
		return !p.Started.Before(resumedAt), passLine(p)
	})
	if suspect == 0 {
		c.t.Fatalf("no pass of the %d that ran while broker %d was paused listed it suspect: the pause did not reach the heal (%s)", during, r, feed.Summary())
	}
	first := time.Duration(1 << 62)
	for _, d := range gone {
		first = min(first, d)
	}
	c.t.Logf("broker %d paused %v (until %v after the partition healed; %d of the %d passes that ran meanwhile listed it suspect, none dead): broker %d kept its %d copies of segments on it, "+
		"its %d others were collected from %v after the partition healed",
		r, resumedAt.Sub(paused).Round(time.Millisecond), resumedAt.Sub(healed).Round(time.Millisecond), suspect, during, f, len(on), len(off), first.Round(time.Millisecond))
}

// keptWhilePaused reads broker f's copies once: a copy of on or off gone
// sooner than the leftover delay after healed fails the test, as does a
// copy of on gone while broker r (0: none yet) is paused; gone records
// when each copy of off was first seen gone.
func (c *cluster) keptWhilePaused(f, r int, on, off []meta.SegmentID, gone map[meta.SegmentID]time.Duration, healed time.Time) {
	c.t.Helper()
	cps := c.copiesOf(f)
	if cps == nil {
		return
	}
	for _, id := range slices.Concat(on, off) {
		if _, ok := cps[id]; ok || gone[id] != 0 {
			continue
		}
		d := time.Since(healed)
		switch {
		case d < netLeftoverDelay:
			c.t.Fatalf("broker %d's copy of %s gone %v after the partition healed, before leftover_delay %v (it returned with the partition's heal: no sighting of it as a leftover can be older)",
				f, id, d, netLeftoverDelay)
		case slices.Contains(on, id):
			c.t.Fatalf("broker %d's copy of %s deleted %v after the partition healed, while broker %d, a replica of it, was paused (not confirmed)", f, id, d, r)
		}
		gone[id] = d
	}
}

// splitBy picks a broker r, neither f nor the leader, such that some
// segments of held have a replica on r in snap (on) and some do not
// (off), the most even split of those brokers; it fails the test when no
// broker splits them.
func (c *cluster) splitBy(snap meta.Snapshot, held []meta.SegmentID, f, leader int) (r int, on, off []meta.SegmentID) {
	for _, b := range snap.Brokers {
		if int(b.ID) == f || int(b.ID) == leader {
			continue
		}
		var bon, boff []meta.SegmentID
		for _, id := range held {
			if s, _ := snap.Segment(id); s.HasReplica(b.ID) {
				bon = append(bon, id)
			} else {
				boff = append(boff, id)
			}
		}
		if min(len(bon), len(boff)) > min(len(on), len(off)) {
			r, on, off = int(b.ID), bon, boff
		}
	}
	if r == 0 {
		c.t.Fatalf("no broker but %d and the leader %d splits the sets of %v in %+v", f, leader, held, snap.Segments)
	}
	return r, on, off
}

// TestNetPartitionLeavesReturnedCopies isolates a follower of five
// brokers past the grace delay (15 s; its replicas are replaced on the
// majority side), then heals the partition. The leader reports every copy
// the returning broker still holds as a returned_broker leftover; no
// replica set names it again and `malachi status` counts none of them
// under COPIES. Then a replica r of some of those segments is paused
// (within the grace delay: suspect, never dead): the copies of segments
// without a replica on r are collected, none before leftover_delay (5 s)
// after the partition healed, while those of segments on r are kept until
// r answers again (a member not confirmed). After r resumes, the rest are
// collected, each only while its segment is sealed at RF 3 (sampled on
// every poll), gone from the broker's /v1/copies; every segment ends at
// RF 3 with every copy audited. It FAILS when the isolation replaced
// nothing, the broker came back without its copies, or no pass saw r
// suspect (a fault that did not happen).
func TestNetPartitionLeavesReturnedCopies(t *testing.T) {
	t.Parallel() // own namespaces and subnet: independent of every other test
	c, leader, before := netClusterOpts(t, clusterOpts{n: 5, grace: "15s", extra: fmt.Sprintf("leftover_delay = %q\n", netLeftoverDelay.String())}, 16)
	f := victim(c, before, leader)
	var held []meta.SegmentID
	for _, s := range before.Segments {
		if s.HasReplica(meta.BrokerID(f)) {
			held = append(held, s.ID)
		}
	}
	undo := c.undoLater(c.net().Isolate(f))
	// What the leader last reported of broker f before it went silent (a
	// leftover seen then is remembered while f is silent).
	if p, ok := c.lastPass(leader); ok && len(p.Report.Leftovers) > 0 {
		t.Logf("at the cut, the leader's pass %d (index %d) listed leftovers %+v", p.Seq, p.Report.Index, p.Report.Leftovers)
	}
	cut := c.healedOff(leader, map[meta.BrokerID]bool{meta.BrokerID(f): true}, 60*time.Second, "segments healed off the isolated follower")
	files, err := c.b(f).CopyFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range held {
		if s, _ := cut.Segment(id); s.HasReplica(meta.BrokerID(f)) {
			t.Fatalf("segment %s still on broker %d after the heal: the isolation replaced nothing", id, f)
		}
		if _, ok := files[id]; !ok {
			t.Fatalf("broker %d lost its copy of %s while cut off: no copy can return", f, id)
		}
	}
	t.Logf("broker %d cut off; its %d segments healed onto the others; it still holds their copies", f, len(held))
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	c.returnedReported(f, held, healed)
	reportedAt := time.Since(healed)
	// COPIES counts replicas only: while broker f holds its returned
	// copies, `malachi status` shows it none.
	if n := c.statusCopies(leader, f); n != countOn(cut, f) {
		t.Errorf("malachi status: broker %d COPIES %d while it holds %d returned copies and %d replicas: a leftover counted as a replica", f, n, len(held), countOn(cut, f))
	}
	r, on, off := c.splitBy(cut, held, f, leader)
	c.unconfirmedReplica(r, f, on, off, healed, reportedAt, 12*time.Second)
	w := c.watchReturn(f, held, healed)
	first := time.Duration(1 << 62)
	for _, d := range w.gone {
		first = min(first, d)
	}
	t.Logf("heal passes read %d; all %d copies reported returned_broker %v after the partition healed, the first deleted %v after it (leftover_delay %v); other causes on broker %d: %v",
		w.passes, len(held), reportedAt.Round(time.Millisecond), first.Round(time.Millisecond), netLeftoverDelay, f, w.other)
	if len(w.other) > 0 {
		t.Errorf("broker %d's returned copies were also reported under other causes: %v", f, w.other)
	}
	c.noLeftovers(60 * time.Second)
	after := c.netFinal(before, holds(f))
	c.caughtUp(f, after.Index, 30*time.Second)
	files, err = c.b(f).CopyFiles()
	if err != nil {
		t.Fatal(err)
	}
	for id := range files {
		if s, ok := after.Segment(id); ok && !s.HasReplica(meta.BrokerID(f)) {
			t.Errorf("broker %d still holds a copy of %s outside its set %v", f, id, s.Replicas)
		}
	}
}

// logged returns the "bytes" field of the lines of broker b's log whose
// message is msg and whose segment is id, in order (-1 for a line
// without it).
func logged(b *broker, msg string, id meta.SegmentID) []int64 {
	f, err := os.Open(b.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := struct {
			Message string         `json:"message"`
			Segment meta.SegmentID `json:"segment"`
			Bytes   int64          `json:"bytes"`
		}{Bytes: -1}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == msg && l.Segment == id {
			out = append(out, l.Bytes)
		}
	}
	return out
}

// strikeBackfill waits until bytes move to broker to (a copy there of a
// segment of segs, short of its sealed size, that grew between two looks)
// and returns that segment.
func (c *cluster) strikeBackfill(to int, segs []meta.Segment) meta.Segment {
	c.t.Helper()
	seg, _ := c.strikeBackfillAny([]int{to}, segs)
	return seg
}

// strikeBackfillAny is strikeBackfill onto any broker of targets; it
// returns the segment and the broker its bytes move to.
func (c *cluster) strikeBackfillAny(targets []int, segs []meta.Segment) (meta.Segment, int) {
	c.t.Helper()
	type copyAt struct {
		seg string
		to  int
	}
	partial := func() map[copyAt]int64 {
		out := map[copyAt]int64{}
		for _, to := range targets {
			for _, s := range segs {
				if s.HasReplica(meta.BrokerID(to)) {
					continue
				}
				p, err := c.b(to).CopyPath(s.ID)
				if err != nil {
					continue
				}
				if fi, err := os.Stat(p); err == nil && fi.Size() > 0 && fi.Size() < s.ByteSize+40 {
					out[copyAt{string(s.ID), to}] = fi.Size()
				}
			}
		}
		return out
	}
	var was map[copyAt]int64
	var hit copyAt
	c.eventually(60*time.Second, fmt.Sprintf("bytes moving to one of brokers %v", targets), func() bool {
		now := partial()
		for k, n := range now {
			if n > was[k] && was[k] > 0 {
				hit = k
				return true
			}
		}
		was = now
		return false
	})
	for _, s := range segs {
		if string(s.ID) == hit.seg {
			return s, hit.to
		}
	}
	return meta.Segment{}, hit.to
}

// partialWatch is what the test saw of a partial copy after the partition
// healed.
type partialWatch struct {
	passes   int
	reported bool // a pass listed it partial_backfill
	replica  bool // its segment's set names the broker now
	gone     bool // the copy was deleted
	seen     string
}

// watchPartial polls, after the partition healed (at healed), until broker
// spare's copy of seg is in seg's set or gone: every heal pass of the
// leader's that ends from healed on, through the first that ends after
// the poll stops, is read from its history for a partial_backfill
// leftover of seg on spare, and every poll asserts that while the copy is
// not whole and sealed no set names it, and that it is not deleted while
// seg is short of RF 3 live replicas (dead is the killed broker).
func (c *cluster) watchPartial(spare, dead int, seg meta.Segment, healed time.Time) partialWatch {
	c.t.Helper()
	var w partialWatch
	feed := harness.NewPassFeed(healed)
	judge := func(p *plugin.PassRecord) {
		w.passes++
		g, _ := leftoverGroup(&p.Report, spare, heal.PartialBackfill)
		w.seen = fmt.Sprintf("pass %d of leader %d: partial_backfill on %d %v; leftovers %v", p.Seq, p.Broker, spare, g.Segments, p.Report.Leftovers)
		w.reported = w.reported || slices.Contains(g.Segments, seg.ID)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !w.replica && !w.gone {
		if time.Now().After(deadline) {
			c.t.Fatalf("broker %d's partial copy of %s neither resumed nor collected after 2 minutes; reported %v; last pass read: %s", spare, seg.ID, w.reported, w.seen)
		}
		time.Sleep(20 * time.Millisecond)
		for _, p := range c.readPasses(feed) {
			judge(&p)
		}
		if len(feed.Leaders) == 0 {
			continue
		}
		snap, err := c.metadata(int(feed.Leaders[len(feed.Leaders)-1]))
		cps := c.copiesOf(spare)
		if err != nil || cps == nil {
			continue
		}
		s, _ := snap.Segment(seg.ID)
		ci, has := cps[seg.ID]
		whole := has && ci.Sealed && !ci.Latched && ci.Size == seg.ByteSize+40
		switch {
		case s.HasReplica(meta.BrokerID(spare)) && !whole:
			c.t.Fatalf("segment %s's set %v names broker %d whose copy is %+v (present %v): a partial copy counted as a replica", seg.ID, s.Replicas, spare, ci, has)
		case s.HasReplica(meta.BrokerID(spare)):
			w.replica = true
		case !has && (!s.Sealed || len(s.Replicas) != 3 || s.HasReplica(meta.BrokerID(dead))):
			c.t.Fatalf("broker %d's partial copy of %s was deleted while the set was %v (broker %d dead): under-replicated", spare, seg.ID, s.Replicas, dead)
		case !has:
			w.gone = true
		}
	}
	end := time.Now()
	c.untilPass(feed, 30*time.Second, "a heal pass that ended after the partial copy was resumed or collected", func(p *plugin.PassRecord) (bool, string) {
		judge(p)
		return p.Ended.After(end), passLine(p)
	})
	return w
}

// noLeftovers waits for a heal pass of the leader's, read from its
// history from the call on, that reports no leftover copy and no failed
// delete.
func (c *cluster) noLeftovers(within time.Duration) {
	c.t.Helper()
	c.untilPass(harness.NewPassFeed(time.Now()), within, "the leader reports no leftover copy", func(p *plugin.PassRecord) (bool, string) {
		return p.Report.LeftoverCopies == 0 && len(p.Report.LeftoverErrors) == 0, fmt.Sprintf("%s; leftovers %v, errors %v", passLine(p), p.Report.Leftovers, p.Report.LeftoverErrors)
	})
}

// TestNetPartitionLeavesPartialBackfill kills a follower of four brokers
// (each of its segments is backfilled, throttled, to the one spare
// broker), isolates the spare while bytes move to it (FAILS when the
// transfer was not in flight at the cut) and keeps it cut off until its
// fetch gave up (the catch-up idle timeout: "catchup: fetch failed" for
// the segment in its log, its backfill error counter moved; FAILS when it
// never does) with a partial copy on disk, short of
// the sealed size (FAILS when there is none). When the partition heals,
// the leader reports that copy as a partial_backfill leftover, no set
// names the spare while its copy is not whole, and the heal resumes it:
// the segment's next backfill to the spare starts at the partial copy's
// durable end (the spare's "backfill committed" line moves fewer bytes
// than the copy's size: exactly its size less the partial copy's) and the
// spare joins the set as a replica (or, had the heal chosen another
// target, the partial copy is collected, never while the segment is short
// of RF 3 live replicas). It ends with every segment at RF 3, every copy
// audited and no live broker holding a copy outside its set (the killed
// broker keeps its files: a dead broker is not probed).
func TestNetPartitionLeavesPartialBackfill(t *testing.T) {
	t.Parallel() // own namespaces and subnet: independent of every other test
	c, leader, before := netClusterOpts(t, clusterOpts{n: 4, tick: "500ms",
		extra: fmt.Sprintf("backfill_bytes_per_second = 65536\nleftover_delay = %q\n", netLeftoverDelay.String())}, 12)
	v := victim(c, before, leader)
	var segs []meta.Segment
	for _, s := range before.Segments {
		if s.HasReplica(meta.BrokerID(v)) {
			segs = append(segs, s)
		}
	}
	spare := 0
	for _, b := range c.brokers {
		if !segs[0].HasReplica(meta.BrokerID(b.id)) {
			spare = b.id
		}
	}
	errsBefore := c.metric(spare, "malachi_heal_backfill_errors_total")
	c.kill(v)
	seg := c.strikeBackfill(spare, segs)
	undo := c.undoLater(c.net().Isolate(spare))
	p, _ := c.b(spare).CopyPath(seg.ID)
	fi, err := os.Stat(p)
	if err != nil || fi.Size() >= seg.ByteSize+40 {
		t.Fatalf("the cut missed the transfer: %s on broker %d was %v after the cut (%v), sealed size %d", seg.ID, spare, fi, err, seg.ByteSize+40)
	}
	t.Logf("cut broker %d off with %s at %d of %d bytes", spare, seg.ID, fi.Size(), seg.ByteSize+40)
	c.eventually(90*time.Second, "the cut-off spare's fetch of the segment gives up (catchup: fetch failed)", func() bool {
		return len(logged(c.b(spare), "catchup: fetch failed", seg.ID)) > 0
	})
	if errs := c.metric(spare, "malachi_heal_backfill_errors_total"); errs <= errsBefore {
		t.Errorf("broker %d logged its fetch of %s failed, but malachi_heal_backfill_errors_total is %v (was %v)", spare, seg.ID, errs, errsBefore)
	}
	fi, err = os.Stat(p)
	if err != nil || fi.Size() == 0 || fi.Size() >= seg.ByteSize+40 {
		t.Fatalf("the failed backfill left no partial copy of %s on broker %d: %v (%v), sealed size %d", seg.ID, spare, fi, err, seg.ByteSize+40)
	}
	partial := fi.Size()
	cutSnap := c.metadataOrFail(leader)
	if s, _ := cutSnap.Segment(seg.ID); s.HasReplica(meta.BrokerID(spare)) {
		t.Fatalf("segment %s's set %v names broker %d with a partial copy of %d bytes", seg.ID, s.Replicas, spare, partial)
	}
	t.Logf("broker %d's fetch gave up: its copy of %s is %d of %d bytes", spare, seg.ID, partial, seg.ByteSize+40)
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	w := c.watchPartial(spare, v, seg, time.Now())
	if !w.reported {
		t.Fatalf("broker %d's partial copy of %s was never reported partial_backfill in the %d passes read (last: %s)", spare, seg.ID, w.passes, w.seen)
	}
	if w.replica {
		got := logged(c.b(spare), "backfill committed", seg.ID)
		if len(got) != 1 || got[0] != seg.ByteSize+40-partial {
			t.Errorf("broker %d's committed backfills of %s moved %v bytes: want one of %d, resuming at the partial copy's durable end (%d of %d bytes on disk)",
				spare, seg.ID, got, seg.ByteSize+40-partial, partial, seg.ByteSize+40)
		}
		t.Logf("reported partial_backfill, then resumed as a replica: the backfill moved %v bytes onto the %d already there (%d in all)", got, partial, seg.ByteSize+40)
	} else {
		t.Logf("reported partial_backfill, then collected (the heal chose another target)")
	}
	c.noLeftovers(60 * time.Second)
	after := c.netFinal(before, holds(v))
	for _, b := range c.brokers {
		files, err := b.CopyFiles()
		if err != nil || !c.alive(b.id) {
			continue // the killed broker keeps its files: it is not probed
		}
		for id := range files {
			if s, ok := after.Segment(id); ok && !s.HasReplica(meta.BrokerID(b.id)) {
				t.Errorf("live broker %d still holds a copy of %s outside its set %v", b.id, id, s.Replicas)
			}
		}
	}
}

// metadataOrFail is broker id's metadata; it fails the test on an error.
func (c *cluster) metadataOrFail(id int) meta.Snapshot {
	c.t.Helper()
	s, err := c.metadata(id)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}
