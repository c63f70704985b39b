package pass

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// an operator acknowledges a lost segment; later reports keep it,
// marked; a bad id or a segment that is not lost is refused and changes
// nothing.
func TestCoordinatorAcknowledge(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3), seg("b", 2, 3, 4)).anomaly(1, "a", heal.Corrupt, 0, false).anomaly(2, "a", heal.Corrupt, 0, false).anomaly(3, "a", heal.Corrupt, 0, false)
	f := newFake(w)
	c := coordinator(t, f, w.in.Now)
	if err := c.Acknowledge("a"); !errors.Is(err, heal.ErrNotLost) {
		t.Errorf("before any pass: %v", err)
	}
	rep, err := c.Pass(context.Background())
	if err != nil || !rep.IsLost("a") || rep.Lost[0].Acknowledged {
		t.Fatalf("pass: %v %+v", err, rep)
	}
	if err := c.Acknowledge("b"); !errors.Is(err, heal.ErrNotLost) || !strings.Contains(err.Error(), "b") {
		t.Errorf("healthy b: %v", err)
	}
	if err := c.Acknowledge("../x"); !errors.Is(err, heal.ErrInvalid) {
		t.Errorf("bad id: %v", err)
	}
	if err := c.Acknowledge("a"); err != nil {
		t.Fatal(err)
	}
	if l := c.Last(); !l.Lost[0].Acknowledged || l.LostAcknowledged != 1 || rep.Lost[0].Acknowledged {
		t.Errorf("Last %+v; the report handed out before changed: %v", l.Lost, rep.Lost[0].Acknowledged)
	}
	for pass := 0; pass < 2; pass++ {
		rep, _ = c.Pass(context.Background())
		if len(rep.Lost) != 1 || !rep.Lost[0].Acknowledged || rep.LostAcknowledged != 1 || rep.LostBytes != 1000 {
			t.Errorf("pass %d: lost %+v", pass, rep.Lost)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("calls for an all-corrupt segment: %v", f.calls)
	}
	// The scrubber was wrong (say a copy was restored): healthy, and the
	// acknowledgement is gone, so a later loss is news.
	f.reports[1], f.reports[2], f.reports[3] = heal.ProbeReport{Broker: 1}, heal.ProbeReport{Broker: 2}, heal.ProbeReport{Broker: 3}
	c.Pass(context.Background())
	f.reports[1] = heal.ProbeReport{Broker: 1, Facts: []heal.Fact{{Segment: "a", Flags: heal.FactCorrupt}}}
	f.reports[2] = heal.ProbeReport{Broker: 2, Facts: []heal.Fact{{Segment: "a", Flags: heal.FactCorrupt}}}
	f.reports[3] = heal.ProbeReport{Broker: 3, Facts: []heal.Fact{{Segment: "a", Flags: heal.FactCorrupt}}}
	if rep, _ := c.Pass(context.Background()); !rep.IsLost("a") || rep.Lost[0].Acknowledged {
		t.Errorf("lost again: %+v", rep.Lost)
	}
}

// refusingFake fails every backfill from the given sources, with err.
type refusingFake struct {
	*fakeBrokers
	mu    sync.Mutex
	from  map[meta.BrokerID]bool
	err   error
	reads map[meta.BrokerID]int // backfills per source
}

func (r *refusingFake) Backfill(ctx context.Context, target, source meta.BrokerID, s meta.Segment) (int64, error) {
	r.mu.Lock()
	r.reads[source]++
	bad := r.from[source]
	r.mu.Unlock()
	if bad {
		r.fakeBrokers.log("backfill %s %d<-%d refused", s.ID, target, source)
		return 0, r.err
	}
	return r.fakeBrokers.Backfill(ctx, target, source, s)
}

// a source whose backfill fails with ErrSourceRefused is read at
// most once while the segment is unchanged; an error that does not say so
// counts after RefuseAfter attempts (each to another target). Either way
// the read traffic stops and the segment is reported lost.
func TestCoordinatorRefusedSourceNotReadAgain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		perSrc   int // attempts per source before it counts as refused
		avoidTgt bool
	}{
		{"ErrSourceRefused counts at once", fmt.Errorf("catchup: copy does not match: %w", heal.ErrSourceRefused), 1, false},
		{"other errors count after RefuseAfter", errors.New("catchup: server error"), 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(9, 3, seg("a", 1, 2, 3)).dead(1)
			f := newFake(w)
			rf := &refusingFake{fakeBrokers: f, from: map[meta.BrokerID]bool{2: true, 3: true}, err: tc.err, reads: map[meta.BrokerID]int{}}
			c, err := New(Config{Metadata: f, Prober: f, Backfiller: rf, Settler: f, Deleter: f,
				Policy: heal.DefaultPolicy(), Now: func() time.Time { return w.in.Now }})
			if err != nil {
				t.Fatal(err)
			}
			seenLongAgo(c, w)
			lostFrom, avoided := -1, 0
			for pass := 0; pass < 12; pass++ {
				rep, err := c.Pass(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				avoided = max(avoided, len(folded(c).Avoid))
				if rep.IsLost("a") && lostFrom < 0 {
					lostFrom = pass
				}
				if lostFrom >= 0 && (!rep.IsLost("a") || rep.FailedReason("a") != heal.NoIntactSource) {
					t.Fatalf("pass %d: lost from pass %d, now %+v", pass, lostFrom, rep.Failed)
				}
			}
			if rf.reads[2] != tc.perSrc || rf.reads[3] != tc.perSrc || lostFrom != 2*tc.perSrc {
				t.Errorf("reads per source %v, lost from pass %d; want %d each, lost from pass %d\n%s", rf.reads, lostFrom, tc.perSrc, 2*tc.perSrc, calls(f))
			}
			// A refusal is the source's fault, not the target's.
			if got := avoided > 0; got != tc.avoidTgt {
				t.Errorf("targets avoided: %d at most, want some: %v", avoided, tc.avoidTgt)
			}
			// Something changes (broker 1 answers again, its copy intact):
			// the refusals lapse and the segment, healthy again, is not lost.
			f.reports[1] = heal.ProbeReport{Broker: 1}
			rf.from[2], rf.from[3] = false, false
			rep, _ := c.Pass(context.Background())
			if rep.IsLost("a") || len(rep.Lost) != 0 {
				t.Errorf("after the change: %+v", rep)
			}
		})
	}
}

// durableFailFake's targets cannot open their copies at their durable
// ends: every backfill fails before its source is read.
type durableFailFake struct{ *fakeBrokers }

func (d durableFailFake) Backfill(ctx context.Context, target, source meta.BrokerID, s meta.Segment) (int64, error) {
	d.fakeBrokers.log("backfill %s %d<-%d: no durable end", s.ID, target, source)
	return 0, fmt.Errorf("%w: disk: EIO", heal.ErrNoDurableEnd)
}

// A target that cannot say where its copy ends is the target's problem:
// it never counts against the source, and the segment is not lost.
func TestCoordinatorDurableEndFailureNotARefusal(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(2, "a", heal.Short, 10, false)
	f := newFake(w)
	c, err := New(Config{Metadata: f, Prober: f, Backfiller: durableFailFake{f}, Settler: f, Deleter: f,
		Policy: heal.DefaultPolicy(), Now: func() time.Time { return w.in.Now }})
	if err != nil {
		t.Fatal(err)
	}
	for pass := 0; pass < 5; pass++ {
		rep, err := c.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.IsLost("a") || rep.FailedReason("a") != heal.BackfillFailed || !strings.Contains(rep.Failed[0].Err, "durable end: disk: EIO") {
			t.Fatalf("pass %d: %+v", pass, rep.Failed)
		}
	}
	if st := folded(c); len(st.Refused) != 0 || len(st.Fills) != 0 {
		t.Errorf("refused %v fills %v", st.Refused, st.Fills)
	}
}
