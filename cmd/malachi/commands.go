package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/store"

	"github.com/malachi-log/malachi/meta"
)

// errUsage marks a bad command line (exit status 2) and errHelp a -h
// (exit 0, the flag package printed the usage).
var (
	errUsage = errors.New("malachi: usage")
	errHelp  = errors.New("malachi: help")
)

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// parseFlags parses a subcommand's flags with usage errors wrapped.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return usageErr("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// planDoc mirrors heal.Plan with string ops and reasons.
type planDoc struct {
	Index   uint64       `json:"index"`
	Actions []planAction `json:"actions"`
	Report  heal.Report  `json:"report"`
}

type planAction struct {
	Op      string        `json:"op"`
	Segment meta.Segment  `json:"segment"`
	Target  meta.BrokerID `json:"target"`
	Source  meta.BrokerID `json:"source"`
	From    int64         `json:"from"`
	Command struct {
		Expected []meta.BrokerID `json:"expected"`
		Replicas []meta.BrokerID `json:"replicas"`
	} `json:"command"`
	Reason   string          `json:"reason"`
	Copies   []meta.BrokerID `json:"copies"`
	Replaces meta.BrokerID   `json:"replaces"`
}

func (a planAction) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %s", a.Op, a.Segment.ID)
	switch {
	case a.Reason != "":
		fmt.Fprintf(&b, " reason=%s", a.Reason)
		if len(a.Copies) > 0 {
			fmt.Fprintf(&b, " copies=%v", a.Copies)
		}
	case len(a.Command.Replicas) > 0:
		fmt.Fprintf(&b, " %v -> %v", a.Command.Expected, a.Command.Replicas)
	case a.Source != 0:
		fmt.Fprintf(&b, " target=%d source=%d", a.Target, a.Source)
		if a.Replaces != 0 {
			fmt.Fprintf(&b, " replaces=%d", a.Replaces)
		}
		if a.From > 0 {
			fmt.Fprintf(&b, " from byte %d of %d", a.From, a.Segment.ByteSize+store.FooterSize)
		}
	case a.Target != 0:
		fmt.Fprintf(&b, " broker=%d", a.Target)
	}
	return b.String()
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("admin", "", "host:port of any broker's admin API")
	asJSON := fs.Bool("json", false, "print the plan as JSON, as the leader served it")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout (the dry run probes every broker)")
	conn := addConnFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := validateAddr("admin", *addr); err != nil {
		return fmt.Errorf("%w: plan: %v", errUsage, err)
	}
	rc, err := conn.client("plan", *timeout)
	if err != nil {
		return err
	}
	defer rc.Close()
	// The dry run is the coordinator's; any broker forwards it to the
	// leader.
	raw, err := admin.New(*addr, rc, conn.insecure).Plan(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := stdout.Write(append(raw, '\n'))
		return err
	}
	var p planDoc
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("broker %s: decoding the plan: %w", *addr, err)
	}
	writePlan(stdout, p)
	return nil
}

func writePlan(w io.Writer, p planDoc) {
	fmt.Fprintf(w, "dry run of the next heal pass at index %d: %d actions (nothing is executed)\n", p.Index, len(p.Actions))
	for _, a := range p.Actions {
		fmt.Fprintf(w, "  %s\n", a)
	}
	r := p.Report
	fmt.Fprintf(w, "would find: sealed=%d under_replicated=%d anomalies=%d backfills=%d commands=%d deferred=%d failed=%d unsettled=%d settling=%d\n",
		r.Sealed, r.UnderReplicated, r.Anomalies, r.Backfills, r.Commands, r.Deferred, len(r.Failed), len(r.Unsettled), len(r.Settling))
	if len(r.Dead) > 0 || len(r.Suspect) > 0 {
		fmt.Fprintf(w, "dead brokers %v, suspect (within grace) %v\n", r.Dead, r.Suspect)
	}
	if r.HoldReason != "" {
		fmt.Fprintf(w, "HOLD: %s (the pass would place no new replica; malachi release lifts it)\n", r.HoldReason)
	}
	if r.Rebalance != nil {
		fmt.Fprintf(w, "would %s\n", rebalanceLine(r.Rebalance))
	}
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("admin", "", "host:port of any broker's admin API")
	segments := fs.Int("segments", 0, "segments to create, write and seal")
	records := fs.Int("records", 0, "records per segment")
	var size bytesize.Size
	fs.Var(&size, "size", "bytes per record (4096, 4KiB)")
	prefix := fs.String("prefix", "", "segment id prefix (default: the broker's)")
	timeout := fs.Duration("timeout", 10*time.Minute, "request timeout")
	asJSON := fs.Bool("json", false, "print the broker's answer as JSON")
	conn := addConnFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := validateAddr("admin", *addr); err != nil {
		return fmt.Errorf("%w: load: %v", errUsage, err)
	}
	switch {
	case *segments < 1:
		return usageErr("load: --segments %d: want at least 1", *segments)
	case *records < 1:
		return usageErr("load: --records %d: want at least 1", *records)
	case size < 1:
		return usageErr("load: --size is required: bytes per record, e.g. 4096")
	case size > 1<<30:
		return usageErr("load: --size %s: want at most 1 GiB per record", bytesize.Format(int64(size)))
	case *prefix != "" && meta.SegmentID(*prefix).Validate() != nil:
		return usageErr("load: --prefix %q: %v", *prefix, meta.SegmentID(*prefix).Validate())
	}
	rc, err := conn.client("load", *timeout)
	if err != nil {
		return err
	}
	defer rc.Close()
	c := admin.New(*addr, rc, conn.insecure)
	start := time.Now()
	raw, err := c.Load(ctx, admin.LoadRequest{Segments: *segments, RecordsPerSegment: *records, RecordSize: int(size), Prefix: *prefix})
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := stdout.Write(append(raw, '\n'))
		return err
	}
	per := int64(*records) * (int64(size) + store.FrameHeaderSize)
	el := time.Since(start)
	fmt.Fprintf(stdout, "loaded %d sealed segments of %d records × %s (%s of frames each) in %.2fs (%s/s of frames)\n",
		*segments, *records, bytesize.Format(int64(size)), bytesize.Format(per), el.Seconds(), bytesize.Format(int64(float64(per*int64(*segments))/max(el.Seconds(), 1e-9))))
	if s := strings.TrimSpace(string(raw)); s != "" && s != "{}" && s != "null" {
		fmt.Fprintf(stdout, "broker answered: %s\n", truncate(s, 400))
	}
	return nil
}

func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("admin", "", "host:port of any broker's admin API")
	timeout := fs.Duration("timeout", 10*time.Second, "request timeout")
	conn := addConnFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := validateAddr("admin", *addr); err != nil {
		return fmt.Errorf("%w: release: %v", errUsage, err)
	}
	rc, err := conn.client("release", *timeout)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := admin.New(*addr, rc, conn.insecure).Release(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "mass-failure hold released for the next heal pass (asked %s)\n", *addr)
	return nil
}

// truncate cuts s to n bytes, "..." marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// joinIDs renders a few segment ids for a message.
func joinIDs(ids []meta.SegmentID, max int) string {
	var parts []string
	for i, id := range ids {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(ids)-max))
			break
		}
		parts = append(parts, string(id))
	}
	return strings.Join(parts, ", ")
}
