package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/healrun"
)

// validateCompare checks the flags of --backfill-rate compare: the kill
// only, at least 4 brokers at rf 3, at least one client.
func (o *Options) validateCompare() error {
	switch {
	case o.Nemesis != "":
		return usageErr("--backfill-rate compare runs the kill stage, not --nemesis")
	case o.Chosen && (len(o.Stages) != 1 || o.Stages[0] != "kill"):
		return usageErr("--backfill-rate compare runs the kill stage only: --faults kill, not %v", o.Stages)
	case o.Clients < 1 || o.Clients > 64:
		return usageErr("--backfill-rate compare needs --clients 1 to 64 (what a heal costs the clients is what it compares), not %d", o.Clients)
	case o.Brokers < 4 || o.Brokers > 32:
		return usageErr("--backfill-rate compare needs --brokers 4 to 32 (rf 3 and a broker to kill outside the clients' partition), not %d", o.Brokers)
	case o.RF != 3:
		return usageErr("--backfill-rate compare runs at --rf 3, not %d", o.RF)
	case o.sizeSet && (o.Segments < 1 || o.SegmentSize < 64<<10):
		return usageErr("--backfill-rate compare: --segments %d of --segment-size %d: want at least one of at least 64KiB", o.Segments, o.SegmentSize)
	case o.Insecure:
		return usageErr("--backfill-rate compare runs with mutual TLS, not --insecure")
	}
	return nil
}

// compareReport is the JSON report of --backfill-rate compare.
type compareReport struct {
	OK      bool             `json:"ok"`
	Error   string           `json:"error,omitempty"`
	Rounds  []healrun.Result `json:"rounds"`
	Medians []healrun.Median `json:"medians"`
	// AutoGoal says whether auto met its goal: the clients' p99 while
	// healing at most 1.5x idle, the heal at least 0.5x its limit, no
	// record lost.
	AutoGoal string `json:"auto_goal"`
}

// runCompare is --backfill-rate compare: the kill once per catch-up rate,
// each on a fresh cluster under the same client load.
func runCompare(ctx context.Context, o Options, stdout, stderr io.Writer) int {
	out := stdout
	if o.JSON {
		out = stderr
	}
	logf := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	rep := compareReport{}
	err := compare(ctx, o, logf, &rep)
	if err != nil {
		rep.Error = err.Error()
		logf("compare: %v", err)
	}
	rep.Medians = healrun.Medians(rep.Rounds)
	rep.AutoGoal = autoGoal(rep.Rounds)
	rep.OK = err == nil
	if o.JSON {
		raw, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintf(stdout, "%s\n", raw)
	} else {
		healrun.WriteTable(stdout, rep.Rounds)
		fmt.Fprintf(stdout, "auto: %s\n", rep.AutoGoal)
	}
	if !rep.OK {
		return 1
	}
	return 0
}

// compare runs each mode in turn into rep.
func compare(ctx context.Context, o Options, logf func(string, ...any), rep *compareReport) error {
	dir, made := o.Dir, false
	if dir == "" {
		d, err := os.MkdirTemp("", "malachi-compare-")
		if err != nil {
			return err
		}
		dir, made = d, true
	}
	bin, err := harness.LocateMalachid(ctx, o.Malachid, dir, io.Discard)
	if err != nil {
		return err
	}
	cfg := healrun.DefaultPacing(bin, dir)
	cfg.Brokers, cfg.Producers, cfg.Logf = o.Brokers, o.Clients, logf
	if o.sizeSet {
		cfg.Segments, cfg.SegmentBytes = o.Segments, o.SegmentSize
	}
	logf("compare: %d brokers, %d segments of %d MiB, %d producers of 1 KiB records every %v; the kill on a fresh cluster per rate: %s, %s, %s",
		cfg.Brokers, cfg.Segments, cfg.SegmentBytes>>20, cfg.Producers, cfg.Interval, healrun.Modes[0].Name, healrun.Modes[1].Name, healrun.Modes[2].Name)
	for _, m := range healrun.Modes {
		logf("compare: %s (heal.backfill_bytes_per_second = %s) ...", m.Name, m.Rate)
		mctx, cancel := context.WithTimeout(ctx, o.StageTimeout+cfg.HealLimit)
		r, err := healrun.RunPacing(mctx, cfg, m)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		r.Round = 1
		rep.Rounds = append(rep.Rounds, r)
	}
	if made {
		os.RemoveAll(dir)
	}
	return nil
}

// autoGoal is whether auto met its goal in rounds, and by what figures.
func autoGoal(rounds []healrun.Result) string {
	for _, r := range rounds {
		if r.Mode != "auto" {
			continue
		}
		met := r.ClientP99HealingOverIdle <= 1.5 && r.HealOverLimit >= 0.5 && r.RecordsLost == 0
		verdict := "goal NOT met"
		if met {
			verdict = "goal met"
		}
		return fmt.Sprintf("%s: client p99 while healing %.2fx idle (goal <= 1.5x), heal %.2fx its limit (goal >= 0.5x), %d records lost (at load %.2f)",
			verdict, r.ClientP99HealingOverIdle, r.HealOverLimit, r.RecordsLost, r.Load1)
	}
	return "auto did not run"
}
