package heal

import (
	"fmt"
	"strings"
	"time"

	"github.com/malachi-log/malachi/meta"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// seg returns a sealed segment of 1000 bytes on the given replicas.
func seg(id string, replicas ...meta.BrokerID) meta.Segment {
	return meta.Segment{ID: meta.SegmentID(id), Length: 10, ByteSize: 1000, Sealed: true, Checksum: meta.CRC32C(7), Replicas: replicas, Version: 1}
}

// brokers returns brokers 1..n; racks, when given, are assigned in turn.
func brokers(n int, racks ...string) []meta.Broker {
	var bs []meta.Broker
	for i := 1; i <= n; i++ {
		b := meta.Broker{ID: meta.BrokerID(i)}
		if len(racks) > 0 {
			b.Rack = racks[(i-1)%len(racks)]
		}
		bs = append(bs, b)
	}
	return bs
}

// world is a compact way to write a pass's input in tests.
type world struct {
	in   Input         // but its View: input() builds it from snap
	snap meta.Snapshot // the metadata, edited in place by tests
}

// input returns w.in with a view of w.snap.
func (w *world) input() Input {
	in := w.in
	in.View = meta.NewView(w.snap)
	return in
}

func newWorld(n, rf int, segs ...meta.Segment) *world {
	w := &world{in: Input{
		Now:    t0,
		Policy: Policy{Grace: 10 * time.Second, SettleBatch: 64},
	}, snap: meta.Snapshot{Index: 7, ReplicationFactor: rf, Brokers: brokers(n), Segments: segs}}
	for i := 1; i <= n; i++ {
		w.up(meta.BrokerID(i))
	}
	return w
}

// up gives broker b a (clean) report and a fresh last-seen time.
func (w *world) up(b meta.BrokerID) *world {
	w.report(b)
	w.seen(b, w.in.Now)
	return w
}

func (w *world) report(b meta.BrokerID) *ProbeReport {
	for i := range w.in.Reports {
		if w.in.Reports[i].Broker == b {
			return &w.in.Reports[i]
		}
	}
	w.in.Reports = append(w.in.Reports, ProbeReport{Broker: b, Index: w.snap.Index})
	return &w.in.Reports[len(w.in.Reports)-1]
}

func (w *world) seen(b meta.BrokerID, at time.Time) *world {
	for i := range w.in.Seen {
		if w.in.Seen[i].Broker == b {
			w.in.Seen[i].At = at
			return w
		}
	}
	w.in.Seen = append(w.in.Seen, Seen{Broker: b, At: at})
	return w
}

// down removes b's report and sets its last-seen time ago before now.
func (w *world) down(b meta.BrokerID, ago time.Duration) *world {
	for i := range w.in.Reports {
		if w.in.Reports[i].Broker == b {
			w.in.Reports = append(w.in.Reports[:i], w.in.Reports[i+1:]...)
			break
		}
	}
	return w.seen(b, w.in.Now.Add(-ago))
}

// dead marks b dead: unseen for longer than the grace delay.
func (w *world) dead(b meta.BrokerID) *world { return w.down(b, time.Hour) }

// anomaly lists, in b's report, the fact a broker observes of a copy of s
// that is of kind k (size for Short and Overrun; confirmed: an overrun the
// broker has confirmed, which it would not list). It panics if the fact
// does not classify back to k against s's metadata.
func (w *world) anomaly(b meta.BrokerID, s string, k Kind, size int64, confirmed bool) *world {
	r := w.report(b)
	f := factOf(meta.SegmentID(s), k, size, confirmed)
	if sg, ok := w.snap.Segment(f.Segment); ok {
		want := Anomaly{Segment: f.Segment, Kind: k}
		if k == Short || k == Overrun {
			want.Size = size
		}
		if confirmed {
			want = Anomaly{Segment: f.Segment}
		}
		if got := Classify(sg, &f); got != want {
			panic(fmt.Sprintf("fact %+v classifies as %+v, want %+v", f, got, want))
		}
	}
	r.Facts = append(r.Facts, f)
	return w
}

// factOf returns the fact a broker observes of a copy of s of kind k.
func factOf(s meta.SegmentID, k Kind, size int64, confirmed bool) Fact {
	f := Fact{Segment: s}
	switch k {
	case Missing:
		f.Flags = FactMissing
	case Latched:
		f.Flags = FactLatched
	case TimedOut:
		f.Flags = FactTimedOut
	case Corrupt:
		f.Flags, f.Size = FactCorrupt, size
	case Short, Overrun:
		f.Size = size
	default:
		panic(fmt.Sprintf("factOf: kind %s", k))
	}
	if confirmed {
		f.Flags |= FactConfirmed
	}
	return f
}

func (w *world) plan() Plan {
	var p Planner
	pl, err := p.Plan(w.input())
	if err != nil {
		panic(err)
	}
	return pl
}

// ops renders the actions compactly: "op seg target<-source" per line.
func ops(p Plan) string {
	var b strings.Builder
	for _, a := range p.Actions {
		switch {
		case a.Op.IsBackfill():
			fmt.Fprintf(&b, "%s %s %d<-%d", a.Op, a.Segment.ID, a.Target, a.Source)
			if a.Op == ResumeShortCopy {
				fmt.Fprintf(&b, " from=%d", a.From)
			}
		case a.Op == SetReplicas:
			fmt.Fprintf(&b, "%s %s %v->%v", a.Op, a.Segment.ID, a.Command.Expected, a.Command.Replicas)
		case a.Op == ReportFailed:
			fmt.Fprintf(&b, "%s %s %s", a.Op, a.Segment.ID, a.Reason)
			if len(a.Copies) > 0 {
				fmt.Fprintf(&b, " %v", a.Copies)
			}
		default:
			fmt.Fprintf(&b, "%s %s %d", a.Op, a.Segment.ID, a.Target)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
