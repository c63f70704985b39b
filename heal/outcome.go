package heal

import (
	"slices"

	"github.com/malachi-log/malachi/meta"
)

// Result is what executing one action came to. The executor only
// classifies errors; what a failure means for later passes (a refusal,
// an avoided target, a conflict) is decided by Step.
type Result uint8

const (
	// NotRun: not started (gated by the plan's contract, or the pass was
	// cancelled first).
	NotRun Result = iota
	// Succeeded: the step returned nil.
	Succeeded
	// Failed: any error not classified below.
	Failed
	// SourceRefused: a backfill whose error wraps ErrSourceRefused.
	SourceRefused
	// NoDurableEnd: a backfill whose target could not open its copy at
	// its durable end (an error wrapping ErrNoDurableEnd): the source was
	// not read.
	NoDurableEnd
	// SealConflicted: the target answered ErrSealConflict.
	SealConflicted
	// Cancelled: a backfill cancelled because a dead replica it replaces
	// came back (Outcomes.Returned).
	Cancelled
	// Interrupted: the step failed because the pass was cancelled.
	Interrupted
	// StaleSet: a SetReplicas found another replica set
	// (meta.ErrStaleReplicas).
	StaleSet
)

// Outcome is the result of one action.
type Outcome struct {
	Result Result `json:"result"`
	// Err is the error text of a failed step.
	Err string `json:"err,omitempty"`
	// Bytes is what a backfill transferred.
	Bytes int64 `json:"bytes,omitempty"`
}

// Outcomes is what executing a Plan did: a value the next Step folds into
// the State and Report turns into the pass's Report.
type Outcomes struct {
	Plan Plan `json:"plan"`
	// Of is parallel to Plan.Actions.
	Of []Outcome `json:"of"`
	// Returned are the segments, sorted, whose backfills were cancelled
	// because a dead replica they replace answered with an intact copy.
	Returned []meta.SegmentID `json:"returned,omitempty"`
	// Seen are brokers that answered while the plan ran.
	Seen []Seen `json:"seen,omitempty"`
	// Aborted says the pass was cancelled (leadership lost).
	Aborted bool `json:"aborted,omitempty"`
}

func (o *Outcomes) of(i int) Outcome {
	if i < len(o.Of) {
		return o.Of[i]
	}
	return Outcome{}
}

func (o *Outcomes) returned(seg meta.SegmentID) bool {
	_, ok := slices.BinarySearch(o.Returned, seg)
	return ok
}

// unready returns the segments with a backfill that did not Succeed (one
// not run, cancelled or interrupted is no copy on its target): their
// SetReplicas may not run. One pass over the plan; nil when every
// backfill succeeded.
func (o *Outcomes) unready() map[meta.SegmentID]bool {
	var out map[meta.SegmentID]bool
	for k := range o.Plan.Actions {
		b := &o.Plan.Actions[k]
		if b.Op.IsBackfill() && o.of(k).Result != Succeeded {
			if out == nil {
				out = map[meta.SegmentID]bool{}
			}
			out[b.Segment.ID] = true
		}
	}
	return out
}

// ReadyAt returns the indexes in Plan.Actions of the SetReplicas whose
// backfills all Succeeded and no replica of which came back, in plan
// order: the commands the seed's heal returns "for the caller to apply
// through the control plane" (Ready). On an aborted pass it holds only
// those whose backfills had all succeeded. O(actions).
func (o *Outcomes) ReadyAt() []int {
	var out []int
	unready := o.unready()
	for i := range o.Plan.Actions {
		a := &o.Plan.Actions[i]
		if a.Op == SetReplicas && !unready[a.Segment.ID] && !o.returned(a.Segment.ID) {
			out = append(out, i)
		}
	}
	return out
}

// Ready returns the commands of ReadyAt (Report.Ready).
func (o *Outcomes) Ready() []meta.SetSegmentReplicas {
	var out []meta.SetSegmentReplicas
	for _, i := range o.ReadyAt() {
		out = append(out, o.Plan.Actions[i].Command)
	}
	return out
}
