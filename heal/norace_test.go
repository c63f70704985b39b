//go:build !race

package heal

const raceEnabled = false
