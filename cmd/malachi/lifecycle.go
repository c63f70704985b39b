package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/meta"
)

// The operator's lifecycle commands:
//
//	malachi decommission ID [--cancel]   drain broker ID (or cancel)
//	malachi maintenance ID --for 30m     a maintenance window (or --end)

// lifecycleFlags parses a lifecycle command's flags and its one broker
// id, which may come before, between or after the flags.
func lifecycleFlags(fs *flag.FlagSet, args []string) (meta.BrokerID, error) {
	var ids []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0, errHelp
			}
			return 0, fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		ids = append(ids, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch len(ids) {
	case 0:
		return 0, usageErr("%s: no broker id (malachi %s ID ...)", fs.Name(), fs.Name())
	case 1:
	default:
		return 0, usageErr("%s: unexpected argument %q", fs.Name(), ids[1])
	}
	b, err := meta.ParseBrokerID(ids[0])
	if err != nil {
		return 0, usageErr("%s: %v", fs.Name(), err)
	}
	return b, nil
}

func runDecommission(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("decommission", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: malachi decommission ID [--cancel] --admin host:port\n\n"+
			"Drain broker ID: its replicas move to other brokers (add, verify, record, then drop),\n"+
			"never below the replication factor; `malachi status` shows the progress and says when\n"+
			"it can be stopped. --cancel puts it back to active (the moves done stay).\n\n")
		fs.PrintDefaults()
	}
	addr := fs.String("admin", "", "host:port of any broker's admin API")
	cancel := fs.Bool("cancel", false, "cancel the decommission: the broker is active again")
	timeout := fs.Duration("timeout", 10*time.Second, "request timeout")
	conn := addConnFlags(fs)
	id, err := lifecycleFlags(fs, args)
	if err != nil {
		return err
	}
	if err := validateAddr("admin", *addr); err != nil {
		return fmt.Errorf("%w: decommission: %v", errUsage, err)
	}
	rc, err := conn.client("decommission", *timeout)
	if err != nil {
		return err
	}
	defer rc.Close()
	c := admin.New(*addr, rc, conn.insecure)
	if *cancel {
		m, err := c.CancelDecommission(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "broker %d: decommission cancelled, active again (index %d)\n", m.Broker, m.Index)
		return nil
	}
	m, err := c.Decommission(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "broker %d: decommissioning (index %d); `malachi status` shows what is left\n", m.Broker, m.Index)
	return nil
}

func runMaintenance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("maintenance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: malachi maintenance ID --for 30m | --end  --admin host:port\n\n"+
			"Open a maintenance window for broker ID: until it ends, the broker's absence is not a\n"+
			"failure (no re-replication); after it, the normal grace delay starts. A segment down to\n"+
			"one healthy copy is healed anyway. At most heal.max_maintenance brokers at once.\n\n")
		fs.PrintDefaults()
	}
	addr := fs.String("admin", "", "host:port of any broker's admin API")
	dur := fs.Duration("for", 0, "length of the window, from the leader's clock (e.g. 30m)")
	end := fs.Bool("end", false, "end the window now: the broker is active again")
	timeout := fs.Duration("timeout", 10*time.Second, "request timeout")
	conn := addConnFlags(fs)
	id, err := lifecycleFlags(fs, args)
	if err != nil {
		return err
	}
	if err := validateAddr("admin", *addr); err != nil {
		return fmt.Errorf("%w: maintenance: %v", errUsage, err)
	}
	if *end == (*dur != 0) {
		return usageErr("maintenance: give exactly one of --for DURATION and --end")
	}
	if *dur < 0 {
		return usageErr("maintenance: --for %v is negative", *dur)
	}
	rc, err := conn.client("maintenance", *timeout)
	if err != nil {
		return err
	}
	defer rc.Close()
	c := admin.New(*addr, rc, conn.insecure)
	if *end {
		m, err := c.EndMaintenance(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "broker %d: maintenance ended, active again (index %d)\n", m.Broker, m.Index)
		return nil
	}
	m, err := c.Maintenance(ctx, id, *dur)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "broker %d: in maintenance until %s (index %d)\n", m.Broker, m.Until.UTC().Format(time.RFC3339), m.Index)
	return nil
}

// writeLifecycle prints, after `malachi status`'s heal summary, each
// decommission's progress (segments and bytes left, moves, rate, ETA, the
// reasons segments are blocked, "can be stopped" once drained) and each
// maintenance window, from the leader's last pass report in heal (its
// /status document). It prints nothing when there is neither.
func writeLifecycle(w io.Writer, status json.RawMessage, now time.Time) {
	st, ok := admin.DecodeStatus(status)
	if !ok || st.LastPass == nil {
		return
	}
	l := st.LastPass
	for _, d := range l.Decommission {
		if d.Drained {
			fmt.Fprintf(w, "decommission broker %d: drained: no replica set names it; it can be stopped\n", d.Broker)
			continue
		}
		fmt.Fprintf(w, "decommission broker %d: %d segments (%s) left, %d moving this pass", d.Broker, d.Segments, bytesize.Format(d.Bytes), d.Moving)
		if d.Rate > 0 {
			fmt.Fprintf(w, ", %s/s, ETA %s", bytesize.Format(int64(d.Rate)), d.ETA.Round(time.Second))
		} else {
			fmt.Fprint(w, ", no rate yet")
		}
		if !d.Up {
			fmt.Fprint(w, "; the broker is not answering (its loss is an ordinary failure)")
		}
		fmt.Fprintln(w)
		if len(d.Blocked) > 0 {
			reasons := make([]string, 0, len(d.Blocked))
			for r := range d.Blocked {
				reasons = append(reasons, r)
			}
			sort.Strings(reasons)
			parts := make([]string, 0, len(reasons))
			for _, r := range reasons {
				parts = append(parts, fmt.Sprintf("%s %d", r, d.Blocked[r]))
			}
			fmt.Fprintf(w, "  blocked this pass: %s", strings.Join(parts, ", "))
			if len(d.Examples) > 0 {
				ex := make([]string, 0, 3)
				for _, e := range d.Examples[:min(3, len(d.Examples))] {
					ex = append(ex, fmt.Sprintf("%s %s", e.Segment, e.Reason))
				}
				fmt.Fprintf(w, " (e.g. %s)", strings.Join(ex, "; "))
			}
			fmt.Fprintln(w)
		}
	}
	for _, m := range l.Maintenance {
		seen := "not answering"
		if m.Seen {
			seen = "answering"
		}
		if m.Ended {
			fmt.Fprintf(w, "maintenance broker %d: window ended %s, %s; the grace delay runs from its end (end it with --end)\n", m.Broker, m.Until.UTC().Format(time.RFC3339), seen)
			continue
		}
		fmt.Fprintf(w, "maintenance broker %d: until %s (%s left), %s; its absence is not a failure\n", m.Broker, m.Until.UTC().Format(time.RFC3339), m.Until.Sub(now).Round(time.Second), seen)
	}
	for _, f := range l.MaintenanceFloor {
		fmt.Fprintf(w, "  healed in spite of maintenance: %s (its copy on broker %d: %s)\n", f.Segment, f.Broker, f.Reason)
	}
}
