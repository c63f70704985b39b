//go:build !invariants

package meta

// Invariants reports whether the expensive checks of invariants.go are
// compiled in (go test -tags invariants, as make test runs).
const Invariants = false

// invState is empty: a Table carries no memory for checks it does not run.
type invState struct{}

func (t *Table) checkInvariants(string) { _ = t.inv }

func (t *Table) sampleView(*View) {}
