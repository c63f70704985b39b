package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/testbed/demo"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/stage"
)

// faultRow is one stage of the fault suite: the fault it injects, the
// window it must strike in, and what its report must show beyond being
// injected and healed ("" when it does).
type faultRow struct {
	stage, fault, window string
	expect               func(f stage.Report) string
}

// faultRows are the stages of stage.Names, each once, in order.
var faultRows = []faultRow{
	{"kill", "kill -9 of a follower", "any time", func(f stage.Report) string {
		if f.GraceWaitSeconds == nil || *f.GraceWaitSeconds <= 0 || f.SecondsToHeal == nil || f.BytesRereplicated < 64<<10 {
			return fmt.Sprintf("grace %v, to heal %v, %d bytes re-replicated: want a grace wait, a heal time and one 64 KiB segment moved", f.GraceWaitSeconds, f.SecondsToHeal, f.BytesRereplicated)
		}
		return ""
	}},
	{"restart", "the killed broker started on its data", "after kill", nil},
	{"delete", "copy files removed", "any time", nil},
	{"truncate", "copy files cut short", "any time", func(f stage.Report) string {
		for _, c := range f.Copies {
			if c.SizeAfter >= c.SizeBefore {
				return fmt.Sprintf("truncate did not shorten: %+v", c)
			}
		}
		return ""
	}},
	{"extend", "random bytes appended", "any time", nil},
	{"bitflip", "one bit flipped in place", "scrubber on", func(f stage.Report) string {
		if !f.Detected || f.Note != "" {
			return "not found and repaired by the scrubber: " + f.Note
		}
		return ""
	}},
	{"latch", "copies latched in their broker", "any time", func(f stage.Report) string {
		if len(f.Latched) == 0 {
			return "no copy latched"
		}
		return ""
	}},
	{"decommission", "a follower drained", "no unsealed segment on it", func(f stage.Report) string {
		if lf := f.Figures; lf == nil || !lf.Drained || lf.BelowFactor != 0 || lf.SegmentsMoved == 0 {
			return fmt.Sprintf("lifecycle figures %+v: want drained, segments moved, none below RF", lf)
		}
		return said(f, `malachi decommission printed "decommissioning"`, "it can be stopped", `malachi decommission printed "decommission cancelled"`)
	}},
	{"maintenance", "a follower stopped in its window", "3 passes past the grace delay", func(f stage.Report) string {
		if lf := f.Figures; lf == nil || lf.SetsChanged != 0 || lf.PassesPastGrace < 3 || f.BytesRereplicated != 0 {
			return fmt.Sprintf("lifecycle figures %+v, %d bytes re-replicated: want no set changed, no byte moved", lf, f.BytesRereplicated)
		}
		return said(f, `malachi maintenance printed "in maintenance until"`, "refused, naming max_maintenance",
			`malachi status printed "not answering; its absence is not a failure"`, `malachi maintenance printed "maintenance ended"`)
	}},
	{"rebalance", "a follower emptied, then refilled", "rebalancer on", func(f stage.Report) string {
		if r := f.Figures; r == nil || r.After == nil || !r.After.Within || r.Received == 0 {
			return fmt.Sprintf("rebalance figures %+v: want the emptied broker refilled within 10%% of the mean", r)
		}
		return said(f, `malachi decommission printed "decommissioning"`, `malachi decommission printed "decommission cancelled"`)
	}},
	{"leader", "kill -9 of the leader", "any time", func(f stage.Report) string {
		if f.NewLeader == 0 {
			return "no new leader named"
		}
		return ""
	}},
	{"pause", "SIGSTOP of a follower past the grace delay", "until its replicas moved", nil},
	{"swap", "an empty data directory in place of a follower's", "any time", nil},
	{"diskfull", "the copies disk filled, a second broker killed", "root", func(f stage.Report) string {
		if len(f.Copies) == 0 || !strings.Contains(f.Note, `"no space left on device" in the logs`) {
			return "no copy cut, or ENOSPC not in the logs: " + f.Note
		}
		return ""
	}},
	{"readonly", "the copies disk read-only under its broker", "root", func(f stage.Report) string {
		if len(f.Copies) == 0 || !strings.Contains(f.Note, `"read-only file system" in the logs`) {
			return "no copy cut, or EROFS not in the logs: " + f.Note
		}
		return ""
	}},
	{"backfill-kill", "kill -9 of a backfill's target", "bytes seen moving to it", func(f stage.Report) string {
		if !strings.Contains(f.What, "mid-backfill") || !strings.Contains(f.Note, "bytes moving") {
			return "the second kill did not strike a transfer in flight: " + f.Note
		}
		return ""
	}},
	{"nospare", "a copy latched with RF brokers running", "no spare broker", func(f stage.Report) string {
		if len(f.Latched) != 1 || !strings.Contains(f.Note, "no_spare_broker") {
			return "not reported no_spare_broker: " + f.Note
		}
		return ""
	}},
	{"lost", "every copy of two segments destroyed", "ten passes reported", func(f stage.Report) string {
		for _, ds := range f.Destroyed {
			if !ds.Acknowledged || ds.PassesReported < 10 || ds.PassesNotReporting != 0 {
				return fmt.Sprintf("destroyed %+v: want reported lost on ten passes or more, every one, and acknowledged", ds)
			}
		}
		if len(f.Destroyed) != 2 {
			return fmt.Sprintf("%d segments destroyed, want 2", len(f.Destroyed))
		}
		return ""
	}},
}

// said says which of wants f's note lacks ("" when none): the lifecycle
// stages note each operator's command given through the malachi CLI, and
// what it printed that the stage required.
func said(f stage.Report, wants ...string) string {
	for _, w := range wants {
		if !strings.Contains(f.Note, w) {
			return fmt.Sprintf("the note lacks %q (the stage gives the operator's commands through the malachi CLI): %s", w, f.Note)
		}
	}
	return ""
}

// TestFaultSuite is the fault suite in CI: `malachi-demo` with every stage
// on 5 real brokers at RF 3 and its default Kafka clients (the run of
// `make faults`, smaller), then a row per stage. Each fault must be
// injected and survived: healed back to RF with every copy verified, or,
// for the lost stage, both destroyed segments reported lost on every pass
// and nothing else lost. The disk
// stages need root for a loop-mounted ext4; without it they must say so,
// and only they may be skipped.
func TestFaultSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts 5 real brokers for every stage")
	}
	var rows []string
	for _, r := range faultRows {
		rows = append(rows, r.stage)
	}
	if strings.Join(rows, ",") != strings.Join(stage.Names, ",") {
		t.Fatalf("rows %v, want one per stage of stage.Names %v", rows, stage.Names)
	}
	dir := t.TempDir()
	// The lifecycle stages give the operator's commands through cli.
	o, err := demo.ParseFlags([]string{"--malachid", binary, "--malachi", cli, "--brokers", "5", "--rf", "3", "--segments", "40", "--segment-size", "64KiB",
		"--copies", "2", "--json", "--dir", dir, "--seed", "11", "--stage-timeout", "60s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out, progress bytes.Buffer
	code := demo.Run(context.Background(), o, &out, &progress)
	defer func() {
		if t.Failed() {
			t.Logf("progress:\n%s", progress.String())
		}
	}()
	var rep demo.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not one JSON report: %v\n%s", err, out.String())
	}
	if code != 0 || !rep.OK {
		t.Errorf("exit %d, ok %v: %s", code, rep.OK, rep.Error)
		if c := rep.Clients; c != nil && !c.OK() {
			// Which records went missing, and what the brokers logged of
			// the partitions' segments.
			t.Logf("clients: %s", strings.Join(c.AllViolations(), "\n"))
			names := harness.SegmentsNamed(c.AllViolations()...)
			t.Logf("broker log lines naming %s:\n%s", names, harness.LogExcerpt(dir, names, 300))
		}
	}
	byStage := map[string]stage.Report{}
	for _, f := range rep.Faults {
		byStage[f.Stage] = f
		if f.Error != "" {
			// What the brokers logged of the segments the failure names.
			t.Logf("stage %s: broker log lines naming %s:\n%s", f.Stage, harness.SegmentsNamed(f.Error),
				harness.LogExcerpt(dir, harness.SegmentsNamed(f.Error), 150))
		}
	}
	skipped := 0
	for _, r := range faultRows {
		t.Run(r.stage, func(t *testing.T) {
			f, ok := byStage[r.stage]
			switch {
			case !ok:
				t.Fatalf("stage %s (%s) did not run", r.stage, r.fault)
			case f.Skipped != "" && r.window == "root" && os.Geteuid() != 0:
				skipped++
				t.Skipf("%s: %s", r.fault, f.Skipped)
			case !f.Injected || !f.Healed:
				t.Fatalf("%s (window: %s): injected %v, healed %v, skipped %q, error %q, note %q", r.fault, r.window, f.Injected, f.Healed, f.Skipped, f.Error, f.Note)
			}
			if r.expect != nil {
				if why := r.expect(f); why != "" {
					t.Errorf("%s: %s", r.fault, why)
				}
			}
		})
	}
	checkSuiteSummary(t, &rep, skipped)
}

// checkSuiteSummary checks the report's end state and summary: nothing
// under-replicated, failed or lost, the two segments the lost stage
// destroyed set apart, every replica verified, and bytes moved.
func checkSuiteSummary(t *testing.T, rep *demo.Report, skipped int) {
	t.Helper()
	if rep.UnderReplicated != 0 || rep.Failed != 0 || rep.DataLossSegments != 0 {
		t.Errorf("at the end: %d under-replicated, %d failed, %d lost", rep.UnderReplicated, rep.Failed, rep.DataLossSegments)
	}
	// The 40 loaded, plus the new segments the disk stages write (and
	// must not lose) when a loop disk can be had, plus the clients' Kafka
	// partition segments sealed when a fault rolled the partition.
	if n := rep.Segments - rep.PartitionSegments; n < 40 || n > 40+2*5 {
		t.Errorf("segments = %d (%d of them Kafka partition segments), want the 40 loaded plus at most 10 written by the disk stages", rep.Segments, rep.PartitionSegments)
	}
	if c := rep.Clients; c == nil || c.Group == nil || c.Acknowledged == 0 || c.Group.Commits == 0 {
		t.Errorf("clients %+v: the demo runs producers and a committing group consumer by default", c)
	}
	if rep.SecondsToHeal == nil || rep.GraceWaitSeconds == nil {
		t.Errorf("seconds_to_heal %v, grace_wait_seconds %v: want the kill's", rep.SecondsToHeal, rep.GraceWaitSeconds)
	}
	s := rep.Summary
	if want := len(stage.Names) - skipped; s.FaultsInjected != want || s.FaultsSurvived != want {
		t.Errorf("summary: %d faults injected, %d survived, want %d and %d", s.FaultsInjected, s.FaultsSurvived, want, want)
	}
	if s.SegmentsLost != 0 || s.SegmentsDestroyed != 2 || s.SegmentsHealthy != s.SegmentsChecked-2 {
		t.Errorf("summary: %d segments checked, %d healthy, %d destroyed on purpose, %d lost; want 2 destroyed by the lost stage and nothing lost", s.SegmentsChecked, s.SegmentsHealthy, s.SegmentsDestroyed, s.SegmentsLost)
	}
	if s.CopiesVerified < s.CopiesVerifiedAtEnd || s.CopiesVerifiedAtEnd < 3*(s.SegmentsChecked-2) {
		t.Errorf("summary: %d copies verified over the run, %d at the end, want every replica of the %d healthy segments", s.CopiesVerified, s.CopiesVerifiedAtEnd, s.SegmentsChecked-2)
	}
	if s.BytesRereplicated < 64<<10 {
		t.Errorf("summary: %d bytes re-replicated", s.BytesRereplicated)
	}
}
