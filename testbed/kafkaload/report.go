package kafkaload

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Report is a load's history checked against what was read back: the
// clients section of a demo's report.
type Report struct {
	Producers int    `json:"producers"`
	Topic     string `json:"topic"`
	// Produced counts the records handed to the producers; ProduceFailures
	// those answered with an error (not acknowledged: allowed, while a
	// broker is down or at the end of the run), FirstFailure the first.
	Produced        int    `json:"produced"`
	ProduceFailures int    `json:"produce_failures"`
	FirstFailure    string `json:"first_failure,omitempty"`
	// LongestStallSeconds is History.LongestStall: the longest time
	// without an acknowledgement (a broker down, a partition resealed).
	LongestStallSeconds float64 `json:"longest_stall_seconds"`
	// LongestStallFrom is when it began.
	LongestStallFrom time.Time `json:"longest_stall_from"`
	// AckP50Ms, AckP99Ms and AckMaxMs are the acknowledged records'
	// latencies from Produce to acknowledgement, over the whole run
	// (faults included): figures, never judged.
	AckP50Ms float64 `json:"ack_p50_ms"`
	AckP99Ms float64 `json:"ack_p99_ms"`
	AckMaxMs float64 `json:"ack_max_ms"`
	// HighWatermarks are the partitions' ends the check read up to.
	HighWatermarks map[int32]int64 `json:"high_watermarks,omitempty"`
	Result
	// Group is the group consumer's check (Config.Group), nil without one.
	Group *GroupResult `json:"group,omitempty"`
	// Error says why the check could not read everything back (every
	// acknowledged record not read is then counted lost).
	Error string `json:"error,omitempty"`
}

// OK says the check ran and found no violation.
func (r *Report) OK() bool { return r.Error == "" && r.Result.OK() && (r.Group == nil || r.Group.OK()) }

// CommitsLost is the group's committed offsets lost, 0 without a group.
func (r *Report) CommitsLost() int {
	if r.Group == nil {
		return 0
	}
	return r.Group.CommitsLost
}

// Finish stops l (flushing its buffered records until ctx ends), reads
// every partition of its topic back with Consume, and checks one against
// the other; with a group consumer, has it consume up to the high
// watermarks Consume read to and checks it (CheckGroup). A consume cut
// short by ctx is reported in Error, and the records it read are still
// checked.
func (l *Load) Finish(ctx context.Context) *Report {
	h := l.Stop(ctx)
	read, ends, err := l.cfg.Consume(ctx)
	rep := &Report{Producers: l.cfg.Producers, Topic: l.cfg.Topic, Produced: h.Produced, ProduceFailures: h.Failed,
		FirstFailure: h.FirstFailure, LongestStallSeconds: h.LongestStall.Round(time.Millisecond).Seconds(),
		LongestStallFrom: h.LongestStallFrom,
		HighWatermarks:   ends, Result: Check(h.Acked, read)}
	rep.AckP50Ms, rep.AckP99Ms, rep.AckMaxMs = QuantileMs(h.AckLatencies, 0.50), QuantileMs(h.AckLatencies, 0.99), QuantileMs(h.AckLatencies, 1)
	if err != nil {
		rep.Error = err.Error()
	}
	if l.group != nil {
		gh, gerr := l.group.finish(ctx, ends)
		g := CheckGroup(h.Acked, gh, ends)
		if gerr != nil {
			g.Error = gerr.Error()
		}
		rep.Group = &g
	}
	l.cfg.Logger.Info().Int("acked", rep.Acknowledged).Int("read_back", rep.ReadBack).Int("lost", rep.Lost).
		Int("duplicated", rep.Duplicated).Int("out_of_order", rep.OutOfOrder).Int("committed_offsets_lost", rep.CommitsLost()).Msg("kafka load checked")
	return rep
}

// WriteText prints the report for a person: one line of figures, then
// the first failure, each violation and the error, indented.
func (r *Report) WriteText(w io.Writer) {
	verdict := "ok"
	if !r.OK() {
		verdict = "VIOLATION"
	}
	fmt.Fprintf(w, "clients            %s: %d producers on topic %s: %d acknowledged, %d read back, %d lost, %d duplicated, %d out of order, %d committed offsets lost; %d produce failures (not acknowledged, allowed)\n",
		verdict, r.Producers, r.Topic, r.Acknowledged, r.ReadBack, r.Lost, r.Duplicated, r.OutOfOrder, r.CommitsLost(), r.ProduceFailures)
	if g := r.Group; g != nil {
		fmt.Fprintf(w, "                   group %s (kgo.ConsumerGroup, committing): %d of the acknowledged consumed, %d skipped, %d consumed again (at-least-once), %d commits, committed at the end: %s\n",
			g.Group, g.Consumed, g.Skipped, g.ConsumedTwice, g.Commits, offsets(g.Committed))
	}
	fmt.Fprintf(w, "                   acknowledged in p50 %.1f ms, p99 %.1f ms, max %.1f ms; longest time without an acknowledgement %.3fs, from %s\n",
		r.AckP50Ms, r.AckP99Ms, r.AckMaxMs, r.LongestStallSeconds, r.LongestStallFrom.UTC().Format("15:04:05.000"))
	if r.FirstFailure != "" {
		fmt.Fprintf(w, "                   first produce failure: %s\n", r.FirstFailure)
	}
	writeViolations(w, "", r.Violations, r.More, r.Error)
	if g := r.Group; g != nil {
		writeViolations(w, "group ", g.Violations, g.More, g.Error)
	}
}

// writeViolations prints violations (what names whose), how many more
// there were, and why a check was incomplete, indented.
func writeViolations(w io.Writer, what string, vs []string, more int, incomplete string) {
	for _, v := range vs {
		fmt.Fprintf(w, "                   VIOLATION %s%s\n", what, v)
	}
	if more > 0 {
		fmt.Fprintf(w, "                   and %d more %sviolations\n", more, what)
	}
	if incomplete != "" {
		fmt.Fprintf(w, "                   %scheck incomplete: %s\n", what, incomplete)
	}
}

// offsets prints partition offsets as "p0 12, p1 40", "none" for none.
func offsets(m map[int32]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for _, p := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("p%d %d", p, m[p]))
	}
	return strings.Join(out, ", ")
}

// QuantileMs is the q quantile (nearest rank) of ds in milliseconds, 0
// for none.
func QuantileMs(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return float64(s[max(i, 0)].Microseconds()) / 1000
}

// appendViolations appends one check's lines, under "clients:" and the
// check's name (none for the producers' own): its error, its violations
// and how many more were left out.
func appendViolations(out []string, check, errText string, vs []string, more int) []string {
	p, tail := "clients: ", "clients: "
	if check != "" {
		p, tail = p+check+" ", p+check+": "
	}
	if errText != "" {
		out = append(out, p+"check incomplete: "+errText)
	}
	for _, v := range vs {
		out = append(out, p+v)
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("%sand %d more", tail, more))
	}
	return out
}

// AllViolations lists the report's violations as one string each, the
// check's error first (nothing when OK).
func (r *Report) AllViolations() []string {
	out := appendViolations(nil, "", r.Error, r.Violations, r.More)
	if g := r.Group; g != nil {
		out = appendViolations(out, "group", g.Error, g.Violations, g.More)
	}
	return out
}

// Manual is what a person needs to produce to a cluster by hand.
type Manual struct {
	Seeds         []string
	CA, Cert, Key string // "" with a plaintext cluster
	Topic         string
}

// Kcat is a kcat command line that produces a line of standard input per
// record to m's topic, over mutual TLS with m's certificate when it has
// one.
func (m Manual) Kcat() string {
	args := []string{"kcat", "-b", strings.Join(m.Seeds, ",")}
	if m.Cert != "" {
		args = append(args, "-X", "security.protocol=ssl", "-X", "ssl.ca.location="+quote(m.CA),
			"-X", "ssl.certificate.location="+quote(m.Cert), "-X", "ssl.key.location="+quote(m.Key))
	}
	return strings.Join(append(args, "-t", m.Topic, "-P"), " ")
}

// quote shell-quotes s when it holds anything a shell would split or
// expand.
func quote(s string) string {
	if strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
