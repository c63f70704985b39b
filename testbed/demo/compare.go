package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

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
	case o.CompareRounds < 1 || o.CompareRounds > 20:
		return usageErr("--backfill-rate compare: --compare-rounds %d: want 1 to 20", o.CompareRounds)
	}
	return nil
}

// compareReport is the JSON report of --backfill-rate compare: the
// frontier's summary (healrun.Summary: every round, each round's R*, the
// medians, auto's verdict).
type compareReport struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	healrun.Summary
}

// runCompare is --backfill-rate compare: the kill once per mode of the
// frontier (healrun.Modes), each on a fresh cluster under the same client
// load, --compare-rounds times with the modes' order rotated each round.
func runCompare(ctx context.Context, o Options, stdout, stderr io.Writer) int {
	out := stdout
	if o.JSON {
		out = stderr
	}
	logf := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	var results []healrun.Result
	err := compare(ctx, o, logf, &results)
	if err != nil {
		logf("compare: %v", err)
	}
	rep := compareReport{OK: err == nil, Summary: healrun.Summarize(results, healrun.Modes)}
	if err != nil {
		rep.Error = err.Error()
	}
	if o.JSON {
		raw, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintf(stdout, "%s\n", raw)
	} else {
		rep.Summary.Write(stdout)
	}
	if !rep.OK {
		return 1
	}
	return 0
}

// compare runs each mode of each round in turn into results.
func compare(ctx context.Context, o Options, logf func(string, ...any), results *[]healrun.Result) error {
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
	names := make([]string, len(healrun.Modes))
	for i, m := range healrun.Modes {
		names[i] = m.Name
	}
	logf("compare: %d brokers, %d segments of %d MiB, %d producers of 1 KiB records every %v; %d rounds of the kill on a fresh cluster per rate: %s (a capped rate's heal measured over its first %v)",
		cfg.Brokers, cfg.Segments, cfg.SegmentBytes>>20, cfg.Producers, cfg.Interval, o.CompareRounds, strings.Join(names, ", "), cfg.FixedWindow)
	for round := 1; round <= o.CompareRounds; round++ {
		for _, m := range healrun.RoundOrder(healrun.Modes, round) {
			logf("compare: round %d, %s (heal.backfill_bytes_per_second = %s) ...", round, m.Name, m.Rate)
			mctx, cancel := context.WithTimeout(ctx, o.StageTimeout+cfg.HealLimit)
			r, err := healrun.RunPacing(mctx, cfg, m)
			cancel()
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round, m.Name, err)
			}
			r.Round = round
			*results = append(*results, r)
		}
	}
	if made {
		os.RemoveAll(dir)
	}
	return nil
}
