package heal

import (
	"fmt"
	"slices"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// DefaultHoldShare is the share of brokers whose near-simultaneous loss
// holds placement when Policy.HoldShare is zero.
const DefaultHoldShare = 0.25

// Hold is the mass-failure brake (a pure rule): it reports whether
// backfills (placement of new replicas and in-place resumes) must be held
// because more than pol.HoldShare of the
// registered brokers (and at least two: one broker is never a mass
// failure), or every broker of a rack that has at least two, went missing
// within one grace window of each other. A broker is missing when
// it has no report this tick; the time it went missing is its last-seen
// time (never seen: the zero time). A hold lasts while those brokers stay
// missing: it lifts on its own when enough of them return (the brokers
// still missing then get a fresh grace delay: Report.GraceRestarted), or
// for one pass when the caller sets Input.Release. The reason names the rule, e.g.
// "brokers_missing: 3 of 5 within 10s" or "rack_missing: r2 (2 brokers)".
func Hold(brokers []meta.Broker, reports []ProbeReport, seen []Seen, pol Policy) (bool, string) {
	share := pol.HoldShare
	if share < 0 || len(brokers) == 0 {
		return false, ""
	}
	if share == 0 {
		share = DefaultHoldShare
	}
	up := func(id meta.BrokerID) bool {
		for i := range reports {
			if reports[i].Broker == id {
				return true
			}
		}
		return false
	}
	last := func(id meta.BrokerID) time.Time {
		var at time.Time
		for _, s := range seen {
			if s.Broker == id && s.At.After(at) {
				at = s.At
			}
		}
		return at
	}
	var missing []time.Time
	type rack struct {
		name    string
		n       int
		missing []time.Time
	}
	var racks []rack
	for _, b := range brokers {
		ri := -1
		if b.Rack != "" {
			ri = slices.IndexFunc(racks, func(r rack) bool { return r.name == b.Rack })
			if ri < 0 {
				racks = append(racks, rack{name: b.Rack})
				ri = len(racks) - 1
			}
			racks[ri].n++
		}
		if up(b.ID) {
			continue
		}
		at := last(b.ID)
		missing = append(missing, at)
		if ri >= 0 {
			racks[ri].missing = append(racks[ri].missing, at)
		}
	}
	if k := widestWindow(missing, pol.Grace); k >= 2 && float64(k) > share*float64(len(brokers)) {
		return true, fmt.Sprintf("brokers_missing: %d of %d within %v", k, len(brokers), pol.Grace)
	}
	if len(racks) > 1 {
		for _, r := range racks {
			if r.n >= 2 && len(r.missing) == r.n && widestWindow(r.missing, pol.Grace) == r.n {
				return true, fmt.Sprintf("rack_missing: %s (%d brokers)", r.name, r.n)
			}
		}
	}
	return false, ""
}

// widestWindow returns the largest number of times that fit in one window
// of width w.
func widestWindow(ts []time.Time, w time.Duration) int {
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi].Sub(ts[lo]) > w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}
