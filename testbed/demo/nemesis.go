package demo

import (
	"context"
	"sync"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/nemesis"
	"github.com/malachi-log/malachi/testbed/stage"
)

// runNemesis runs the randomized nemesis (testbed/nemesis) after the
// baseline load, its report the demo report's nemesis section.
func (d *demo) runNemesis(ctx context.Context) error {
	recs, rsize := stage.RecordShape(d.o.SegmentSize)
	o := nemesis.Options{Seed: d.seed, Duration: d.o.NemesisDuration, Kinds: d.o.NemesisKinds,
		NoDisk: d.o.NemesisNoDisk, NoNet: d.o.NemesisNoNet, Brokers: d.o.Brokers, RF: d.o.RF,
		Grace: d.o.Grace, Tick: d.o.Tick, RaftTimeout: d.o.RaftTimeout, Timeout: d.o.StageTimeout,
		BackfillRate: d.o.BackfillRate, Records: recs, RecordSize: rsize, Dir: d.o.Dir}
	rep, err := nemesis.Run(ctx, &nemesisEnv{d: d}, o)
	if rep != nil {
		d.rep.Nemesis = rep
	}
	return err
}

// nemesisEnv is the demo as the nemesis's runner (nemesis.Env); mu
// serializes Forget, called from each fault's goroutine.
type nemesisEnv struct {
	d  *demo
	mu sync.Mutex
}

func (e *nemesisEnv) Cluster() *harness.Cluster       { return e.d.env.C }
func (e *nemesisEnv) Logf(format string, args ...any) { e.d.logf(format, args...) }
func (e *nemesisEnv) Note(line string)                { e.d.rep.Notes = append(e.d.rep.Notes, line) }
func (e *nemesisEnv) LeaderClient(ctx context.Context) *admin.Client {
	return e.d.env.C.LeaderClient(ctx)
}
func (e *nemesisEnv) Live() map[meta.BrokerID]bool { return e.d.env.C.Live() }

// WaitHealed is the demo's wait for a healthy cluster, its passes
// counted in a report of its own; last is the demo's last full view's.
func (e *nemesisEnv) WaitHealed(ctx context.Context, label string, timeout time.Duration) (*meta.Snapshot, error) {
	fr := stage.Report{Stage: "nemesis"}
	err := e.d.env.WaitHealed(ctx, &fr, label, time.Now(), nil, timeout)
	if last, _ := e.d.env.Last(); last != nil {
		return &last.Snap, err
	}
	return nil, err
}

// Forget drops the audit's cached results for the file at path and for
// every file under it.
func (e *nemesisEnv) Forget(path string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.d.env.Aud.Forget(path)
	e.d.env.Aud.ForgetUnder(path)
}

func (e *nemesisEnv) BackfillMark(ctx context.Context) func(context.Context) int64 {
	before := e.d.env.C.MarkBackfill(ctx)
	return func(ctx context.Context) int64 { return before.Since(ctx, e.d.env.C) }
}

// Checked counts the sealed segments of the nemesis's last check, the
// partitions' too: later partition seals are counted from there.
func (e *nemesisEnv) Checked(segments map[meta.SegmentID]meta.Segment) {
	e.d.env.CountSealed(segments)
}
