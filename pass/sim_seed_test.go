package pass

import (
	"flag"
	"fmt"
	"sync"
	"testing"
)

var (
	simSeed  = flag.Uint64("sim.seed", 0, "run the simulation with this seed only")
	simSeeds = flag.Int("sim.seeds", 0, "number of simulation seeds (default 300, 200 under -race)")
)

func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		runSim(t, *simSeed)
		return
	}
	n := *simSeeds
	if n == 0 {
		n = 300
		if raceEnabled {
			n = 200
		}
	}
	if testing.Short() {
		n = 30
	}
	total := map[string]int{}
	worst := 0
	var mu sync.Mutex
	const chunk = 50
	t.Run("seeds", func(t *testing.T) {
		for lo := 1; lo <= n; lo += chunk {
			t.Run(fmt.Sprintf("%d-%d", lo, min(lo+chunk-1, n)), func(t *testing.T) {
				t.Parallel()
				for seed := lo; seed < lo+chunk && seed <= n; seed++ {
					st := runSim(t, uint64(seed))
					mu.Lock()
					worst = max(worst, st["converged_after"])
					for k, v := range st {
						total[k] += v
					}
					mu.Unlock()
				}
			})
		}
	})
	// Every kind of step must have happened somewhere, or the simulation
	// is not exercising what it claims to.
	for _, k := range []string{"healed", "resumed", "settled", "confirmed", "deleted", "stale", "aborted", "held", "failed:no_spare_broker", "failed:backfill_failed", "deleted_corrupt", "scrubbed", "refused", "lost"} {
		if total[k] == 0 {
			t.Errorf("no %s in %d seeds: %v", k, n, total)
		}
	}
	t.Logf("%d seeds: %v; worst convergence %d ticks after faults stopped", n, total, worst)
}
