package pass

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// TestScripts runs the seed, read literally, as datadriven scripts: one
// file per paragraph, testdata/seed/P<n>, whose rows are each headed by
// the sentence they test, quoted (# P<n>.<m> "..."), and named (# row:
// ...). `go test -run TestScripts ./pass/ -rewrite` rewrites the expected
// output.
//
// Directives:
//
//	world brokers=N rf=R        the segments, one a line: "id replica..." [active]
//	fact b=B seg=S kind=K [size=N] [confirmed]   B's fact of its copy of S (replacing one)
//	intact b=B seg=S            B reports its copy of S intact again (no fact)
//	down b=B ago=D              B did not answer; last seen D ago
//	up b=B                      B answers again, seen now
//	authfail b=B                B answers but cannot be authenticated (no report)
//	policy [settle-batch=N]
//	plan                        the plan: actions, unsettled, settling, commands, failed
//	execute [fail-fill=S@B,...] [fail-settle=...] [fail-confirm=...] [cancel-after=S]
//	                            one pass of the world's Coordinator (kept from pass to
//	                            pass of one world): calls, ready commands, outcome
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/seed", func(t *testing.T, path string) {
		if b, err := os.ReadFile(path); err != nil || !strings.HasPrefix(string(b), "# P") {
			t.Fatalf("%s must start by quoting its seed sentence (# P<n>.<m> \"...\"): %v", path, err)
		}
		var w *scriptWorld
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "world" {
				w = newScriptWorld(t, d)
				return ""
			}
			return w.run(t, d)
		})
	})
}

// scriptWorld is a world and, once a row executes, its Coordinator.
type scriptWorld struct {
	*world
	auth map[meta.BrokerID]bool // brokers that fail authentication
	f    *scriptBrokers
	c    *Coordinator
}

func newScriptWorld(t *testing.T, d *datadriven.TestData) *scriptWorld {
	var n, rf int
	d.ScanArgs(t, "brokers", &n)
	d.ScanArgs(t, "rf", &rf)
	w := &scriptWorld{world: newWorld(n, rf), auth: map[meta.BrokerID]bool{}}
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		w.snap.Segments = append(w.snap.Segments, scriptSeg(t, line))
	}
	return w
}

func (w *scriptWorld) run(t *testing.T, d *datadriven.TestData) string {
	var b int
	if d.HasArg("b") {
		d.ScanArgs(t, "b", &b)
	}
	switch d.Cmd {
	case "fact":
		var s, kind string
		var size int64
		d.ScanArgs(t, "seg", &s)
		d.ScanArgs(t, "kind", &kind)
		d.MaybeScanArgs(t, "size", &size)
		var k heal.Kind
		if err := k.UnmarshalText([]byte(kind)); err != nil || k == 0 {
			t.Fatalf("anomaly kind %q: %v", kind, err)
		}
		w.intact(meta.BrokerID(b), s)
		w.anomaly(meta.BrokerID(b), s, k, size, d.HasArg("confirmed"))
	case "intact":
		var s string
		d.ScanArgs(t, "seg", &s)
		w.intact(meta.BrokerID(b), s)
	case "down":
		var ago string
		d.ScanArgs(t, "ago", &ago)
		dur, err := time.ParseDuration(ago)
		if err != nil {
			t.Fatal(err)
		}
		w.down(meta.BrokerID(b), dur)
	case "up":
		delete(w.auth, meta.BrokerID(b))
		w.up(meta.BrokerID(b))
	case "authfail":
		w.down(meta.BrokerID(b), 0)
		w.auth[meta.BrokerID(b)] = true
	case "policy":
		d.MaybeScanArgs(t, "settle-batch", &w.in.Policy.SettleBatch)
	case "plan":
		return scriptPlan(w.plan())
	case "execute":
		return w.execute(t, d)
	default:
		t.Fatalf("unknown directive %q", d.Cmd)
	}
	return ""
}

// intact drops b's facts of its copy of s.
func (w *scriptWorld) intact(b meta.BrokerID, s string) {
	r := w.report(b)
	r.Facts = slices.DeleteFunc(r.Facts, func(f heal.Fact) bool { return f.Segment == meta.SegmentID(s) })
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

func scriptPlan(p heal.Plan) string {
	var b strings.Builder
	b.WriteString(ops(p))
	r := &p.Report
	for _, c := range p.Commands {
		fmt.Fprintf(&b, "command: %s %v->%v\n", c.ID, c.Expected, c.Replicas)
	}
	for _, f := range r.Failed {
		fmt.Fprintf(&b, "failed: %s %s %v\n", f.Segment, f.Reason, f.Copies)
	}
	b.WriteString(scriptCounts(r))
	return b.String()
}

// scriptCounts is what plan and execute both print of a Report.
func scriptCounts(r *heal.Report) string {
	return fmt.Sprintf("unsettled: %v\nsettling: %v\nsealed=%d active=%d under_replicated=%d deferred=%d suspect=%v dead=%v\n",
		r.Unsettled, r.Settling, r.Sealed, r.Active, r.UnderReplicated, r.Deferred, r.Suspect, r.Dead)
}

// scriptBrokers are the fake brokers of a script's world: they fail the
// settles, confirmations and backfills they are told to, roll back a
// backfill cancelled while it ran, and answer the probe of a broker
// failing authentication with ErrUnauthenticated.
type scriptBrokers struct {
	*fakeBrokers
	auth                 map[meta.BrokerID]bool
	failSettle, failConf map[heal.CopyRef]bool
}

func (f *scriptBrokers) Probe(ctx context.Context, b meta.BrokerID, index uint64) (heal.ProbeReport, error) {
	if f.auth[b] {
		return heal.ProbeReport{}, fmt.Errorf("broker %d: %w", b, heal.ErrUnauthenticated)
	}
	return f.fakeBrokers.Probe(ctx, b, index)
}

func (f *scriptBrokers) Settle(ctx context.Context, b meta.BrokerID, segs []meta.Segment, errs []error) error {
	return f.eachLogged(ctx, "settle", f.failSettle, b, segs, errs)
}

func (f *scriptBrokers) Confirm(ctx context.Context, b meta.BrokerID, segs []meta.Segment, errs []error) error {
	return f.eachLogged(ctx, "confirm", f.failConf, b, segs, errs)
}

// eachLogged logs verb on every copy of segs on b, failing those in fail.
func (f *scriptBrokers) eachLogged(ctx context.Context, verb string, fail map[heal.CopyRef]bool, b meta.BrokerID, segs []meta.Segment, errs []error) error {
	return eachCopy(ctx, b, segs, errs, func(ctx context.Context, b meta.BrokerID, s meta.Segment) error {
		f.log("%s %s@%d", verb, s.ID, b)
		if fail[heal.CopyRef{Segment: s.ID, Broker: b}] {
			return fmt.Errorf("injected: %s failed", verb)
		}
		return nil
	})
}

// Backfill rolls back a backfill whose pass was cancelled while it ran,
// as the Backfiller's contract says.
func (f *scriptBrokers) Backfill(ctx context.Context, target, source meta.BrokerID, s meta.Segment) (int64, error) {
	n, err := f.fakeBrokers.Backfill(ctx, target, source, s)
	if err == nil && ctx.Err() != nil {
		return 0, fmt.Errorf("backfill %s to %d rolled back: %w", s.ID, target, ctx.Err())
	}
	return n, err
}

// copies parses the copies "S@B,..." of argument key, if given.
func copies(t *testing.T, d *datadriven.TestData, key string) map[heal.CopyRef]bool {
	out := map[heal.CopyRef]bool{}
	if !d.HasArg(key) {
		return out
	}
	var refs []string
	d.ScanArgs(t, key, &refs)
	for _, r := range refs {
		s, b, _ := strings.Cut(r, "@")
		id, err := strconv.Atoi(b)
		if err != nil {
			t.Fatal(err)
		}
		out[heal.CopyRef{Segment: meta.SegmentID(s), Broker: meta.BrokerID(id)}] = true
	}
	return out
}

// execute runs one pass of the world's Coordinator over the world as it
// is now, then records the commands it applied in the world's metadata.
func (w *scriptWorld) execute(t *testing.T, d *datadriven.TestData) string {
	if w.c == nil {
		w.f = &scriptBrokers{fakeBrokers: newFake(w.world), auth: w.auth}
		c, err := New(Config{Metadata: w.f, Prober: w.f, Backfiller: w.f, Settler: w.f, Deleter: w.f,
			Policy: w.in.Policy, Now: func() time.Time { return w.in.Now }})
		if err != nil {
			t.Fatal(err)
		}
		c.cfg.Policy.HoldShare = -1
		w.c = c
	}
	f := w.f
	f.snap, f.calls, f.reports = w.snap, nil, map[meta.BrokerID]heal.ProbeReport{}
	for _, r := range w.in.Reports {
		f.reports[r.Broker] = r
	}
	seeAll(w.c, w.in.Seen)
	fill := copies(t, d, "fail-fill")
	f.failFill = func(b meta.BrokerID, s meta.SegmentID) bool { return fill[heal.CopyRef{Segment: s, Broker: b}] }
	f.failSettle, f.failConf = copies(t, d, "fail-settle"), copies(t, d, "fail-confirm")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.onCall, w.c.cfg.Concurrency = nil, 8
	if d.HasArg("cancel-after") {
		var s string
		d.ScanArgs(t, "cancel-after", &s)
		w.c.cfg.Concurrency = 1 // one step at a time, in plan order
		f.onCall = func(call string) {
			if strings.HasPrefix(call, "backfill "+s+" ") {
				cancel() // leadership lost while this backfill runs
			}
		}
	}
	var mu sync.Mutex
	var recorded []meta.SegmentID
	f.failSet = func(id meta.SegmentID) error { // every command is recorded
		mu.Lock()
		defer mu.Unlock()
		recorded = append(recorded, id)
		return nil
	}
	rep, err := w.c.Pass(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	w.record(rep.Ready, recorded)
	return scriptExecuted(f.fakeBrokers, &rep)
}

// record applies to the world's metadata the commands of ready whose
// segment is in recorded.
func (w *scriptWorld) record(ready []meta.SetSegmentReplicas, recorded []meta.SegmentID) {
	for _, cmd := range ready {
		if !slices.Contains(recorded, cmd.ID) {
			continue
		}
		w.snap.Segments = slices.Clone(w.snap.Segments) // earlier views keep theirs
		for i := range w.snap.Segments {
			if s := &w.snap.Segments[i]; s.ID == cmd.ID {
				s.Replicas, s.Version = slices.Clone(cmd.Replicas), s.Version+1
			}
		}
	}
}

func scriptExecuted(f *fakeBrokers, rep *heal.Report) string {
	var b strings.Builder
	if got := calls(f); got == "" {
		b.WriteString("calls: none\n")
	} else {
		lines := strings.Split(got, "\n")
		slices.Sort(lines) // concurrent steps: their order is not the plan's
		fmt.Fprintf(&b, "calls (sorted):\n%s\n", strings.Join(lines, "\n"))
	}
	for _, cmd := range rep.Ready {
		fmt.Fprintf(&b, "ready: %s %v->%v\n", cmd.ID, cmd.Expected, cmd.Replicas)
	}
	fmt.Fprintf(&b, "healed: %v confirmed: %v\n", rep.Healed, rep.Confirmed)
	for _, f := range rep.Failed {
		fmt.Fprintf(&b, "failed: %s %s %v", f.Segment, f.Reason, f.Copies)
		if f.Err != "" {
			fmt.Fprintf(&b, ": %s", f.Err)
		}
		b.WriteByte('\n')
	}
	if rep.Aborted {
		b.WriteString("aborted\n")
	}
	b.WriteString(scriptCounts(rep))
	return b.String()
}

// quoteLine is a script's heading of a row group: the sentence it tests.
var quoteLine = regexp.MustCompile(`^# (P(\d+)\.\d+) "(.*)"$`)

// TestSeedCoverage: every sentence of the seed that states a rule for heal
// is quoted, exactly, by a row group of its paragraph's script; every row
// follows such a quote; every script is listed in doc.go.
func TestSeedCoverage(t *testing.T) {
	sents := seedSentences(t)
	if len(sents) < 20 {
		t.Fatalf("parsed %d sentences from the seed, want more", len(sents))
	}
	files, err := filepath.Glob("testdata/seed/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, path := range files {
		name := filepath.Base(path)
		if !strings.Contains(string(doc), "testdata/seed/"+name) {
			t.Errorf("doc.go does not list the script testdata/seed/%s", name)
		}
		for q, rows := range scriptQuotes(t, path) {
			covered[q.id] = true
			switch {
			case sents[q.id] == "":
				t.Errorf("%s quotes %s, which the seed does not have", path, q.id)
			case sents[q.id] != q.text:
				t.Errorf("%s: %s is %q, the script quotes %q", path, q.id, sents[q.id], q.text)
			case "P"+q.paragraph != name:
				t.Errorf("%s quotes %s: it belongs in testdata/seed/P%s", path, q.id, q.paragraph)
			case rows == 0:
				t.Errorf("%s quotes %s and has no row for it", path, q.id)
			}
		}
	}
	for id, s := range sents {
		if covered[id] == (notHeal[id] != "") {
			t.Errorf("seed sentence %s: a script row %v, a reason it states no rule %q (want exactly one): %.80q", id, covered[id], notHeal[id], s)
		}
	}
}

// sentenceQuote is one quote of a script: the sentence's id and text.
type sentenceQuote struct{ id, paragraph, text string }

// scriptQuotes returns the sentences path quotes with the number of rows
// under each; a row before any quote fails t.
func scriptQuotes(t *testing.T, path string) map[sentenceQuote]int {
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	out := map[sentenceQuote]int{}
	var cur *sentenceQuote
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := quoteLine.FindStringSubmatch(line); m != nil {
			cur = &sentenceQuote{id: m[1], paragraph: m[2], text: strings.ReplaceAll(m[3], `\"`, `"`)}
			out[*cur] += 0
			continue
		}
		if strings.HasPrefix(line, "# row: ") {
			if cur == nil {
				t.Errorf("%s: %q comes before any quoted sentence", path, line)
				continue
			}
			out[*cur]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
