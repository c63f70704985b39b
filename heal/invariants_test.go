//go:build invariants

package heal

import (
	"strings"
	"testing"

	"github.com/malachi-log/malachi/meta"
)

// TestPlanInvariantsCatch: each checked property, broken on purpose in a
// plan the planner made, is reported.
func TestPlanInvariantsCatch(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(2, "a", Latched, 0, false)
	plan := w.plan()
	view := meta.NewView(w.snap)
	if err := planInvariants(view, &plan); err != nil {
		t.Fatalf("a planner's plan fails: %v", err)
	}
	for _, tc := range []struct {
		name   string
		break_ func(p *Plan)
		want   string
	}{
		{"broker twice", func(p *Plan) { setCmd(p).Replicas = []meta.BrokerID{1, 3, 3} }, "twice"},
		{"stale expected", func(p *Plan) { setCmd(p).Expected = []meta.BrokerID{1, 2} }, "expects"},
		{"drops every copy", func(p *Plan) {
			setCmd(p).Replicas = []meta.BrokerID{9}
		}, "keeps no copy"},
		{"delete kept", func(p *Plan) { setCmd(p).Replicas = []meta.BrokerID{1, 2, 4} }, "keeps it"},
	} {
		p := w.plan()
		tc.break_(&p)
		err := planInvariants(view, &p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func setCmd(p *Plan) *meta.SetSegmentReplicas {
	for i := range p.Actions {
		if p.Actions[i].Op == SetReplicas {
			return &p.Actions[i].Command
		}
	}
	panic("no set_replicas")
}
