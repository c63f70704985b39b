//go:build race

package pass

// raceEnabled: under the race detector the simulation runs fewer seeds by
// default (-sim.seeds overrides), to keep `go test -race` near a minute.
const raceEnabled = true
