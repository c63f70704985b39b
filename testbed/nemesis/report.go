package nemesis

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/kafkaload"
)

// Report is a run's figures, its violations and its schedule; a runner
// prints it within its own report (its JSON field names are the demo's
// --json nemesis section).
type Report struct {
	Seed     uint64  `json:"seed"`
	Duration string  `json:"duration"`
	Minutes  float64 `json:"minutes"`
	Epochs   int     `json:"epochs"`
	// Kinds are the kinds Options.Kinds restricted the draw to (none:
	// every kind the cluster could take).
	Kinds []FaultKind `json:"kinds,omitempty"`
	// FaultsScheduled and FaultsInjected count by kind; a scheduled fault
	// that could not be injected is in NotInjected with why, never counted
	// as survived, and the run fails: a fault that did not happen was not
	// survived either.
	FaultsScheduled map[FaultKind]int `json:"faults_scheduled"`
	FaultsInjected  map[FaultKind]int `json:"faults_injected"`
	NotInjected     []string          `json:"not_injected,omitempty"`
	// UndoFailed lists faults whose undo failed: the quiescent point after
	// them was not one, and the run fails.
	UndoFailed []string `json:"undo_failed,omitempty"`
	// QuorumLossWindows are the deliberate quorum-loss windows injected:
	// writes were expected to fail during them.
	QuorumLossWindows int `json:"quorum_loss_windows"`
	// SegmentsWritten counts the writer's attempts (one segment each),
	// SegmentsAcknowledged those the cluster acknowledged; WriteFailures the
	// rest, of which WriteFailuresQuorumLoss fell in a quorum-loss window.
	SegmentsWritten         int `json:"segments_written"`
	SegmentsAcknowledged    int `json:"segments_acknowledged"`
	WriteFailures           int `json:"write_failures"`
	WriteFailuresQuorumLoss int `json:"write_failures_quorum_loss"`
	// SegmentsLost counts acknowledged segments without a verified copy at
	// the last check (must be 0).
	SegmentsLost int `json:"segments_lost"`
	// CopiesVerified counts the replica copies the checker read in full and
	// found matching their frames' CRCs and the segment's checksum, over
	// every quiescent check.
	CopiesVerified int `json:"copies_verified"`
	ChecksRun      int `json:"quiescent_checks"`
	ChecksPassed   int `json:"quiescent_checks_passed"`
	PassesObserved int `json:"passes_observed"`
	// BytesRereplicated: the growth of every broker's backfill byte
	// counter over each epoch and its heal (a broker killed in an epoch
	// counts from its restart: a lower bound).
	BytesRereplicated int64 `json:"bytes_rereplicated"`
	PassesUnseen      int   `json:"passes_unseen"`
	HoldsSeen         int   `json:"passes_on_hold"`
	// KillsDuringWrite counts the kills that struck while a write was in
	// flight (a kill waits for one to begin, up to twice the writer's
	// period).
	KillsDuringWrite int      `json:"kills_during_write"`
	SetChangesSeen   int      `json:"replica_set_changes_seen"`
	Violations       []string `json:"violations,omitempty"`
	Schedule         string   `json:"schedule"`
	// ClientStalls are the Kafka clients' waits over StallThreshold, each
	// with the kinds of the faults active at its start, and
	// LongestStallByKind the longest by kind, in seconds ("none": a stall
	// that began under no fault). Empty without clients (AttributeStalls).
	ClientStalls       []kafkaload.Stall  `json:"client_stalls,omitempty"`
	LongestStallByKind map[string]float64 `json:"longest_client_stall_by_kind,omitempty"`
	// FaultWindows are the faults' times on the cluster, the timeline the
	// stalls are put on.
	FaultWindows []kafkaload.Window `json:"fault_windows,omitempty"`
}

// StallThreshold is the wait above which a client's acknowledgement is a
// stall the report ties to the faults of its time.
const StallThreshold = time.Second

// stallSlack is how far from a stall's start a fault still counts as
// its cause: a record is sent up to an acknowledgement's time (hundreds
// of milliseconds under load) before the fault that holds it strikes.
const stallSlack = StallThreshold

// AttributeStalls puts the clients' stalls of h on the run's timeline of
// faults: ClientStalls and LongestStallByKind.
func (r *Report) AttributeStalls(h kafkaload.History) {
	r.ClientStalls = kafkaload.Stalls(h, StallThreshold)
	r.LongestStallByKind = map[string]float64{}
	for k, d := range kafkaload.Attribute(r.ClientStalls, r.FaultWindows, stallSlack) {
		r.LongestStallByKind[k] = d.Round(time.Millisecond).Seconds()
	}
}

// Replay is the flags of `malachi-demo` that draw the same schedule
// again.
func (r *Report) Replay() string {
	s := fmt.Sprintf("--nemesis random --seed %d --duration %s", r.Seed, r.Duration)
	if len(r.Kinds) > 0 {
		s += " --nemesis-kinds " + strings.Join(KindNames(r.Kinds), ",")
	}
	return s
}

// WriteText prints the figures as the demo's text report shows them.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\nnemesis            seed %d, %.1f minutes (--duration %s), %d epochs; replay: %s\n",
		r.Seed, r.Minutes, r.Duration, r.Epochs, r.Replay())
	kinds := slices.Sorted(maps.Keys(r.FaultsScheduled))
	var parts []string
	injected := 0
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d/%d", k, r.FaultsInjected[k], r.FaultsScheduled[k]))
		injected += r.FaultsInjected[k]
	}
	fmt.Fprintf(w, "  faults injected/scheduled: %d in all: %s\n", injected, strings.Join(parts, ", "))
	fmt.Fprintf(w, "  writes: %d segments written, %d acknowledged, %d failed (%d in %d quorum-loss windows, expected); %d of %d kills struck mid-write\n",
		r.SegmentsWritten, r.SegmentsAcknowledged, r.WriteFailures, r.WriteFailuresQuorumLoss, r.QuorumLossWindows, r.KillsDuringWrite, r.FaultsInjected[harness.KindKill])
	fmt.Fprintf(w, "  segments lost: %d; copies read and verified: %d; quiescent checks passed: %d of %d\n",
		r.SegmentsLost, r.CopiesVerified, r.ChecksPassed, r.ChecksRun)
	fmt.Fprintf(w, "  heal passes observed: %d of %d (from every broker's pass history), %d on hold; replica-set changes seen: %d\n",
		r.PassesObserved, r.PassesObserved+r.PassesUnseen, r.HoldsSeen, r.SetChangesSeen)
	if len(r.ClientStalls) > 0 {
		var by []string
		for _, k := range slices.Sorted(maps.Keys(r.LongestStallByKind)) {
			by = append(by, fmt.Sprintf("%s %.1fs", k, r.LongestStallByKind[k]))
		}
		fmt.Fprintf(w, "  client stalls over %v: %d; longest by the faults active at their start: %s\n",
			StallThreshold, len(r.ClientStalls), strings.Join(by, ", "))
	}
	for _, s := range r.NotInjected {
		fmt.Fprintf(w, "  NOT injected: %s\n", s)
	}
	for _, s := range r.UndoFailed {
		fmt.Fprintf(w, "  UNDO FAILED: %s\n", s)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  VIOLATION: %s\n", v)
	}
	if len(r.Violations) > 0 || len(r.NotInjected) > 0 || r.ChecksPassed < r.ChecksRun {
		fmt.Fprintf(w, "%s", r.Schedule)
	}
}
