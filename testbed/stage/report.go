package stage

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
)

// Report is what one stage did and saw: its record in the demo's report.
type Report struct {
	Stage string `json:"stage"` // a name of Names
	// Began and Ended bound the stage, its fault and its heal.
	Began time.Time `json:"began"`
	Ended time.Time `json:"ended"`
	// What names the target: "broker 3", "5 copies".
	What     string `json:"what"`
	Injected bool   `json:"injected"`
	// Skipped says why the stage did not run (left out, or a facility
	// missing); a fault that did not happen is an Error (notInjected).
	Skipped string `json:"skipped,omitempty"`
	// Broker is the broker killed or restarted.
	Broker meta.BrokerID `json:"broker,omitempty"`
	// Copies are the files changed on disk; Latched the copies latched.
	Copies  []harness.Fault `json:"copies,omitempty"`
	Latched []heal.CopyRef  `json:"latched,omitempty"`
	// Affected counts the segments seen unhealthy during the stage.
	Affected int `json:"affected_segments"`
	// Detected says the cluster noticed: for a disk fault, the copy was
	// repaired, replaced or latched; false with Healed false means nothing
	// reacted before the stage's timeout.
	Detected bool `json:"detected"`
	Healed   bool `json:"healed"`
	// GraceWaitSeconds: from the kill to the broker counting as dead
	// (kill and leader stages).
	GraceWaitSeconds *float64 `json:"grace_wait_seconds,omitempty"`
	// DeadSeenSeconds: from the kill to the start of the first heal pass
	// of the leader's history listing the broker dead (kill and leader
	// stages).
	DeadSeenSeconds *float64 `json:"dead_seen_seconds,omitempty"`
	// SecondsToHeal: from the fault (or the death, for a kill) to every
	// segment healthy again.
	SecondsToHeal *float64 `json:"seconds_to_heal"`
	// NewLeader and LeaderSeconds: leader stage only.
	NewLeader     meta.BrokerID `json:"new_leader,omitempty"`
	LeaderSeconds *float64      `json:"leader_seconds,omitempty"`
	// BytesRereplicated: backfill bytes the brokers received during the
	// stage; BytesEstimated: the stage's estimate from copy sizes.
	BytesRereplicated int64 `json:"bytes_rereplicated"`
	BytesEstimated    int64 `json:"bytes_estimated"`
	// Passes counts the heal passes of the stage read from the leader's
	// pass history: every one that ended while the stage watched them.
	Passes int `json:"passes_read"`
	// PassesUnread counts the passes the histories numbered in the stage
	// that no read returned (dropped by the history's bound or skipped):
	// one fails the stage.
	PassesUnread uint64 `json:"passes_unread"`
	// MaxPassSeconds is the longest of them, and BackfillPassSeconds the
	// summed duration of those that ran backfills: where the healing time
	// went.
	MaxPassSeconds      float64 `json:"max_pass_seconds"`
	BackfillPassSeconds float64 `json:"backfill_pass_seconds"`
	// Destroyed: the lost stage's segments, with how they were reported.
	// For that stage Healed means reported as required, not repaired.
	Destroyed []Destroyed `json:"destroyed,omitempty"`
	// Figures: the stage's own measurements (decommission, maintenance,
	// rebalance), nil for the others.
	Figures *Figures `json:"figures,omitempty"`
	Note    string   `json:"note,omitempty"`
	Error   string   `json:"error,omitempty"`

	healedAt time.Time // when the view that found it healed was taken
}

// Figures are what a stage measures beyond the record's common fields;
// each stage fills its own and leaves the rest empty.
type Figures struct {
	// Broker is the broker drained, stopped in its window, or emptied and
	// refilled.
	Broker meta.BrokerID `json:"broker"`
	// SegmentsMoved and BytesMoved: the sealed replicas (and their bytes)
	// the decommissioned broker held when it started; all of them moved
	// when Drained.
	SegmentsMoved int   `json:"segments_moved,omitempty"`
	BytesMoved    int64 `json:"bytes_moved,omitempty"`
	Drained       bool  `json:"drained,omitempty"`
	// SecondsToDrain: from the decommission command to the broker drained
	// (the end of the first pass reporting it; for rebalance the metadata
	// read naming it nowhere); Rate is BytesMoved over it.
	SecondsToDrain *float64 `json:"seconds_to_drain,omitempty"`
	Rate           float64  `json:"rate_bytes_per_sec,omitempty"`
	// BelowFactor counts the heal passes with a command whose replica set
	// has fewer members than the replication factor, and the metadata
	// reads that found such a set (must be 0).
	BelowFactor int `json:"below_factor"`
	// Maintenance: the passes with the broker absent in its window, those
	// past the grace delay, and those that changed a replica set.
	PassesInWindow  int `json:"passes_in_window,omitempty"`
	PassesPastGrace int `json:"passes_past_grace,omitempty"`
	SetsChanged     int `json:"sets_changed"`
	// Rebalance: the spreads over the running brokers when the emptied
	// broker came back and once balanced; the replicas added to a set
	// (each a move) while balancing, and those the emptied broker got.
	Before   *harness.LoadSpread `json:"before,omitempty"`
	After    *harness.LoadSpread `json:"after,omitempty"`
	Moves    int                 `json:"moves,omitempty"`
	Received int                 `json:"received,omitempty"`
}

// Destroyed is a segment whose every copy the lost stage destroyed.
type Destroyed struct {
	Segment meta.SegmentID `json:"segment"`
	How     string         `json:"how"`
	// Copies counts the copy files destroyed: every replica's, and any
	// left outside the replica set by earlier stages.
	Copies int `json:"copies"`
	// PassesReported counts the heal passes read that list it lost;
	// PassesNotReporting those after its first report that did not.
	PassesReported     int `json:"passes_reported"`
	PassesNotReporting int `json:"passes_not_reporting"`
	// ReportedAfterSeconds: from the fault to the first pass reporting it.
	ReportedAfterSeconds *float64 `json:"reported_after_seconds"`
	Acknowledged         bool     `json:"acknowledged"`
	// FilesKept counts the damaged copies still on disk, unchanged, at the
	// end of the stage (damaged in place only).
	FilesKept int `json:"files_kept,omitempty"`
}

// Seconds is d in seconds, to the millisecond.
func Seconds(d time.Duration) *float64 {
	s := math.Round(d.Seconds()*1000) / 1000
	return &s
}

// FormatSeconds prints seconds, "never" for nil.
func FormatSeconds(p *float64) string {
	if p == nil {
		return "never"
	}
	return fmt.Sprintf("%.3fs", *p)
}

// Missed says the stage's fault did not happen, for a reason other than
// the operator's choice or a missing facility (Skipped): the run fails,
// whether or not the stage recorded why.
func (f *Report) Missed() bool { return !f.Injected && f.Skipped == "" }

// judge is a stage's verdict: detected says the cluster noticed the
// fault, problems (empty ones left out) what went wrong, joined to
// f.Error. The stage healed when it was detected and its record holds no
// error.
func (f *Report) judge(detected bool, problems ...string) {
	for _, p := range problems {
		f.Error = joinErr(f.Error, p)
	}
	f.Detected = detected
	f.Healed = detected && f.Error == ""
}

// problems are what a stage found wrong, each once.
type problems []string

// add notes a problem (an empty one is none).
func (p *problems) add(format string, args ...any) {
	if s := fmt.Sprintf(format, args...); s != "" && !slices.Contains(*p, s) {
		*p = append(*p, s)
	}
}

// record adds err to f's error and returns it.
func (f *Report) record(err error) error {
	f.Error = joinErr(f.Error, err.Error())
	return err
}

// notInjected records that the cluster's state kept f's fault from
// happening: the stage fails, never counted survived.
func (f *Report) notInjected(why string) { f.Error = "not injected: " + why }
