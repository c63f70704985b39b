package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/testbed/stage"

	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/kafkaload"
	"github.com/malachi-log/malachi/testbed/nemesis"

	"github.com/malachi-log/malachi/meta"
)

// Report is what `malachi-demo` ends with, printed as text or, with
// --json, as this JSON document. Durations are seconds; a duration that
// was never reached (a stage that did not heal) is null.
type Report struct {
	OK                bool `json:"ok"`
	Brokers           int  `json:"brokers"`
	ReplicationFactor int  `json:"replication_factor"`
	Segments          int  `json:"segments"`
	// PartitionSegments is how many of Segments are the clients' Kafka
	// partition segments (sealed when a partition rolled).
	PartitionSegments int   `json:"partition_segments,omitempty"`
	SegmentBytes      int64 `json:"segment_bytes"`
	// Config is what the demo set in the brokers' configs (and its poll).
	Config map[string]string `json:"config,omitempty"`
	// At the end: segments below RF; not healthy otherwise (or reported
	// failed); with no intact copy on any running broker.
	UnderReplicated  int `json:"under_replicated"`
	Failed           int `json:"failed"`
	DataLossSegments int `json:"data_loss_segments"`
	// SecondsToHeal and GraceWaitSeconds are the kill stage's.
	SecondsToHeal    *float64 `json:"seconds_to_heal"`
	GraceWaitSeconds *float64 `json:"grace_wait_seconds"`
	// BytesRereplicated sums the stages' (rereplicatedMeaning);
	// BytesEstimated, the demo's model from copy sizes, is JSON only.
	BytesRereplicated int64 `json:"bytes_rereplicated"`
	BytesEstimated    int64 `json:"bytes_estimated"`
	// AuditBytes counts the bytes the demo read to audit copies itself.
	AuditBytes   int64   `json:"audit_bytes"`
	LoadSeconds  float64 `json:"load_seconds"`
	LoadBytes    int64   `json:"load_bytes"`
	TotalSeconds float64 `json:"total_seconds"`
	// Summary is the run in the few figures the README quotes.
	Summary Summary `json:"summary"`
	// Destroyed lists what the lost stage destroyed, when it held: not
	// counted in Failed or DataLossSegments.
	Destroyed []stage.Destroyed `json:"destroyed,omitempty"`
	// Verification says what "verified" meant in this run.
	Verification []string       `json:"verification"`
	Faults       []stage.Report `json:"faults"`
	// Unhealthy names up to 20 segments not healthy at the end, with why.
	Unhealthy map[meta.SegmentID]string `json:"unhealthy,omitempty"`
	Notes     []string                  `json:"notes,omitempty"`
	Error     string                    `json:"error,omitempty"`
	// Dir is where the cluster's configs, data and logs are (kept on
	// failure and with --keep).
	Dir string `json:"dir,omitempty"`
	// Nemesis is the randomized nemesis's run (--nemesis), nil without.
	Nemesis *nemesis.Report `json:"nemesis,omitempty"`
	// Clients is the Kafka clients' check (--clients), nil without: an
	// acknowledged record lost, a record duplicated or out of order, or a
	// check that could not read everything back fails the run.
	Clients *kafkaload.Report `json:"clients,omitempty"`
	// LongestClientStallByStage is, with clients and stages, the longest
	// client stall over nemesis.StallThreshold that began during each
	// stage, in seconds ("none": between stages); a stage without one is
	// absent.
	LongestClientStallByStage map[string]float64 `json:"longest_client_stall_by_stage,omitempty"`
}

// attributeStalls ties the clients' stalls in h to the stage during
// which each began (LongestClientStallByStage).
func (r *Report) attributeStalls(h kafkaload.History) {
	var windows []kafkaload.Window
	for _, f := range r.Faults {
		if f.Injected {
			windows = append(windows, kafkaload.Window{Kind: f.Stage, Start: f.Began, End: f.Ended})
		}
	}
	if len(windows) == 0 {
		return
	}
	r.LongestClientStallByStage = map[string]float64{}
	for k, d := range kafkaload.Attribute(kafkaload.Stalls(h, nemesis.StallThreshold), windows, 0) {
		r.LongestClientStallByStage[k] = d.Round(time.Millisecond).Seconds()
	}
}

// Summary is the run's headline figures.
type Summary struct {
	// FaultsInjected counts the stages that injected their fault;
	// FaultsSurvived those that then healed (for lost: reported as
	// required).
	FaultsInjected int `json:"faults_injected"`
	FaultsSurvived int `json:"faults_survived"`
	// SegmentsChecked counts the sealed segments of the final check, the
	// destroyed ones included; SegmentsHealthy those found healthy.
	SegmentsChecked int `json:"segments_checked"`
	SegmentsHealthy int `json:"segments_healthy"`
	// CopiesVerified counts the audits that read and passed a copy over
	// the run; CopiesVerifiedAtEnd the replicas intact at the end.
	CopiesVerified      int `json:"copies_verified"`
	CopiesVerifiedAtEnd int `json:"copies_verified_at_end"`
	// BytesRereplicated is Report.BytesRereplicated.
	BytesRereplicated int64 `json:"bytes_rereplicated"`
	// SecondsToHeal is each injected stage's seconds_to_heal, in order.
	SecondsToHeal []stageSeconds `json:"seconds_to_heal"`
	// SegmentsLost is DataLossSegments: segments with no intact copy
	// that were not destroyed on purpose.
	SegmentsLost      int `json:"segments_lost"`
	SegmentsDestroyed int `json:"segments_destroyed"`
}

type stageSeconds struct {
	Stage   string   `json:"stage"`
	Seconds *float64 `json:"seconds"`
}

// heldDestroyed is what the lost stage destroyed when it held (every
// segment reported lost on every pass, none of Y's files deleted,
// acknowledged): only then is it set apart from real loss.
func (r *Report) heldDestroyed() []stage.Destroyed {
	var out []stage.Destroyed
	for _, f := range r.Faults {
		if f.Stage == "lost" && f.Injected && f.Healed {
			out = append(out, f.Destroyed...)
		}
	}
	return out
}

// destroyed says id is one of ds.
func destroyed(ds []stage.Destroyed, id meta.SegmentID) bool {
	return slices.ContainsFunc(ds, func(d stage.Destroyed) bool { return d.Segment == id })
}

// finish fills the end-of-run fields from e (destroyed segments left
// out by the caller) and decides OK.
func (r *Report) finish(e harness.Evaluation, failedByPass int, runErr error) {
	r.Destroyed = r.heldDestroyed()
	r.UnderReplicated = e.UnderReplicated
	r.Failed = max(e.Damaged, failedByPass)
	r.DataLossSegments = e.DataLoss
	r.Unhealthy = nil
	for i, id := range slices.Sorted(maps.Keys(e.Unhealthy)) {
		if i == 20 {
			break
		}
		if r.Unhealthy == nil {
			r.Unhealthy = map[meta.SegmentID]string{}
		}
		r.Unhealthy[id] = e.Unhealthy[id]
	}
	r.BytesRereplicated, r.BytesEstimated = 0, 0
	if r.Nemesis != nil {
		r.BytesRereplicated = r.Nemesis.BytesRereplicated
	}
	stagesOK := true
	for _, f := range r.Faults {
		r.BytesRereplicated += f.BytesRereplicated
		r.BytesEstimated += f.BytesEstimated
		if f.Injected && !f.Healed || f.Missed() {
			stagesOK = false
		}
		if f.Stage == "kill" && f.Injected {
			r.SecondsToHeal, r.GraceWaitSeconds = f.SecondsToHeal, f.GraceWaitSeconds
		}
	}
	if runErr != nil {
		r.Error = runErr.Error()
	}
	r.OK = runErr == nil && stagesOK && e.OK() && e.UnderReplicated == 0 && e.DataLoss == 0 && r.Failed == 0 && r.Segments == e.Sealed+len(r.Destroyed)
	if n := r.Nemesis; n != nil && (!nemesisHeld(n) || len(n.NotInjected) > 0) || r.Clients != nil && !r.Clients.OK() {
		r.OK = false
	}
	r.summarize(e)
}

// stageAt names the stage running at t, "" for none.
func (r *Report) stageAt(t time.Time) string {
	for _, f := range r.Faults {
		if !t.Before(f.Began) && t.Before(f.Ended) {
			return f.Stage
		}
	}
	return ""
}

// summarize fills Summary from the stages and the final harness.Evaluation;
// CopiesVerified and CopiesVerifiedAtEnd are the caller's, kept.
func (r *Report) summarize(e harness.Evaluation) {
	s := Summary{
		CopiesVerified: r.Summary.CopiesVerified, CopiesVerifiedAtEnd: r.Summary.CopiesVerifiedAtEnd,
		SegmentsChecked: e.Sealed + len(r.Destroyed), SegmentsHealthy: e.Healthy,
		BytesRereplicated: r.BytesRereplicated, SegmentsLost: r.DataLossSegments, SegmentsDestroyed: len(r.Destroyed),
		SecondsToHeal: []stageSeconds{},
	}
	for _, f := range r.Faults {
		if !f.Injected {
			continue
		}
		s.FaultsInjected++
		if f.Healed {
			s.FaultsSurvived++
		}
		s.SecondsToHeal = append(s.SecondsToHeal, stageSeconds{Stage: f.Stage, Seconds: f.SecondsToHeal})
	}
	if n := r.Nemesis; n != nil {
		injected := 0
		for _, c := range n.FaultsInjected {
			injected += c
		}
		s.FaultsInjected += injected
		if nemesisHeld(n) {
			s.FaultsSurvived += injected
		}
	}
	r.Summary = s
}

// nemesisHeld: the nemesis lost no segment, found no violation, undid
// every fault and ran every check, each passing.
func nemesisHeld(n *nemesis.Report) bool {
	return n.SegmentsLost == 0 && len(n.Violations) == 0 && len(n.UndoFailed) == 0 && n.ChecksRun > 0 && n.ChecksPassed == n.ChecksRun
}

// writeJSON prints the report as indented JSON.
func (r *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// rereplicatedMeaning is the one re-replicated figure the text prints.
const rereplicatedMeaning = "bytes the backfills received, the growth of malachi_heal_backfill_bytes_total summed over every broker and stage"

// writeText prints the report for a person.
func (r *Report) writeText(w io.Writer) {
	r.writeOverview(w)
	r.writeSummary(w)
	r.writeFaults(w)
	if r.Nemesis != nil {
		r.Nemesis.WriteText(w)
	}
	r.writeClosing(w)
}

// writeOverview prints the verdict, the cluster and its load, the time to
// heal, the bytes moved, the state at the end, the clients and the
// segments destroyed on purpose.
func (r *Report) writeOverview(w io.Writer) {
	verdict := "HEALED"
	if !r.OK {
		verdict = "NOT HEALED"
	}
	fmt.Fprintf(w, "\n== report: %s ==\n", verdict)
	fmt.Fprintf(w, "cluster            %d brokers, replication factor %d, %d sealed segments of %s\n", r.Brokers, r.ReplicationFactor, r.Segments, bytesize.Format(r.SegmentBytes))
	if len(r.Config) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.Config)) {
			parts = append(parts, k+"="+r.Config[k])
		}
		fmt.Fprintf(w, "config             %s\n", strings.Join(parts, " "))
	}
	fmt.Fprintf(w, "load               %s in %.2fs\n", bytesize.Format(r.LoadBytes), r.LoadSeconds)
	r.writeHealTime(w)
	fmt.Fprintf(w, "re-replicated      %s (%s)\n", bytesize.Format(r.BytesRereplicated), rereplicatedMeaning)
	fmt.Fprintf(w, "audited            %s of copies read and checked by the demo itself\n", bytesize.Format(r.AuditBytes))
	fmt.Fprintf(w, "at the end         under_replicated=%d failed=%d data_loss_segments=%d\n", r.UnderReplicated, r.Failed, r.DataLossSegments)
	if r.Clients != nil {
		r.Clients.WriteText(w)
		if st := r.stageAt(r.Clients.LongestStallFrom); st != "" {
			fmt.Fprintf(w, "                   the longest time without an acknowledgement began during stage %s\n", st)
		}
		if len(r.LongestClientStallByStage) > 0 {
			var by []string
			for _, k := range slices.Sorted(maps.Keys(r.LongestClientStallByStage)) {
				by = append(by, fmt.Sprintf("%s %.1fs", k, r.LongestClientStallByStage[k]))
			}
			fmt.Fprintf(w, "                   longest client stall over %v by the stage it began in: %s\n", nemesis.StallThreshold, strings.Join(by, ", "))
		}
	}
	for _, ds := range r.Destroyed {
		ack := "not acknowledged"
		if ds.Acknowledged {
			ack = "acknowledged"
		}
		fmt.Fprintf(w, "destroyed          %s on purpose (%s): reported lost on %d passes, not on %d, %s\n", ds.Segment, ds.How, ds.PassesReported, ds.PassesNotReporting, ack)
	}
}

// writeHealTime prints the seconds to heal a staged broker kill and its
// grace wait, or why there is no such figure.
func (r *Report) writeHealTime(w io.Writer) {
	if slices.ContainsFunc(r.Faults, func(f stage.Report) bool { return f.Stage == "kill" && f.Injected }) {
		fmt.Fprintf(w, "seconds_to_heal    %s (broker kill: from dead to every segment at RF, every copy verified)\n", stage.FormatSeconds(r.SecondsToHeal))
		fmt.Fprintf(w, "grace_wait         %s (from kill -9 to counted dead)\n", stage.FormatSeconds(r.GraceWaitSeconds))
	} else if r.Nemesis != nil {
		fmt.Fprintf(w, "seconds_to_heal    - (no staged kill: the nemesis's faults and heals are below)\n")
	} else {
		fmt.Fprintf(w, "seconds_to_heal    - (no broker was killed: the kill stage did not run)\n")
	}
}

// writeSummary prints r.Summary: faults, segments, copies verified, bytes
// re-replicated and the seconds to heal of each stage.
func (r *Report) writeSummary(w io.Writer) {
	sm := r.Summary
	fmt.Fprintf(w, "\nsummary            faults injected %d, survived %d; segments checked %d (%d healthy, %d destroyed on purpose), lost %d\n",
		sm.FaultsInjected, sm.FaultsSurvived, sm.SegmentsChecked, sm.SegmentsHealthy, sm.SegmentsDestroyed, sm.SegmentsLost)
	fmt.Fprintf(w, "                   copies verified %d by the demo's audits over the run, %d intact in the final check; %s re-replicated\n",
		sm.CopiesVerified, sm.CopiesVerifiedAtEnd, bytesize.Format(sm.BytesRereplicated))
	if len(sm.SecondsToHeal) > 0 {
		var parts []string
		for _, st := range sm.SecondsToHeal {
			parts = append(parts, st.Stage+" "+stage.FormatSeconds(st.Seconds))
		}
		fmt.Fprintf(w, "                   seconds to heal: %s\n", strings.Join(parts, ", "))
	}
}

// writeFaults prints the table of staged faults, one row each, and the
// heal passes observed over all stages; nothing when no stage ran.
func (r *Report) writeFaults(w io.Writer) {
	if len(r.Faults) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%-13s %-30s %-9s %-9s %-10s %-10s %s\n", "stage", "fault", "detected", "healed", "grace", "to heal", "re-replicated")
	read, unread := 0, uint64(0)
	for _, f := range r.Faults {
		writeRow(w, &f)
		read, unread = read+f.Passes, unread+f.PassesUnread
	}
	fmt.Fprintf(w, "\nheal passes observed: %d of %d (every stage's, from the leader's pass history)\n", read, uint64(read)+unread)
}

// writeRow prints f's row of the fault table, with its passes, note and
// error on lines of their own, or why it was not injected.
func writeRow(w io.Writer, f *stage.Report) {
	if f.Missed() {
		why := f.Error
		if why == "" {
			why = "the stage recorded no reason"
		}
		fmt.Fprintf(w, "%-13s NOT INJECTED: %s\n", f.Stage, why)
		return
	}
	if !f.Injected {
		fmt.Fprintf(w, "%-13s skipped: %s\n", f.Stage, f.Skipped)
		return
	}
	grace := "-"
	if f.GraceWaitSeconds != nil {
		grace = stage.FormatSeconds(f.GraceWaitSeconds)
	}
	fmt.Fprintf(w, "%-13s %-30s %-9v %-9v %-10s %-10s %s\n", f.Stage, truncate(f.What, 30), f.Detected, f.Healed, grace, stage.FormatSeconds(f.SecondsToHeal), bytesize.Format(f.BytesRereplicated))
	if f.BackfillPassSeconds > 0 {
		fmt.Fprintf(w, "              heal passes read: %d, longest %.3fs, backfilling %.3fs\n", f.Passes, f.MaxPassSeconds, f.BackfillPassSeconds)
	}
	if f.Note != "" {
		fmt.Fprintf(w, "              note: %s\n", f.Note)
	}
	if f.Error != "" {
		fmt.Fprintf(w, "              error: %s\n", f.Error)
	}
}

// writeClosing prints what "verified" means, the segments not healthy at
// the end, the notes, the run's error and the cluster directory.
func (r *Report) writeClosing(w io.Writer) {
	fmt.Fprintf(w, "\nverified means:\n")
	for _, v := range r.Verification {
		fmt.Fprintf(w, "  - %s\n", v)
	}
	if len(r.Unhealthy) > 0 {
		fmt.Fprintf(w, "\nnot healthy at the end (first %d):\n", len(r.Unhealthy))
		for _, id := range slices.Sorted(maps.Keys(r.Unhealthy)) {
			fmt.Fprintf(w, "  %s: %s\n", id, r.Unhealthy[id])
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
	if r.Dir != "" {
		fmt.Fprintf(w, "cluster directory: %s\n", r.Dir)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
