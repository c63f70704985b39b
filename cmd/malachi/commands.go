package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/malachi-log/malachi/internal/admin"
	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/internal/demo"
	"github.com/malachi-log/malachi/store"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/malachi-log/malachi/internal/rpc"
	"github.com/malachi-log/malachi/meta"
)

// errUsage marks a bad command line (exit status 2) and errHelp a -h
// (exit 0, the flag package printed the usage): the demo's sentinels, so
// `malachi demo` and the other commands exit alike.
var (
	errUsage = demo.ErrUsage
	errHelp  = demo.ErrHelp
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

// brokerState is one broker in `malachi status`.
type brokerState struct {
	ID        meta.BrokerID `json:"id"`
	Rack      string        `json:"rack,omitempty"`
	AdminAddr string        `json:"admin_addr"`
	Up        bool          `json:"up"`
	IsLeader  bool          `json:"is_leader"`
	Copies    int           `json:"copies"`
	Latched   int           `json:"latched"`
	Heal      string        `json:"heal"` // "enabled", "disabled", "unknown"
	Error     string        `json:"error,omitempty"`
	// AuthFailed is why the leader's last heal pass could not
	// authenticate this broker (its auth_failed list): such a broker is
	// not counted down or dead, and its replicas stay.
	AuthFailed string `json:"auth_failed,omitempty"`
	// Insecure: the broker's /v1/status says insecure = true.
	Insecure bool `json:"insecure,omitempty"`
	// CertWarnings are the broker's certificates that expire within 30
	// days (or have), from its /v1/status.
	CertWarnings []admin.CertStatus `json:"cert_warnings,omitempty"`
}

// clusterStatus is the output of `malachi status`.
type clusterStatus struct {
	Admin             string        `json:"admin"`
	Index             uint64        `json:"index"`
	Leader            meta.BrokerID `json:"leader"`
	ReplicationFactor int           `json:"replication_factor"`
	Brokers           []brokerState `json:"brokers"`
	Segments          int           `json:"segments"`
	Sealed            int           `json:"sealed"`
	Active            int           `json:"active"`
	// UnderReplicated counts sealed segments with fewer replicas on
	// brokers that answer than the replication factor.
	UnderReplicated int `json:"under_replicated"`
	// OnDownBrokers counts sealed segments with a replica on a broker that
	// did not answer (and is not in the leader's auth_failed list).
	OnDownBrokers int `json:"on_down_brokers"`
	// OnAuthFailedBrokers counts sealed segments with a replica on a
	// broker the leader's last pass could not authenticate.
	OnAuthFailedBrokers int `json:"on_auth_failed_brokers"`
	// Heal is the leader's heal status (the plugin's /status) as served.
	Heal json.RawMessage `json:"heal,omitempty"`
	// Insecure: asked with --insecure, in plaintext without certificates,
	// which only a cluster in insecure mode answers.
	Insecure bool `json:"insecure,omitempty"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("admin", "", "host:port of any broker's admin API")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "per-request timeout")
	conn := addConnFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := validateAddr("admin", *addr); err != nil {
		return fmt.Errorf("%w: status: %v", errUsage, err)
	}
	if *timeout <= 0 {
		return usageErr("status: --timeout %v: want more than zero", *timeout)
	}
	rc, err := conn.client("status", *timeout)
	if err != nil {
		return err
	}
	defer rc.Close()
	st, err := gatherStatus(ctx, *addr, rc, conn.insecure)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	writeStatus(stdout, st)
	return nil
}

// gatherStatus asks the broker at addr for the metadata, then every
// registered broker for its health and copies, then the leader for its heal
// status, all through rc (insecure: made without certificates).
func gatherStatus(ctx context.Context, addr string, rc *rpc.Client, insecure bool) (*clusterStatus, error) {
	c := admin.New(addr, rc, insecure)
	h, err := c.Health(ctx)
	if err != nil {
		return nil, err
	}
	snap, err := c.Metadata(ctx)
	if err != nil {
		return nil, err
	}
	// Read the metadata from the leader when it is not this broker: a
	// follower's view may lag the last commands.
	if h.Leader != 0 && h.Leader != h.ID {
		if lb, ok := snap.Broker(h.Leader); ok && lb.AdminAddr != "" {
			if ls, err := admin.New(lb.AdminAddr, rc, insecure).Metadata(ctx); err == nil {
				snap = ls
			}
		}
	}
	st := &clusterStatus{Admin: addr, Index: snap.Index, Leader: h.Leader, ReplicationFactor: snap.ReplicationFactor, Insecure: insecure}
	brokers := snap.Brokers
	if len(brokers) == 0 {
		brokers = []meta.Broker{{ID: h.ID, AdminAddr: addr}}
	}
	st.Brokers = make([]brokerState, len(brokers))
	var wg sync.WaitGroup
	var mu sync.Mutex // guards st.Heal
	for i, b := range brokers {
		bs := &st.Brokers[i]
		*bs = brokerState{ID: b.ID, Rack: b.Rack, AdminAddr: b.AdminAddr, Heal: "unknown"}
		if b.ID == h.ID && bs.AdminAddr == "" {
			bs.AdminAddr = addr
		}
		if bs.AdminAddr == "" {
			bs.Error = "no admin address registered"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			bc := admin.New(bs.AdminAddr, rc, insecure)
			bh, err := bc.Health(ctx)
			if err != nil {
				bs.Error = err.Error()
				return
			}
			bs.Up, bs.IsLeader = true, bh.IsLeader
			if cs, err := bc.Copies(ctx); err == nil {
				bs.Copies = len(cs)
				for _, lc := range cs {
					if lc.Latched {
						bs.Latched++
					}
				}
			} else {
				bs.Error = err.Error()
			}
			if raw, err := bc.Status(ctx); err == nil {
				if ps, ok := admin.DecodeStatus(raw); ok {
					bs.Heal = "enabled"
					bs.Insecure = ps.Insecure
					for _, c := range ps.Certificates {
						if c.Warning != "" {
							bs.CertWarnings = append(bs.CertWarnings, c)
						}
					}
				} else {
					bs.Heal = "disabled"
				}
				if bh.IsLeader {
					mu.Lock()
					st.Heal = raw
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if st.Heal == nil {
		if raw, err := c.Status(ctx); err == nil {
			st.Heal = raw
		}
	}
	st.markAuthFailed()
	st.count(snap)
	return st, nil
}

// markAuthFailed marks the brokers the leader's heal status lists in
// auth_failed (its last pass's, when the status has no list of its own).
func (st *clusterStatus) markAuthFailed() {
	ps, ok := admin.DecodeStatus(st.Heal)
	if !ok {
		return
	}
	failed := ps.AuthFailed
	if len(failed) == 0 && ps.LastPass != nil {
		failed = ps.LastPass.AuthFailed
	}
	for _, a := range failed {
		for i := range st.Brokers {
			if st.Brokers[i].ID == a.Broker {
				st.Brokers[i].AuthFailed = a.Reason
			}
		}
	}
}

// count tallies snap's segments: sealed, active, under-replicated (fewer
// replicas on brokers that answered than the replication factor), with a
// replica on a down broker, with one on a broker that failed
// authentication.
func (st *clusterStatus) count(snap meta.Snapshot) {
	up, authFailed := map[meta.BrokerID]bool{}, map[meta.BrokerID]bool{}
	for _, b := range st.Brokers {
		up[b.ID] = b.Up
		authFailed[b.ID] = b.AuthFailed != ""
	}
	for _, s := range snap.Segments {
		st.Segments++
		if !s.Sealed {
			st.Active++
			continue
		}
		st.Sealed++
		n, down, auth := 0, false, false
		for _, r := range s.Replicas {
			switch {
			case authFailed[r]:
				auth = true
			case up[r]:
				n++
			default:
				down = true
			}
		}
		if n < snap.ReplicationFactor {
			st.UnderReplicated++
		}
		if down {
			st.OnDownBrokers++
		}
		if auth {
			st.OnAuthFailedBrokers++
		}
	}
}

// writeSecurity prints what weakens the cluster's security: insecure
// mode (asked in plaintext, or said by a broker's status) and every
// certificate that expires within 30 days.
func writeSecurity(w io.Writer, st *clusterStatus) {
	if st.Insecure {
		fmt.Fprintf(w, "INSECURE MODE: the cluster answered in plaintext without certificates (insecure = true): anyone who reaches its ports may read and change it\n")
	}
	var insecure []meta.BrokerID
	for _, b := range st.Brokers {
		if b.Insecure {
			insecure = append(insecure, b.ID)
		}
	}
	if len(insecure) > 0 {
		fmt.Fprintf(w, "INSECURE MODE: brokers %v report insecure = true in /v1/status: no authentication, no encryption, loopback only\n", insecure)
	}
	for _, b := range st.Brokers {
		for _, c := range b.CertWarnings {
			fmt.Fprintf(w, "WARNING: broker %d certificate %s (not after %s): %s\n", b.ID, c.File, c.NotAfter.UTC().Format(time.RFC3339), c.Warning)
		}
	}
}

func writeStatus(w io.Writer, st *clusterStatus) {
	fmt.Fprintf(w, "cluster at index %d, replication factor %d, leader broker %d (asked %s)\n", st.Index, st.ReplicationFactor, st.Leader, st.Admin)
	writeSecurity(w, st)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nBROKER\tADMIN\tSTATE\tCOPIES\tLATCHED\tHEAL\tRACK")
	for _, b := range st.Brokers {
		state := "up"
		if b.IsLeader {
			state = "up, leader"
		}
		switch {
		case b.AuthFailed != "":
			state = "AUTH_FAILED"
		case !b.Up:
			state = "DOWN"
		}
		rack := b.Rack
		if rack == "" {
			rack = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\n", b.ID, b.AdminAddr, state, b.Copies, b.Latched, b.Heal, rack)
	}
	tw.Flush()
	for _, b := range st.Brokers {
		if b.AuthFailed != "" {
			fmt.Fprintf(w, "  broker %d: auth_failed: %s (the leader's last heal pass; not counted dead: its replicas stay)\n", b.ID, b.AuthFailed)
		}
		if b.Error != "" {
			fmt.Fprintf(w, "  broker %d: %s\n", b.ID, b.Error)
		}
	}
	fmt.Fprintf(w, "\nsegments: %d (%d sealed, %d active); under-replicated %d; with a replica on a down broker %d\n",
		st.Segments, st.Sealed, st.Active, st.UnderReplicated, st.OnDownBrokers)
	if st.OnAuthFailedBrokers > 0 {
		fmt.Fprintf(w, "segments with a replica on a broker that failed authentication: %d\n", st.OnAuthFailedBrokers)
	}
	ps, ok := admin.DecodeStatus(st.Heal)
	if !ok {
		fmt.Fprintf(w, "heal: no plugin status (disabled, or no leader answered)\n")
		return
	}
	fmt.Fprintf(w, "heal: engines probe=%s fsync=%s; %d passes run by broker %d\n", ps.ProbeEngine, ps.FsyncEngine, ps.Passes, ps.Broker)
	if ps.Hold != "" {
		fmt.Fprintf(w, "heal: HOLDING backfills and new placements: %s (lift it with: malachi release --admin %s)\n", ps.Hold, st.Admin)
	}
	if r := ps.LastPass; r != nil {
		fmt.Fprintf(w, "last pass at %s (%.3fs, index %d): under_replicated=%d failed=%d unsettled=%d backfills=%d commands=%d deferred=%d bytes_copied=%s\n",
			ps.LastPassAt.Format(time.RFC3339), ps.LastPassSeconds, r.Index, r.UnderReplicated, len(r.Failed), len(r.Unsettled), r.Backfills, r.Commands, r.Deferred, bytesize.Format(r.BytesCopied))
		if len(r.Dead) > 0 || len(r.Suspect) > 0 {
			fmt.Fprintf(w, "  dead brokers %v, suspect (within grace) %v\n", r.Dead, r.Suspect)
		}
		byReason := map[string][]meta.SegmentID{}
		for _, f := range r.Failed {
			byReason[f.Reason] = append(byReason[f.Reason], f.Segment)
		}
		reasons := make([]string, 0, len(byReason))
		for k := range byReason {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		for _, k := range reasons {
			fmt.Fprintf(w, "  failed %s: %d (%s)\n", k, len(byReason[k]), joinIDs(byReason[k], 5))
		}
	}
	writeLifecycle(w, st.Heal, time.Now())
}

// planDoc mirrors heal.Plan with string ops and reasons.
type planDoc struct {
	Index   uint64           `json:"index"`
	Actions []planAction     `json:"actions"`
	Report  admin.HealReport `json:"report"`
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
	Reason string          `json:"reason"`
	Copies []meta.BrokerID `json:"copies"`
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
