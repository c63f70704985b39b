package healrun

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// FrontierFactor is how far above its idle p99 the clients' p99 may be
// while a heal runs at a rate on the frontier: R*, a round's frontier
// rate, is the highest heal rate of a fixed mode whose clients' p99 stayed
// within FrontierFactor times idle.
const FrontierFactor = 1.5

// DisturbedFactor: a result whose idle p99 is more than this times its
// round's median idle p99 had its idle window disturbed (on a shared
// machine, another process's burst): its ratio to idle says nothing about
// the heal, so it draws no frontier.
const DisturbedFactor = 2.0

// autoRate is Mode.Rate for the adaptive rate.
const autoRate = `"auto"`

// Modes are the default frontier: fixed per-broker rates spread from the
// low setting (8 MiB/s) to no cap, and auto.
var Modes = []Mode{
	{Name: "8MiB/s", Rate: "8388608"},
	{Name: "32MiB/s", Rate: "33554432"},
	{Name: "64MiB/s", Rate: "67108864"},
	{Name: "128MiB/s", Rate: "134217728"},
	{Name: "256MiB/s", Rate: "268435456"},
	{Name: "unthrottled", Rate: "0"},
	{Name: "auto", Rate: autoRate},
}

// Fixed reports whether m pins the rate (a number, 0 for no cap): only
// fixed modes draw the frontier.
func (m Mode) Fixed() bool { return m.Rate != autoRate }

// Capped reports whether m pins the rate to a number of bytes per second
// (fixed, and not unthrottled).
func (m Mode) Capped() bool { return m.Fixed() && m.Rate != "0" }

// ParseModes reads a comma-separated list of RATE[/foreground][+key=value…]:
// a per-broker rate in bytes per second (0 for no cap) or auto;
// /foreground sets backfill_background = false; +key=value sets another
// [heal] key. Each mode is named by its text. Empty: Modes.
func ParseModes(rates string) ([]Mode, error) {
	if strings.TrimSpace(rates) == "" {
		return Modes, nil
	}
	var modes []Mode
	for _, r := range strings.Split(rates, ",") {
		r = strings.TrimSpace(r)
		m := Mode{Name: r}
		r, keys, _ := strings.Cut(r, "+")
		for kv := range strings.SplitSeq(keys, "+") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m.Extra += k + " = " + v + "\n"
			}
		}
		if rate, fg := strings.CutSuffix(r, "/foreground"); fg {
			r, m.Extra = rate, m.Extra+"backfill_background = false\n"
		}
		if r == "auto" {
			m.Rate = autoRate
		} else if n, err := strconv.ParseInt(r, 10, 64); err == nil && n >= 0 {
			m.Rate = r
		} else {
			return nil, fmt.Errorf("healrun: rate %q: want bytes per second (0: no cap) or auto, optionally with /foreground and +key=value", r)
		}
		modes = append(modes, m)
	}
	return modes, nil
}

// RoundOrder is the order of modes in round (from 1): rotated by a mode
// each round, so that no mode always runs first or last.
func RoundOrder(modes []Mode, round int) []Mode {
	k := (round - 1) % max(1, len(modes))
	return append(append([]Mode(nil), modes[k:]...), modes[:k]...)
}

// Frontier is one round's R*.
type Frontier struct {
	Round int     `json:"round"`
	Load1 float64 `json:"load1"` // of the mode that set it
	// RateBytesPerSecond is R*: the highest heal rate among the round's
	// fixed modes whose clients' p99 while healing stayed within
	// FrontierFactor times idle; 0 when none did (Mode is then empty).
	RateBytesPerSecond float64 `json:"frontier_rate_bytes_per_second"`
	Mode               string  `json:"mode,omitempty"`
	P99OverIdle        float64 `json:"client_p99_healing_over_idle,omitempty"`
	OverLimit          float64 `json:"heal_over_limit,omitempty"`
}

// String says the round's R* and where it came from.
func (f Frontier) String() string {
	if f.Mode == "" {
		return fmt.Sprintf("round %d: no fixed rate kept the clients' p99 within %.1fx idle: no R*", f.Round, FrontierFactor)
	}
	return fmt.Sprintf("round %d: R* %.1f MB/s (%s at %.2fx idle p99, %.3fx its limit, load1 %.2f)",
		f.Round, f.RateBytesPerSecond/1e6, f.Mode, f.P99OverIdle, f.OverLimit, f.Load1)
}

// SetFrontier marks the results whose idle window was disturbed
// (IdleDisturbed: idle p99 above DisturbedFactor times their round's
// median), computes each round's R* from the others (fixed says which
// modes are fixed rates), and sets every result's
// FrontierRateBytesPerSecond and HealOverFrontier (0 in a round with no
// R*). It returns the rounds' frontiers in the order of their rounds'
// first results.
func SetFrontier(results []Result, fixed func(mode string) bool) []Frontier {
	markDisturbed(results)
	var fs []Frontier
	at := map[int]int{}
	for _, r := range results {
		i, ok := at[r.Round]
		if !ok {
			i = len(fs)
			at[r.Round] = i
			fs = append(fs, Frontier{Round: r.Round})
		}
		f := &fs[i]
		if fixed(r.Mode) && !r.IdleDisturbed && r.ClientP99HealingOverIdle <= FrontierFactor && r.HealBytesPerSecond > f.RateBytesPerSecond {
			*f = Frontier{Round: r.Round, Load1: r.Load1, RateBytesPerSecond: r.HealBytesPerSecond, Mode: r.Mode,
				P99OverIdle: r.ClientP99HealingOverIdle, OverLimit: r.HealOverLimit}
		}
	}
	for i := range results {
		r := &results[i]
		r.FrontierRateBytesPerSecond = fs[at[r.Round]].RateBytesPerSecond
		r.HealOverFrontier = 0
		if r.FrontierRateBytesPerSecond > 0 {
			r.HealOverFrontier = r.HealBytesPerSecond / r.FrontierRateBytesPerSecond
		}
	}
	return fs
}

// markDisturbed sets each result's IdleDisturbed from its round's median
// idle p99.
func markDisturbed(results []Result) {
	idle := map[int][]float64{}
	for _, r := range results {
		idle[r.Round] = append(idle[r.Round], r.ClientP99IdleMs)
	}
	med := map[int]float64{}
	for round, v := range idle {
		med[round] = median(v)
	}
	for i := range results {
		results[i].IdleDisturbed = results[i].ClientP99IdleMs > DisturbedFactor*med[results[i].Round]
	}
}

// FixedIn is the fixed predicate of SetFrontier for modes: a mode named
// there is fixed as Mode.Fixed says; any other is not.
func FixedIn(modes []Mode) func(string) bool {
	return func(name string) bool {
		for _, m := range modes {
			if m.Name == name {
				return m.Fixed()
			}
		}
		return false
	}
}

// Summary is a frontier run: every round's results, each round's R*, the
// medians per mode and of R*, and whether auto met the goal.
type Summary struct {
	Rounds   []Result   `json:"rounds"`
	Frontier []Frontier `json:"frontier"`
	// FrontierRateBytesPerSecond is the median of the rounds' R*.
	FrontierRateBytesPerSecond float64  `json:"frontier_rate_bytes_per_second"`
	Medians                    []Median `json:"medians"`
	AutoGoal                   string   `json:"auto_goal"`
	AutoGoalMet                bool     `json:"auto_goal_met"`
}

// GoalRounds is how many rounds the goal is judged on at least.
const GoalRounds = 3

// Summarize sets the frontier of results (modes says which are fixed) and
// computes the medians and auto's verdict: over at least GoalRounds
// rounds, the median of auto's clients' p99 at most FrontierFactor times
// idle, the median of auto's heal over its round's R* at least 0.8, no
// record lost.
func Summarize(results []Result, modes []Mode) Summary {
	s := Summary{Rounds: results}
	s.Frontier = SetFrontier(results, FixedIn(modes))
	v := make([]float64, len(s.Frontier))
	for i, f := range s.Frontier {
		v[i] = f.RateBytesPerSecond
	}
	s.FrontierRateBytesPerSecond = median(v)
	s.Medians = Medians(results)
	s.AutoGoal, s.AutoGoalMet = autoGoal(s.Medians, len(s.Frontier))
	return s
}

// autoGoal is auto's verdict from the medians over rounds rounds.
func autoGoal(ms []Median, rounds int) (string, bool) {
	for _, m := range ms {
		if m.Mode != "auto" {
			continue
		}
		met := m.ClientP99HealingOverIdle <= FrontierFactor && m.HealOverFrontier >= 0.8 && m.RecordsLost == 0
		verdict := "goal NOT met"
		switch {
		case rounds < GoalRounds:
			verdict, met = fmt.Sprintf("goal not judged (%d rounds, want at least %d)", rounds, GoalRounds), false
		case met:
			verdict = "goal met"
		}
		return fmt.Sprintf("%s: medians of %d rounds: client p99 while healing %.2fx idle (goal <= %.1fx), heal %.2fx R* (goal >= 0.8x), %.2fx its limit, %d records lost",
			verdict, m.Rounds, m.ClientP99HealingOverIdle, FrontierFactor, m.HealOverFrontier, m.HealOverLimit, m.RecordsLost), met
	}
	return "auto did not run", false
}

// Write writes s as text: the table of rounds, each round's R* with its
// load, the medians, auto's verdict.
func (s Summary) Write(w io.Writer) {
	WriteTable(w, s.Rounds)
	for _, f := range s.Frontier {
		fmt.Fprintln(w, f)
	}
	for _, r := range s.Rounds {
		if r.IdleDisturbed {
			fmt.Fprintf(w, "round %d: %s's idle p99 (%.1f ms) is above %.0fx the round's median: its idle window was disturbed, it draws no frontier\n",
				r.Round, r.Mode, r.ClientP99IdleMs, DisturbedFactor)
		}
	}
	fmt.Fprintf(w, "medians over rounds (R* %.1f MB/s):\n", s.FrontierRateBytesPerSecond/1e6)
	for _, m := range s.Medians {
		window := ""
		if m.HealWindowSeconds > 0 {
			window = fmt.Sprintf(" (at the rate of its first %.0f s)", m.HealWindowSeconds)
		}
		fmt.Fprintf(w, "  %-12s %d rounds: heal %.1f MB/s, %.2fx its limit, %.2fx R*; a broker's worth (%.0f MB) healed in %.1f s%s, its steady rate reached %.0f%% of the way; client p99 %.1f ms idle, %.1f ms healing (%.2fx); %d lost\n",
			m.Mode, m.Rounds, m.HealBytesPerSecond/1e6, m.HealOverLimit, m.HealOverFrontier, m.HealBytes/1e6, m.HealSeconds, window, m.RampOverHeal*100,
			m.ClientP99IdleMs, m.ClientP99HealingMs, m.ClientP99HealingOverIdle, m.RecordsLost)
	}
	fmt.Fprintf(w, "auto: %s\n", s.AutoGoal)
}
