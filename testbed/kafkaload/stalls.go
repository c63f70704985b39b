package kafkaload

import (
	"slices"
	"sort"
	"time"
)

// Stall is a stretch of time in which the clients waited long for their
// acknowledgements: the union of the [sent, acknowledged] spans of the
// records that each took over the stall threshold, overlapping spans
// merged, and the gaps over the threshold in which nothing was
// acknowledged. Longest is the longest single wait in it; Records counts
// the slow records.
type Stall struct {
	From    time.Time     `json:"from"`
	To      time.Time     `json:"to"`
	Longest time.Duration `json:"longest"`
	Records int           `json:"records"`
	// Faults are the kinds of the fault windows that were active at the
	// stall's start (Attribute); none: no fault was.
	Faults []string `json:"faults,omitempty"`
}

// Stalls are h's stalls over threshold, in time order: the spans of the
// acknowledged records whose latency exceeded it and the gaps over it
// between two acknowledgements (and the load's longest, to its Stop: no
// record acknowledged at all is a stall too, though none has a latency),
// merged where they overlap.
func Stalls(h History, threshold time.Duration) []Stall {
	var spans []Stall
	for i, lat := range h.AckLatencies {
		if lat > threshold {
			at := h.AckTimes[i]
			spans = append(spans, Stall{From: at.Add(-lat), To: at, Longest: lat, Records: 1})
		}
	}
	acks := slices.Clone(h.AckTimes)
	slices.SortFunc(acks, time.Time.Compare)
	for i := 1; i < len(acks); i++ {
		if gap := acks[i].Sub(acks[i-1]); gap > threshold {
			spans = append(spans, Stall{From: acks[i-1], To: acks[i], Longest: gap})
		}
	}
	if h.LongestStall > threshold {
		spans = append(spans, Stall{From: h.LongestStallFrom, To: h.LongestStallFrom.Add(h.LongestStall), Longest: h.LongestStall})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].From.Before(spans[j].From) })
	var out []Stall
	for _, s := range spans {
		if n := len(out); n > 0 && !s.From.After(out[n-1].To) {
			last := &out[n-1]
			if s.To.After(last.To) {
				last.To = s.To
			}
			last.Longest = max(last.Longest, s.Longest)
			last.Records += s.Records
			continue
		}
		out = append(out, s)
	}
	return out
}

// Window is a fault's time on the cluster: from its injection to the
// start of its undo (End zero: never undone within the run).
type Window struct {
	Kind  string    `json:"kind"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Attribute names, for each stall, the kinds of the windows active within
// slack of its start, and returns the longest stall by kind ("none" for
// stalls that began with no fault active). The slack counts a fault that
// struck just after a stall's first record was sent (its acknowledgement
// waited on it) and one undone just before.
func Attribute(stalls []Stall, windows []Window, slack time.Duration) map[string]time.Duration {
	longest := map[string]time.Duration{}
	for i := range stalls {
		s := &stalls[i]
		s.Faults = nil
		from, to := s.From.Add(-slack), s.From.Add(slack)
		for _, w := range windows {
			active := !w.Start.After(to) && (w.End.IsZero() || !w.End.Before(from))
			if active && !slices.Contains(s.Faults, w.Kind) {
				s.Faults = append(s.Faults, w.Kind)
			}
		}
		slices.Sort(s.Faults)
		kinds := s.Faults
		if len(kinds) == 0 {
			kinds = []string{"none"}
		}
		for _, k := range kinds {
			longest[k] = max(longest[k], s.To.Sub(s.From))
		}
	}
	return longest
}
