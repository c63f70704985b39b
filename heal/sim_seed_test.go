package heal

import (
	"flag"
	"testing"
)

var (
	simSeed  = flag.Uint64("sim.seed", 0, "run the simulation with this seed only")
	simSeeds = flag.Int("sim.seeds", 300, "number of simulation seeds")
)

func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		runSim(t, *simSeed)
		return
	}
	n := *simSeeds
	if testing.Short() {
		n = 30
	}
	total := map[string]int{}
	worst := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		st := runSim(t, seed)
		worst = max(worst, st["converged_after"])
		for k, v := range st {
			total[k] += v
		}
	}
	// Every kind of step must have happened somewhere, or the simulation
	// is not exercising what it claims to.
	for _, k := range []string{"healed", "resumed", "settled", "confirmed", "deleted", "stale", "aborted", "held", "failed:no_spare_broker", "failed:backfill_failed"} {
		if total[k] == 0 {
			t.Errorf("no %s in %d seeds: %v", k, n, total)
		}
	}
	t.Logf("%d seeds: %v; worst convergence %d ticks after faults stopped", n, total, worst)
}
