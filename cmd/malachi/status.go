package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/rpc"
)

// `malachi status`: what every broker answers, and the leader's heal
// status. Every health count (under-replicated, failed, lost) is the last
// heal pass's report, printed with its index and age; the segment totals
// are the metadata's, printed with its index; what the CLI saw itself
// (brokers that did not answer) is said to be so.

// brokerState is one broker in `malachi status`.
type brokerState struct {
	ID        meta.BrokerID `json:"id"`
	Rack      string        `json:"rack,omitempty"`
	AdminAddr string        `json:"admin_addr"`
	Up        bool          `json:"up"`
	IsLeader  bool          `json:"is_leader"`
	Copies    int           `json:"copies"`
	Latched   int           `json:"latched"`
	// LatchedCopies are the broker's latched copies with the error that
	// latched each.
	LatchedCopies []latchedCopy `json:"latched_copies,omitempty"`
	Heal          string        `json:"heal"` // "enabled", "disabled", "unknown"
	Error         string        `json:"error,omitempty"`
	// AuthFailed is why the leader's last heal pass could not
	// authenticate this broker (its auth_failed list): such a broker is
	// not counted down or dead, and its replicas stay.
	AuthFailed string `json:"auth_failed,omitempty"`
	// Insecure: the broker's /v1/status says insecure = true.
	Insecure bool `json:"insecure,omitempty"`
	// CertWarnings are the broker's certificates that expire within 30
	// days (or have), from its /v1/status.
	CertWarnings []plugin.CertStatus `json:"cert_warnings,omitempty"`
	// BackfillRate is the broker's catch-up rate and why (its /v1/status).
	BackfillRate *plugin.PaceStatus `json:"backfill_rate,omitempty"`
}

// latchedCopy is a latched copy and the error that latched it.
type latchedCopy struct {
	Segment meta.SegmentID `json:"segment"`
	Error   string         `json:"error"`
}

// clusterStatus is the output of `malachi status`.
type clusterStatus struct {
	Admin             string        `json:"admin"`
	Index             uint64        `json:"index"`
	Leader            meta.BrokerID `json:"leader"`
	ReplicationFactor int           `json:"replication_factor"`
	// NoQuorum is the asked broker's "cluster: no quorum: 2 of 5 voters
	// reachable ..." (its /v1/health), empty while it hears a quorum.
	NoQuorum string        `json:"no_quorum,omitempty"`
	Brokers  []brokerState `json:"brokers"`
	// Passes is the leader's pass history (--passes), nil when not asked.
	Passes *plugin.PassHistory `json:"passes,omitempty"`
	// Segments, Sealed and Active count the metadata at Index.
	Segments int `json:"segments"`
	Sealed   int `json:"sealed"`
	Active   int `json:"active"`
	// PassIndex is the metadata index of the heal pass whose report gives
	// UnderReplicated, Failed and Lost (0: no report, and they are 0).
	PassIndex       uint64 `json:"pass_index"`
	UnderReplicated int    `json:"under_replicated"`
	Failed          int    `json:"failed"`
	Lost            int    `json:"lost"`
	// OnDownBrokers counts sealed segments with a replica on a broker that
	// did not answer the CLI (and is not in the leader's auth_failed list).
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
	passes := fs.Int("passes", 0, "also print the leader's last `N` heal passes from its pass history (with --since: the N after it)")
	since := fs.Uint64("since", 0, "with --passes: the passes after pass number `S`")
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
	if *passes < 0 || *passes > 4096 {
		return usageErr("status: --passes %d: want 0 to 4096", *passes)
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
	if *passes > 0 {
		if st.Passes, err = leaderPasses(ctx, st, rc, conn.insecure, *since, *passes); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	writeStatus(stdout, st)
	writePasses(stdout, st.Passes)
	return nil
}

// leaderPasses reads n passes of the leader's pass history: the n after
// since, or (since 0) its last n.
func leaderPasses(ctx context.Context, st *clusterStatus, rc *rpc.Client, insecure bool, since uint64, n int) (*plugin.PassHistory, error) {
	addr := ""
	for _, b := range st.Brokers {
		if b.ID == st.Leader {
			addr = b.AdminAddr
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("status --passes: no leader answered (leader %d): its pass history cannot be read", st.Leader)
	}
	c := admin.New(addr, rc, insecure)
	if since == 0 {
		h, err := c.Passes(ctx, 0, 1)
		if err != nil {
			return nil, fmt.Errorf("status --passes: %w", err)
		}
		if h.Last > uint64(n) {
			since = h.Last - uint64(n)
		}
	}
	h, err := c.Passes(ctx, since, n)
	if err != nil {
		return nil, fmt.Errorf("status --passes: %w", err)
	}
	return &h, nil
}

// writePasses prints a pass history, one line per pass.
func writePasses(w io.Writer, h *plugin.PassHistory) {
	if h == nil {
		return
	}
	fmt.Fprintf(w, "pass history of broker %d (began %s; passes %d to %d kept):\n", h.Broker, h.Began.Format(time.RFC3339), h.First, h.Last)
	if h.Dropped > 0 {
		fmt.Fprintf(w, "  (%d passes asked for were dropped from the bound)\n", h.Dropped)
	}
	for _, p := range h.Passes {
		r := &p.Report
		fmt.Fprintf(w, "  #%d %s +%.3fs index %d", p.Seq, p.Started.Format("15:04:05.000"), p.Ended.Sub(p.Started).Seconds(), p.ViewIndex)
		if p.AppliedIndex != 0 {
			fmt.Fprintf(w, "->%d", p.AppliedIndex)
		}
		fmt.Fprintf(w, ": under_replicated=%d backfills=%d healed=%d failed=%d settled=%d", r.UnderReplicated, r.Backfills, len(r.Healed), len(r.Failed), len(r.Settled))
		if len(r.Dead) > 0 || len(r.Suspect) > 0 {
			fmt.Fprintf(w, " dead=%v suspect=%v", r.Dead, r.Suspect)
		}
		if len(r.Healed) > 0 {
			fmt.Fprintf(w, " healed %s", joinIDs(r.Healed, 5))
		}
		if r.HoldReason != "" {
			fmt.Fprintf(w, " HOLD %s", r.HoldReason)
		}
		fmt.Fprintln(w)
	}
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
	st := &clusterStatus{Admin: addr, Index: snap.Index, Leader: h.Leader, ReplicationFactor: snap.ReplicationFactor,
		NoQuorum: h.Quorum.Error, Insecure: insecure}
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
			if raw, leader := askBroker(ctx, admin.New(bs.AdminAddr, rc, insecure), &snap, bs); leader {
				mu.Lock()
				st.Heal = raw
				mu.Unlock()
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

// askBroker fills bs from the broker's health, copies (its replicas in
// snap: leftovers are listed apart) and heal status; it returns that
// status, and whether the broker leads.
func askBroker(ctx context.Context, bc *admin.Client, snap *meta.Snapshot, bs *brokerState) (json.RawMessage, bool) {
	bh, err := bc.Health(ctx)
	if err != nil {
		bs.Error = err.Error()
		return nil, false
	}
	bs.Up, bs.IsLeader = true, bh.IsLeader
	if cs, err := bc.Copies(ctx); err == nil {
		bs.Copies = replicaCopies(snap, bs.ID, cs)
		for _, lc := range cs {
			if lc.Latched {
				bs.Latched++
				bs.LatchedCopies = append(bs.LatchedCopies, latchedCopy{Segment: lc.ID, Error: lc.LatchError})
			}
		}
	} else {
		bs.Error = err.Error()
	}
	raw, err := bc.Status(ctx)
	if err != nil {
		return nil, false
	}
	if ps, ok := admin.DecodeStatus(raw); ok {
		bs.Heal = "enabled"
		bs.Insecure, bs.BackfillRate = ps.Insecure, ps.BackfillRate
		for _, c := range ps.Certificates {
			if c.Warning != "" {
				bs.CertWarnings = append(bs.CertWarnings, c)
			}
		}
	} else {
		bs.Heal = "disabled"
	}
	return raw, bh.IsLeader
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

// count tallies snap's segments (sealed, active; with a replica on a
// broker that did not answer, or on one that failed authentication) and
// takes the health counts from the last pass's report.
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
		down, auth := false, false
		for _, r := range s.Replicas {
			switch {
			case authFailed[r]:
				auth = true
			case !up[r]:
				down = true
			}
		}
		if down {
			st.OnDownBrokers++
		}
		if auth {
			st.OnAuthFailedBrokers++
		}
	}
	if ps, ok := admin.DecodeStatus(st.Heal); ok && ps.LastPass != nil {
		r := ps.LastPass
		st.PassIndex, st.UnderReplicated, st.Failed, st.Lost = r.Index, r.UnderReplicated, len(r.Failed), len(r.Lost)
	}
}

// statusSections print `malachi status`, in order, one section each: a
// new part of the status is one more function here.
var statusSections = []func(io.Writer, *clusterStatus){
	writeHeader,
	writeQuorum,
	writeSecurity,
	writeBrokers,
	writeSegments,
	writeHeal,
	func(w io.Writer, st *clusterStatus) { writeLifecycle(w, st.Heal, time.Now()) },
	writeRebalance,
}

func writeStatus(w io.Writer, st *clusterStatus) {
	for _, section := range statusSections {
		section(w, st)
	}
}

func writeHeader(w io.Writer, st *clusterStatus) {
	fmt.Fprintf(w, "cluster at index %d, replication factor %d, leader broker %d (asked %s)\n", st.Index, st.ReplicationFactor, st.Leader, st.Admin)
}

// writeQuorum says a lost quorum as such: no write can commit.
func writeQuorum(w io.Writer, st *clusterStatus) {
	if st.NoQuorum != "" {
		fmt.Fprintf(w, "NO QUORUM (broker asked): %s: every write fails until a majority of the voters is back; the heal pass below is not current\n", st.NoQuorum)
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

// backfillRate is a broker's catch-up rate as the BACKFILL column shows
// it: "auto 16MiB/s (latency)", "fixed 8MiB/s", "auto uncapped (none)";
// "-" when the broker did not say.
func backfillRate(ps *plugin.PaceStatus) string {
	if ps == nil {
		return "-"
	}
	rate := "uncapped"
	if ps.BytesPerSecond > 0 {
		rate = bytesize.Format(ps.BytesPerSecond) + "/s"
	}
	if ps.Mode != "auto" {
		return ps.Mode + " " + rate
	}
	s := fmt.Sprintf("auto %s (%s)", rate, ps.Reason)
	if ps.FloorSeconds > 0 {
		s += fmt.Sprintf(", at floor %s", time.Duration(ps.FloorSeconds*float64(time.Second)).Round(time.Second))
	}
	return s
}

// maxLatchedShown bounds the latched copies listed per broker.
const maxLatchedShown = 5

func writeBrokers(w io.Writer, st *clusterStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nBROKER\tADMIN\tSTATE\tCOPIES\tLATCHED\tHEAL\tBACKFILL\tRACK")
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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", b.ID, b.AdminAddr, state, b.Copies, b.Latched, b.Heal, backfillRate(b.BackfillRate), rack)
	}
	tw.Flush()
	for _, b := range st.Brokers {
		if b.AuthFailed != "" {
			fmt.Fprintf(w, "  broker %d: auth_failed: %s (the leader's last heal pass; not counted dead: its replicas stay)\n", b.ID, b.AuthFailed)
		}
		if b.Error != "" {
			fmt.Fprintf(w, "  broker %d: %s\n", b.ID, b.Error)
		}
		for i, lc := range b.LatchedCopies {
			if i == maxLatchedShown {
				fmt.Fprintf(w, "  broker %d: and %d more latched copies (--json lists them)\n", b.ID, len(b.LatchedCopies)-i)
				break
			}
			why := lc.Error
			if why == "" {
				why = "(the broker did not say why)"
			}
			fmt.Fprintf(w, "  broker %d: copy %s latched: %s\n", b.ID, lc.Segment, why)
		}
	}
}

func writeSegments(w io.Writer, st *clusterStatus) {
	fmt.Fprintf(w, "\nsegments: %d (%d sealed, %d active) in the metadata at index %d\n", st.Segments, st.Sealed, st.Active, st.Index)
	if st.PassIndex > 0 {
		fmt.Fprintf(w, "health (last heal pass, at index %d): under-replicated %d, failed %d, lost %d\n", st.PassIndex, st.UnderReplicated, st.Failed, st.Lost)
	} else {
		fmt.Fprintf(w, "health: no heal pass report (heal disabled, or no pass run yet): under-replicated unknown\n")
	}
	fmt.Fprintf(w, "seen by this CLI: with a replica on a down broker %d\n", st.OnDownBrokers)
	if st.OnAuthFailedBrokers > 0 {
		fmt.Fprintf(w, "segments with a replica on a broker that failed authentication: %d\n", st.OnAuthFailedBrokers)
	}
}

// writeHeal prints the leader's heal status: engines, hold, the last
// pass and the totals since the coordinator started.
func writeHeal(w io.Writer, st *clusterStatus) {
	ps, ok := admin.DecodeStatus(st.Heal)
	if !ok {
		fmt.Fprintf(w, "heal: no plugin status (disabled, or no leader answered)\n")
		return
	}
	fmt.Fprintf(w, "heal: engines probe=%s fsync=%s; %d passes run by broker %d\n", ps.ProbeEngine, ps.FsyncEngine, ps.Passes, ps.Broker)
	if ps.Hold != "" {
		fmt.Fprintf(w, "heal: HOLDING backfills and new placements: %s (lift it with: malachi release --admin %s)\n", ps.Hold, st.Admin)
	}
	writeLastPass(w, ps)
	if ps.LastPass != nil {
		writeLeftovers(w, ps.LastPass)
	}
	writeTotals(w, ps.Totals)
}

func writeLastPass(w io.Writer, ps plugin.Status) {
	r := ps.LastPass
	if r == nil {
		return
	}
	age := fmt.Sprintf("%s ago", (time.Duration(ps.LastPassAge * float64(time.Second))).Round(100*time.Millisecond))
	if ps.LastPassStale != "" {
		age = "STALE, " + age + ": " + ps.LastPassStale
	}
	fmt.Fprintf(w, "last pass at %s (%s; %.3fs, index %d): under_replicated=%d failed=%d unsettled=%d backfills=%d commands=%d deferred=%d bytes_copied=%s\n",
		ps.LastPassAt.Format(time.RFC3339), age, ps.LastPassSeconds, r.Index, r.UnderReplicated, len(r.Failed), len(r.Unsettled), r.Backfills, r.Commands, r.Deferred, bytesize.Format(r.BytesCopied))
	if len(r.Dead) > 0 || len(r.Suspect) > 0 {
		fmt.Fprintf(w, "  dead brokers %v, suspect (within grace) %v\n", r.Dead, r.Suspect)
	}
	byReason := map[string][]meta.SegmentID{}
	for _, f := range r.Failed {
		byReason[f.Reason.String()] = append(byReason[f.Reason.String()], f.Segment)
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

// writeTotals prints the coordinator's cumulative figures.
func writeTotals(w io.Writer, t *plugin.Totals) {
	if t == nil {
		return
	}
	fmt.Fprintf(w, "since this leader started at %s: %d passes, %d segments healed, %s backfilled by %d backfills, %d copies settled, %d confirmed, %d deleted\n",
		t.Since.Format(time.RFC3339), t.Passes, t.SegmentsHealed, bytesize.Format(t.BytesHealed), t.Backfills, t.Settled, t.Confirmed, t.Deleted)
	if len(t.Failures) > 0 {
		reasons := make([]string, 0, len(t.Failures))
		for k := range t.Failures {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		fmt.Fprintf(w, "  failures reported, by reason (a segment counts once per pass):")
		for _, k := range reasons {
			fmt.Fprintf(w, " %s %d", k, t.Failures[k])
		}
		fmt.Fprintln(w)
	}
}
