package kafkaload

import (
	"fmt"
	"maps"
	"slices"
)

// GroupEvent is one thing the group consumer saw, in the order it saw
// them: a record it polled, or (Commit set) an offset commit the
// coordinator acknowledged.
type GroupEvent struct {
	Record Record
	Commit *Commit
}

// Commit is an acknowledged commit of a partition's offset: the next
// record the group is to read there.
type Commit struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// GroupHistory is what the group consumer did: its events in order, and
// the group's committed offsets fetched from its coordinator at the end
// (a partition with none is absent).
type GroupHistory struct {
	Group  string
	Events []GroupEvent
	Final  map[int32]int64
}

// GroupResult is what CheckGroup found.
type GroupResult struct {
	Group string `json:"group"`
	// Consumed counts the acknowledged records the group consumed at their
	// offset, as acknowledged; Skipped those it never consumed.
	Consumed int `json:"consumed"`
	Skipped  int `json:"skipped"`
	// ConsumedTwice counts the polls of a record beyond its first (allowed
	// at or after the offset the group had committed: at-least-once).
	ConsumedTwice int `json:"consumed_twice"`
	// Commits counts the acknowledged commits.
	Commits int `json:"commits"`
	// CommitsLost counts the committed offsets lost: an acknowledged commit
	// below an earlier one of its partition, the group resuming below an
	// acknowledged commit, a committed offset fetched at the end below the
	// last acknowledged, and a committed offset beyond the partition's high
	// watermark (the end of what was acknowledged stored).
	CommitsLost int `json:"committed_offsets_lost"`
	// Committed is the committed offsets fetched at the end.
	Committed  map[int32]int64 `json:"committed,omitempty"`
	Violations []string        `json:"violations,omitempty"`
	More       int             `json:"more_violations,omitempty"`
	// Error says why the consumer could not catch up or fetch its
	// committed offsets (what it did not consume is then skipped).
	Error string `json:"error,omitempty"`
}

// OK says the group consumed every acknowledged record and lost no
// committed offset.
func (g *GroupResult) OK() bool { return g.Error == "" && g.Skipped == 0 && g.CommitsLost == 0 }

func (g *GroupResult) violation(format string, args ...any) {
	if len(g.Violations) == maxViolations {
		g.More++
		return
	}
	g.Violations = append(g.Violations, fmt.Sprintf(format, args...))
}

// CheckGroup compares the group consumer's history with the acknowledged
// records and the partitions' high watermarks (ends, from Consume). It is
// a pure function of its arguments, which it does not change.
func CheckGroup(acked []Record, h GroupHistory, ends map[int32]int64) GroupResult {
	g := GroupResult{Group: h.Group, Committed: h.Final}
	consumed := map[offKey]Record{}
	committed := map[int32]int64{} // the highest acknowledged commit of each partition
	polled := map[int32]int64{}    // the offset polled last in each partition
	beyond := func(what string, p int32, off int64) {
		if end, ok := ends[p]; ok && off > end {
			g.CommitsLost++
			g.violation("committed offset lost: %s of partition %d is %d, beyond its high watermark %d", what, p, off, end)
		}
	}
	for _, e := range h.Events {
		if c := e.Commit; c != nil {
			g.Commits++
			if prev, ok := committed[c.Partition]; ok && c.Offset < prev {
				g.CommitsLost++
				g.violation("committed offset lost: partition %d committed %d after %d", c.Partition, c.Offset, prev)
			}
			committed[c.Partition] = max(committed[c.Partition], c.Offset)
			beyond("a commit", c.Partition, c.Offset)
			continue
		}
		r := e.Record
		k := offKey{partKey{r.Topic, r.Partition}, r.Offset}
		if _, seen := consumed[k]; seen {
			g.ConsumedTwice++
		} else {
			consumed[k] = r
		}
		last, ok := polled[r.Partition]
		c, hasCommit := committed[r.Partition]
		if ok && r.Offset <= last && hasCommit && r.Offset < c {
			g.CommitsLost++
			g.violation("committed offset lost: partition %d resumed at offset %d, below its acknowledged commit %d", r.Partition, r.Offset, c)
		}
		polled[r.Partition] = r.Offset
	}
	for _, p := range slices.Sorted(maps.Keys(committed)) {
		c := committed[p]
		if f, ok := h.Final[p]; !ok || f < c {
			g.CommitsLost++
			g.violation("committed offset lost: partition %d's committed offset at the end is %d (absent: %v), below its last acknowledged commit %d", p, f, !ok, c)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(h.Final)) {
		beyond("the committed offset at the end", p, h.Final[p])
	}
	for _, a := range acked {
		got, ok := consumed[offKey{partKey{a.Topic, a.Partition}, a.Offset}]
		switch {
		case !ok:
			g.Skipped++
			g.violation("skipped: %s acknowledged, never consumed by group %s", a, h.Group)
		case !got.same(a):
			g.Skipped++
			g.violation("skipped: %s acknowledged, group %s consumed %s there", a, h.Group, got)
		default:
			g.Consumed++
		}
	}
	return g
}
