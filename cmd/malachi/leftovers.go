package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/meta"
)

// replicaCopies counts the copies of cs that snap assigns to broker b:
// its replicas. A copy held outside its segment's set (a leftover) is not
// one; status lists those apart, per broker and cause (writeLeftovers).
func replicaCopies(snap *meta.Snapshot, b meta.BrokerID, cs []admin.Copy) int {
	held := make(map[meta.SegmentID]bool, len(cs))
	for i := range snap.Segments {
		if s := &snap.Segments[i]; slices.Contains(s.Replicas, b) {
			held[s.ID] = true
		}
	}
	n := 0
	for _, c := range cs {
		if held[c.ID] {
			n++
		}
	}
	return n
}

// writeLeftovers prints the last pass's leftover copies: one line per
// broker and cause with the copies, bytes, the first segments and, for
// failed deletes, the error; then the deletions of the pass and those
// that failed.
func writeLeftovers(w io.Writer, r *heal.Report) {
	if len(r.Leftovers) == 0 && len(r.LeftoversDeleted) == 0 && len(r.LeftoverErrors) == 0 {
		return
	}
	fmt.Fprintf(w, "leftover copies (held outside their replica set, not counted as replicas): %d, %s\n",
		r.LeftoverCopies, bytesize.Format(r.LeftoverBytes))
	for _, g := range r.Leftovers {
		fmt.Fprintf(w, "  broker %d %s: %d copies, %s (%s)", g.Broker, g.Cause, g.Copies, bytesize.Format(g.Bytes), joinIDs(g.Segments, 5))
		if g.Copies > len(g.Segments) && len(g.Segments) > 0 {
			fmt.Fprintf(w, " and %d more", g.Copies-len(g.Segments))
		}
		if g.Err != "" {
			fmt.Fprintf(w, ": %s", g.Err)
		}
		fmt.Fprintln(w)
	}
	if n := len(r.LeftoversDeleted); n > 0 {
		fmt.Fprintf(w, "  collected this pass: %d\n", n)
	}
	for _, f := range r.LeftoverErrors {
		fmt.Fprintf(w, "  delete failed %s: %s\n", f.Segment, f.Err)
	}
}
