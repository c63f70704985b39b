//go:build !invariants

package heal

// checkStep checks the expensive properties of a Step (see
// invariants_on.go); without the invariants build tag it does nothing.
func checkStep(*State, *Observation, *Plan, *State) {}

// checkReports checks that every report is valid (see invariants_on.go);
// without the invariants build tag it does nothing.
func checkReports([]ProbeReport) {}
