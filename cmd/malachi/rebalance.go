package main

import (
	"fmt"
	"io"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/bytesize"
)

// writeRebalance prints the rebalancer's line from the leader's last pass
// (heal.Report.Rebalance): nothing when rebalancing is off or the pass
// reported none.
func writeRebalance(w io.Writer, st *clusterStatus) {
	ps, ok := admin.DecodeStatus(st.Heal)
	if !ok || ps.LastPass == nil || ps.LastPass.Rebalance == nil {
		return
	}
	fmt.Fprintln(w, rebalanceLine(ps.LastPass.Rebalance))
}

// rebalanceLine is one line: balanced or the brokers outside 10% of the
// mean, the moves planned or why none, and the spreads by count and bytes.
func rebalanceLine(r *heal.Rebalance) string {
	s := "rebalance: "
	switch {
	case r.Balanced:
		s += fmt.Sprintf("balanced: all %d brokers within 10%% of the mean", r.Brokers)
	case r.Skipped != "":
		s += fmt.Sprintf("%d of %d brokers outside 10%% of the mean, waiting (%s)", r.Outside, r.Brokers, r.Skipped)
	default:
		s += fmt.Sprintf("%d of %d brokers outside 10%% of the mean, %d moves this pass", r.Outside, r.Brokers, r.Moves)
	}
	return s + fmt.Sprintf("; replicas min/mean/max %d/%.1f/%d, bytes %s/%s/%s", r.Count.Min, r.Count.Mean, r.Count.Max,
		bytesize.Format(r.Bytes.Min), bytesize.Format(int64(r.Bytes.Mean)), bytesize.Format(r.Bytes.Max))
}
