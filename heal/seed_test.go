package heal

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// seedRow is one rule of testdata/SEED.txt (a copy of ../shared/SEED.txt):
// Sentence names it by paragraph and sentence number and quotes its start;
// build makes the pass's input; want is the expected plan, one action a line
// (see ops); check, when set, asserts more.
type seedRow struct {
	sentence string // "P6.5"
	quote    string // the start of the sentence, checked against the file
	name     string
	build    func() *world
	want     string
	check    func(t *testing.T, p Plan)
}

var seedRows = []seedRow{
	{"P1.1", "Closes the self-healing loop for sealed segments", "a sealed segment with a dead replica is healed, an active one is not",
		func() *world {
			a := seg("a", 1, 2, 3)
			b := seg("b", 1, 2, 3)
			b.Sealed = false
			return newWorld(4, 3, a, b).dead(1)
		}, "replace_dead_replica a 4<-2\nset_replicas a [1 2 3]->[2 3 4]\n", nil},
	{"P2.1", "Given the current Malachi.Metadata, the set of live brokers", "an under-replicated segment gets the healed set from Place and a backfill per new replica from a surviving replica",
		func() *world {
			// Broker 4 already holds more replicas than 5: 5 is least loaded.
			return newWorld(5, 3, seg("a", 1, 2, 3), seg("b", 2, 3, 4), seg("c", 1, 3, 4)).dead(1)
		}, "replace_dead_replica a 5<-2\nset_replicas a [1 2 3]->[2 3 5]\nreplace_dead_replica c 5<-3\nset_replicas c [1 3 4]->[3 4 5]\n",
		func(t *testing.T, p Plan) {
			// Both have two healthy copies: snapshot order. 5 holds nothing
			// and takes a; for c, 2 (two replicas) and 5 (now one) are
			// spare: 5 again. The sources spread: 2, then 3.
			if p.Report.UnderReplicated != 2 || p.Report.Backfills != 2 || p.Report.Commands != 2 {
				t.Errorf("report %s", p.Report)
			}
		}},
	{"P2.1", "Given the current Malachi.Metadata, the set of live brokers", "survivors keep their order; the new replica goes behind them",
		func() *world { return newWorld(4, 3, seg("a", 3, 1, 2)).dead(1) },
		"replace_dead_replica a 4<-3\nset_replicas a [3 1 2]->[3 2 4]\n", nil},
	{"P2.2", "It returns the :set_segment_replicas commands whose backfill succeeded", "the command comes after the segment's backfills, which gate it (execution: TestCoordinatorBackfillGatesCommand)",
		func() *world { return newWorld(9, 3, seg("a", 1, 2, 3)).dead(1).dead(2) },
		"replace_dead_replica a 4<-3\nreplace_dead_replica a 5<-3\nset_replicas a [1 2 3]->[3 4 5]\n", nil},
	{"P2.2", "It returns the :set_segment_replicas commands whose backfill succeeded", "segments it could not heal are returned too",
		func() *world { return newWorld(3, 3, seg("a", 1, 2, 3)).dead(1).dead(2).dead(3) },
		"report_failed a all_replicas_dead\n", func(t *testing.T, p Plan) {
			if len(p.Report.Failed) != 1 || p.Report.Failed[0].Reason != AllReplicasDead {
				t.Errorf("failed %+v", p.Report.Failed)
			}
		}},
	{"P3.1", "Only sealed segments are handled here", "an active segment with a dead replica is left alone",
		func() *world {
			a := seg("a", 1, 2, 3)
			a.Sealed = false
			return newWorld(4, 3, a).dead(1)
		}, "", func(t *testing.T, p Plan) {
			if p.Report.Active != 1 || p.Report.Sealed != 0 || p.Report.UnderReplicated != 0 {
				t.Errorf("report %s", p.Report)
			}
		}},
	{"P3.2", "The active segment grows as it is written", "a follower behind on an active segment is not backfilled",
		func() *world {
			a := seg("a", 1, 2, 3)
			a.Sealed = false
			return newWorld(3, 3, a).anomaly(2, "a", Short, 10, false)
		}, "", nil},
	{"P4.2", "The live-broker set is supplied by the caller", "every replica dead: reported failed, nothing dropped",
		func() *world { return newWorld(5, 3, seg("a", 1, 2, 3)).dead(1).dead(2).dead(3) },
		"report_failed a all_replicas_dead\n", nil},
	{"P4.2", "The live-broker set is supplied by the caller", "liveness is the caller's: a broker missing for less than the grace delay is not replaced",
		func() *world { return newWorld(4, 3, seg("a", 1, 2, 3)).down(1, 5*time.Second) },
		"", func(t *testing.T, p Plan) {
			if p.Report.Deferred != 0 || len(p.Report.Suspect) != 1 || p.Report.Suspect[0] != 1 {
				t.Errorf("report %+v", p.Report)
			}
		}},
	{"P4.2", "The live-broker set is supplied by the caller", "past the grace delay it is dead and replaced",
		func() *world { return newWorld(4, 3, seg("a", 1, 2, 3)).down(1, 11*time.Second) },
		"replace_dead_replica a 4<-2\nset_replicas a [1 2 3]->[2 3 4]\n", nil},
	{"P5.1", "Besides the metadata-level pass, heal_sealed/4 also runs a physical integrity pass", "a live broker that lost its copy (missing file) is below the factor and backfilled from zero",
		func() *world { return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Missing, 0, false) },
		"resume_short_copy a 1<-2 from=0\n", func(t *testing.T, p Plan) {
			if p.Report.UnderReplicated != 1 || p.Report.Commands != 0 {
				t.Errorf("report %s", p.Report)
			}
		}},
	{"P5.2", "The pass probes each live replica's stored bytes", "a short copy is re-backfilled in place from an intact replica, resuming at its truncation point",
		func() *world {
			return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Short, 400, false).anomaly(2, "a", Overrun, 1040, false)
		}, "resume_short_copy a 1<-3 from=400\n", nil},
	{"P5.3", "In-place corruption that keeps the byte size is out of this probe's reach", "a copy of the right size is intact to the pass",
		func() *world { return newWorld(3, 3, seg("a", 1, 2, 3)) }, "", nil},
	{"P5.3", "In-place corruption that keeps the byte size is out of this probe's reach", "what the Scrubber finds (Kind Corrupt) is a lost copy, replaced from an intact one (more: TestCorruptCopy)",
		func() *world { return newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(3, "a", Corrupt, 0, false) },
		"replace_corrupt_copy a 4<-1\nset_replicas a [1 2 3]->[1 2 4]\ndelete_dropped_copy a 3\n", nil},
	{"P6.1", "The same probe answers the opposite question at no extra cost", "one report carries a short copy and an overrun copy; both are acted on",
		func() *world {
			return newWorld(3, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3)).anomaly(1, "a", Short, 1, false).anomaly(1, "b", Overrun, 1040, false)
		}, "resume_short_copy a 1<-2 from=1\nsettle_overrun b 1\nconfirm_copy b 1\n", nil},
	{"P6.2", "A copy whose bytes RUN PAST the sealed byte_size is reported as :unsettled", "an overrun copy is listed unsettled and settled",
		func() *world { return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(2, "a", Overrun, 5000, false) },
		"settle_overrun a 2\nconfirm_copy a 2\n", func(t *testing.T, p Plan) {
			if len(p.Report.Unsettled) != 1 || p.Report.Unsettled[0] != (CopyRef{"a", 2}) {
				t.Errorf("unsettled %v", p.Report.Unsettled)
			}
		}},
	{"P6.3", "Until that has happened a copy can be past the recorded length", "a preallocated tail and an excluded record are treated alike",
		func() *world {
			return newWorld(3, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3)).anomaly(2, "a", Overrun, 1<<20, false).anomaly(2, "b", Overrun, 1017, false)
		}, "settle_overrun a 2\nconfirm_copy a 2\nsettle_overrun b 2\nconfirm_copy b 2\n", nil},
	{"P6.4", "It does not have to: both end at the same place", "a settled, byte-exact copy is not reported and not selected",
		func() *world { return newWorld(3, 3, seg("a", 1, 2, 3)) }, "", func(t *testing.T, p Plan) {
			if len(p.Report.Unsettled) != 0 {
				t.Errorf("unsettled %v", p.Report.Unsettled)
			}
		}},
	{"P6.5", "The exception is a copy that still measures above", "fully live, not under-replicated, not latched, latch state readable, probe answered: selected and confirmed",
		func() *world { return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(3, "a", Overrun, 1040, false) },
		"settle_overrun a 3\nconfirm_copy a 3\n", nil},
	{"P6.5", "The exception is a copy that still measures above", "segment not fully live (a replica within its grace delay): not listed, not selected",
		func() *world {
			return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(3, "a", Overrun, 1040, false).down(1, time.Second)
		}, "", notUnsettled},
	{"P6.5", "The exception is a copy that still measures above", "segment under-replicated (a dead replica): not listed, not selected",
		func() *world {
			return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(3, "a", Overrun, 1040, false).dead(1)
		}, "set_replicas a [1 2 3]->[2 3 1]\nreport_failed a no_spare_broker [1]\n", notUnsettled},
	{"P6.5", "The exception is a copy that still measures above", "segment under-replicated (a short copy): not listed, not selected",
		func() *world {
			return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(3, "a", Overrun, 1040, false).anomaly(1, "a", Short, 3, false)
		}, "resume_short_copy a 1<-2 from=3\n", notUnsettled},
	{"P6.5", "The exception is a copy that still measures above", "the copy latched: not unsettled, it is a lost replica",
		func() *world {
			return newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(3, "a", Latched, 0, false)
		}, "replace_latched_copy a 4<-1\nset_replicas a [1 2 3]->[1 2 4]\ndelete_dropped_copy a 3\n", func(t *testing.T, p Plan) {
			if len(p.Report.Unsettled) != 0 {
				t.Errorf("unsettled %v", p.Report.Unsettled)
			}
		}},
	{"P6.5", "The exception is a copy that still measures above", "the segment's latch state unreadable this tick (another replica's broker did not answer): not listed, not selected",
		func() *world {
			return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(3, "a", Overrun, 1040, false).down(1, time.Second)
		}, "", notUnsettled},
	{"P6.5", "The exception is a copy that still measures above", "another replica's probe timed out (not the copy's own): listed and selected",
		func() *world {
			return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(3, "a", Overrun, 1040, false).anomaly(1, "a", TimedOut, 0, false)
		}, "settle_overrun a 3\nconfirm_copy a 3\n", func(t *testing.T, p Plan) {
			if len(p.Report.Unsettled) != 1 || len(p.Report.Settling) != 1 {
				t.Errorf("unsettled %v settling %v, want a@3 in both", p.Report.Unsettled, p.Report.Settling)
			}
		}},
	{"P6.5", "The exception is a copy that still measures above", "its own probe timed out this tick: not listed, not selected",
		func() *world {
			return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(3, "a", TimedOut, 0, false)
		}, "", func(t *testing.T, p Plan) {
			if len(p.Report.Unsettled) != 0 {
				t.Errorf("unsettled %v", p.Report.Unsettled)
			}
		}},
	{"P6.6", "A sealed size is immutable, so the copy is confirmed once", "a confirmed overrun copy is never selected again",
		func() *world { return newWorld(3, 3, seg("a", 1, 2, 3)).anomaly(3, "a", Overrun, 1040, true) },
		"", func(t *testing.T, p Plan) {
			if len(p.Report.Unsettled) != 0 {
				t.Errorf("unsettled %v", p.Report.Unsettled)
			}
		}},
	{"P6.7", "Nothing is repaired from this list", "overrun copies get no backfill, even when they are all the copies",
		func() *world {
			return newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Overrun, 1040, false).anomaly(2, "a", Overrun, 1040, false).anomaly(3, "a", Overrun, 1040, false)
		}, "settle_overrun a 1\nconfirm_copy a 1\nsettle_overrun a 2\nconfirm_copy a 2\nsettle_overrun a 3\nconfirm_copy a 3\n", nil},
	{"P6.8", "Settling such a copy costs a directory fsync per pass", "bounded by the settle batch (round-robin: TestSeedSettleRoundRobin)",
		func() *world {
			w := newWorld(3, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3), seg("c", 1, 2, 3)).anomaly(1, "a", Overrun, 1040, false).anomaly(1, "b", Overrun, 1040, false).anomaly(1, "c", Overrun, 1040, false)
			w.in.Policy.SettleBatch = 2
			return w
		}, "settle_overrun a 1\nconfirm_copy a 1\nsettle_overrun b 1\nconfirm_copy b 1\n", nil},
	{"P8.1", "A sealed copy its replication server has latched as failed", "a latched copy is a lost replica, healed as if its broker had left",
		func() *world { return newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Latched, 0, false) },
		"replace_latched_copy a 4<-2\nset_replicas a [1 2 3]->[2 3 4]\ndelete_dropped_copy a 1\n", nil},
	{"P8.1", "A sealed copy its replication server has latched as failed", "a latched copy is never the source",
		func() *world {
			return newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Latched, 0, false).anomaly(2, "a", Short, 5, false)
		}, "resume_short_copy a 2<-3 from=5\nreplace_latched_copy a 4<-3\nset_replicas a [1 2 3]->[2 3 4]\ndelete_dropped_copy a 1\n", nil},
	{"P8.1", "A sealed copy its replication server has latched as failed", "a broker with a latched copy of the segment is never its target, though it may take others",
		func() *world {
			// 4's copy of b is latched, 1 is dead: 4 may take a (it holds
			// no copy of a) but not b, whose copy goes to 5.
			w := newWorld(5, 3, seg("a", 1, 2, 3), seg("b", 2, 3, 4), seg("c", 2, 3, 5))
			return w.anomaly(4, "b", Latched, 0, false).dead(1)
		}, "replace_dead_replica a 4<-2\nset_replicas a [1 2 3]->[2 3 4]\nreplace_latched_copy b 5<-3\nset_replicas b [2 3 4]->[2 3 5]\ndelete_dropped_copy b 4\n", nil},
	{"P8.2", "The healed set leaves the copy out, and the caller deletes it", "the delete follows the command that leaves the copy out (execution: TestCoordinatorDeleteAfterRecorded)",
		func() *world { return newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(2, "a", Latched, 0, false) },
		"replace_latched_copy a 4<-1\nset_replicas a [1 2 3]->[1 3 4]\ndelete_dropped_copy a 2\n", nil},
	{"P9.1", "A failed copy is REPLACED, never merely dropped", "no spare broker: the latched copy is not dropped",
		func() *world { return newWorld(3, 3, seg("a", 2, 1, 3)).anomaly(1, "a", Latched, 0, false) },
		"set_replicas a [2 1 3]->[2 3 1]\nreport_failed a no_spare_broker [1]\n", nil},
	{"P9.2", "With no spare broker to take its place it stays in the set", "already behind the healthy replicas: no command, still reported no_spare_broker",
		func() *world { return newWorld(3, 3, seg("a", 2, 3, 1)).anomaly(1, "a", Latched, 0, false) },
		"report_failed a no_spare_broker [1]\n", nil},
	{"P9.2", "With no spare broker to take its place it stays in the set", "one spare for two latched copies: one replaced, one kept behind and reported",
		func() *world {
			return newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(1, "a", Latched, 0, false).anomaly(2, "a", Latched, 0, false)
		}, "replace_latched_copy a 4<-3\nset_replicas a [1 2 3]->[3 4 2]\ndelete_dropped_copy a 1\nreport_failed a no_spare_broker [2]\n", nil},
	{"P9.3", "Dropping it would give up the one chance it has left", "after a restart the copy is no longer latched and simply serves",
		func() *world { return newWorld(3, 3, seg("a", 2, 3, 1)) }, "", nil},
}

// notUnsettled checks that no copy is listed unsettled or selected: the
// seed lists an overrun copy only on passes whose conditions hold.
func notUnsettled(t *testing.T, p Plan) {
	t.Helper()
	if len(p.Report.Unsettled) != 0 || len(p.Report.Settling) != 0 {
		t.Errorf("unsettled %v settling %v, want none", p.Report.Unsettled, p.Report.Settling)
	}
}

// notHeal lists the sentences of the seed that state no rule for heal, and
// why.
var notHeal = map[string]string{
	"P4.1": "names the brokers' RPC server: the plugin implements the interfaces",
	"P6.9": "the cost of a first settle on an unsealed log: the Settler's contract (see Settler.Settle)",
	"P7.1": "a heading",
}

func TestSeed(t *testing.T) {
	for _, row := range seedRows {
		t.Run(row.sentence+"/"+row.name, func(t *testing.T) {
			p := row.build().plan()
			if got := ops(p); got != row.want {
				t.Errorf("%s %q...\nplan:\n%swant:\n%s", row.sentence, row.quote, got, row.want)
			}
			if row.check != nil {
				row.check(t, p)
			}
		})
	}
}

// seedSentences splits the seed into paragraphs and sentences, numbered
// "P<paragraph>.<sentence>".
func seedSentences(t *testing.T) map[string]string {
	b, err := os.ReadFile("testdata/SEED.txt")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	pn := 0
	for _, para := range strings.Split(string(b), "\n\n") {
		para = strings.TrimSpace(para)
		if para == "" {
			continue
		}
		pn++
		sn := 0
		start := 0
		for i := 0; i < len(para); i++ {
			end := i == len(para)-1
			if !end && (para[i] == '.' || para[i] == '!' || para[i] == '?') && para[i+1] == ' ' && i+2 < len(para) && para[i+2] >= 'A' && para[i+2] <= 'Z' {
				end = true
			}
			if end {
				sn++
				out["P"+strconv.Itoa(pn)+"."+strconv.Itoa(sn)] = strings.TrimSpace(para[start : i+1])
				start = i + 1
			}
		}
	}
	return out
}

// TestSeedCoverage: every sentence of the seed has a row (whose quote is
// the sentence's start) or a reason it states no rule for heal.
func TestSeedCoverage(t *testing.T) {
	sents := seedSentences(t)
	if len(sents) < 20 {
		t.Fatalf("parsed %d sentences from the seed, want more", len(sents))
	}
	covered := map[string]bool{}
	for _, row := range seedRows {
		s, ok := sents[row.sentence]
		if !ok {
			t.Errorf("row %q names %s, which the seed does not have", row.name, row.sentence)
			continue
		}
		if !strings.HasPrefix(s, row.quote) {
			t.Errorf("row %q: %s starts %.60q, not %q", row.name, row.sentence, s, row.quote)
		}
		covered[row.sentence] = true
	}
	for id, s := range sents {
		if !covered[id] && notHeal[id] == "" {
			t.Errorf("seed sentence %s has no test row: %.80q", id, s)
		}
	}
}
