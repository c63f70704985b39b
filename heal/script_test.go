package heal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/malachi-log/malachi/meta"
)

// TestScripts runs the seed, read literally, as datadriven scripts
// (testdata/seed/*): each file quotes the seed sentence it tests in its
// first comment. `go test -run TestScripts ./heal/ -rewrite` rewrites the
// expected output.
//
// Directives:
//
//	world brokers=N rf=R        the segments, one a line: "id replica..." [active]
//	fact b=B seg=S kind=K [size=N] [confirmed]
//	down b=B ago=D              B did not answer; last seen D ago
//	policy [settle-batch=N]
//	plan                        the plan: actions, unsettled, settling, commands, failed
//	execute [fail-fill=S@B,...] one Coordinator pass: calls, ready commands, outcome
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/seed", func(t *testing.T, path string) {
		if b, err := os.ReadFile(path); err != nil || !strings.HasPrefix(string(b), "# P") {
			t.Fatalf("%s must start by quoting its seed sentence (# P<n>.<m> \"...\"): %v", path, err)
		}
		var w *world
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "world":
				var n, rf int
				d.ScanArgs(t, "brokers", &n)
				d.ScanArgs(t, "rf", &rf)
				w = newWorld(n, rf)
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					w.snap.Segments = append(w.snap.Segments, scriptSeg(t, line))
				}
				return ""
			case "fact":
				var b int
				var s, kind string
				var size int64
				d.ScanArgs(t, "b", &b)
				d.ScanArgs(t, "seg", &s)
				d.ScanArgs(t, "kind", &kind)
				d.MaybeScanArgs(t, "size", &size)
				var k Kind
				if err := k.UnmarshalText([]byte(kind)); err != nil {
					t.Fatal(err)
				}
				w.anomaly(meta.BrokerID(b), s, k, size, d.HasArg("confirmed"))
				return ""
			case "down":
				var b int
				var ago string
				d.ScanArgs(t, "b", &b)
				d.ScanArgs(t, "ago", &ago)
				dur, err := time.ParseDuration(ago)
				if err != nil {
					t.Fatal(err)
				}
				w.down(meta.BrokerID(b), dur)
				return ""
			case "policy":
				d.MaybeScanArgs(t, "settle-batch", &w.in.Policy.SettleBatch)
				return ""
			case "plan":
				return scriptPlan(w.plan())
			case "execute":
				return scriptExecute(t, w, d)
			}
			t.Fatalf("unknown directive %q", d.Cmd)
			return ""
		})
	})
}

func scriptSeg(t *testing.T, line string) meta.Segment {
	f := strings.Fields(line)
	if len(f) == 0 {
		t.Fatalf("empty segment line")
	}
	s := seg(f[0])
	for _, r := range f[1:] {
		if r == "active" {
			s.Sealed = false
			continue
		}
		id, err := strconv.Atoi(r)
		if err != nil {
			t.Fatalf("segment %q: %v", line, err)
		}
		s.Replicas = append(s.Replicas, meta.BrokerID(id))
	}
	return s
}

func scriptPlan(p Plan) string {
	var b strings.Builder
	b.WriteString(ops(p))
	r := &p.Report
	fmt.Fprintf(&b, "unsettled: %v\nsettling: %v\n", r.Unsettled, r.Settling)
	for _, c := range p.Commands {
		fmt.Fprintf(&b, "command: %s %v->%v\n", c.ID, c.Expected, c.Replicas)
	}
	for _, f := range r.Failed {
		fmt.Fprintf(&b, "failed: %s %s %v\n", f.Segment, f.Reason, f.Copies)
	}
	fmt.Fprintf(&b, "under_replicated=%d deferred=%d suspect=%v dead=%v\n", r.UnderReplicated, r.Deferred, r.Suspect, r.Dead)
	return b.String()
}

func scriptExecute(t *testing.T, w *world, d *datadriven.TestData) string {
	f := newFake(w)
	fail := map[CopyRef]bool{}
	if d.HasArg("fail-fill") {
		var refs []string
		d.ScanArgs(t, "fail-fill", &refs)
		for _, r := range refs {
			s, b, _ := strings.Cut(r, "@")
			id, err := strconv.Atoi(b)
			if err != nil {
				t.Fatal(err)
			}
			fail[CopyRef{meta.SegmentID(s), meta.BrokerID(id)}] = true
		}
	}
	f.failFill = func(b meta.BrokerID, s meta.SegmentID) bool { return fail[CopyRef{s, b}] }
	c := coordinator(t, f, w.in.Now)
	c.cfg.Policy = w.in.Policy
	c.cfg.Policy.HoldShare = -1
	seeAll(c, w.in.Seen)
	rep, err := c.Pass(context.Background())
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	var b strings.Builder
	lines := strings.Split(calls(f), "\n")
	slices.Sort(lines) // concurrent steps: their order is not the plan's
	fmt.Fprintf(&b, "calls (sorted):\n%s\n", strings.Join(lines, "\n"))
	for _, cmd := range rep.Ready {
		fmt.Fprintf(&b, "ready: %s %v->%v\n", cmd.ID, cmd.Expected, cmd.Replicas)
	}
	fmt.Fprintf(&b, "healed: %v\n", rep.Healed)
	for _, f := range rep.Failed {
		fmt.Fprintf(&b, "failed: %s %s %s\n", f.Segment, f.Reason, f.Err)
	}
	return b.String()
}

// TestScriptsCoverSeedRows: every row of seedRows has a script that
// quotes its sentence and names the row.
func TestScriptsCoverSeedRows(t *testing.T) {
	files, err := filepath.Glob("testdata/seed/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	text := all.String()
	for _, row := range seedRows {
		if !strings.Contains(text, "# "+row.sentence+" \""+row.quote) || !strings.Contains(text, "# row: "+row.name+"\n") {
			t.Errorf("no script quotes %s %q with row %q", row.sentence, row.quote, row.name)
		}
	}
}
