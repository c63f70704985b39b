package heal

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// ErrNoBroker is what PlaceNew returns when no broker can take a new
// segment; the error names why each registered broker was left out.
var ErrNoBroker = errors.New("heal: no broker to place a new segment on")

// Candidates are the registered brokers as placing a new segment sees
// them, with the facts that decide which may take it.
type Candidates struct {
	// Brokers are the registered brokers with their lifecycle modes (the
	// view's records). A broker without an admin address has not finished
	// registering.
	Brokers []meta.Broker
	// Self is the broker that places (the leader): it is live whenever
	// Heard names it, however long ago, and Unplaceable never leaves it out.
	Self meta.BrokerID
	// Heard is when the control plane last heard from each broker; one it
	// does not name is not live.
	Heard map[meta.BrokerID]time.Time
	// Now and Horizon: a broker heard from after Now-Horizon is live.
	Now     time.Time
	Horizon time.Duration
	// Unplaceable are the brokers the coordinator counts dead or suspect
	// or could not authenticate on its last pass.
	Unplaceable map[meta.BrokerID]bool
	// Factor is the replication factor, at least 1.
	Factor int
	// Rotate picks the candidate that starts the set: consecutive values
	// spread consecutive segments round-robin over the candidates.
	Rotate int
}

// PlaceNew returns the replica set of a new segment: min(Factor,
// candidates) brokers taken in turn from the candidates in id order,
// starting at Rotate (modulo their number). A candidate is a registered
// broker that is live and not Unplaceable; a decommissioning candidate is
// taken only when fewer than Factor others are, the lowest ids first (the
// drain cannot finish then anyway, and a write is not refused for it).
// With no candidate it fails with ErrNoBroker, naming why each broker was
// left out; a Factor below 1 is ErrInvalid. PlaceNew is pure and
// deterministic: the order of Brokers does not matter.
func PlaceNew(c Candidates) ([]meta.BrokerID, error) {
	if c.Factor < 1 {
		return nil, fmt.Errorf("%w: replication factor %d: want at least 1", ErrInvalid, c.Factor)
	}
	var active, draining []meta.BrokerID
	var why leftOut
	for _, br := range c.Brokers {
		switch {
		case br.AdminAddr == "":
			why.unregistered = append(why.unregistered, br.ID)
		case c.Unplaceable[br.ID] && br.ID != c.Self:
			why.unplaceable = append(why.unplaceable, br.ID)
		case !c.live(br.ID):
			why.unheard = append(why.unheard, br.ID)
		case br.Is(meta.ModeDecommissioning):
			draining = append(draining, br.ID)
		default:
			active = append(active, br.ID)
		}
	}
	slices.Sort(active)
	if len(active) < c.Factor {
		slices.Sort(draining)
		active = append(active, draining[:min(c.Factor-len(active), len(draining))]...)
	}
	if len(active) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoBroker, why.String(len(c.Brokers), c.Horizon))
	}
	start := c.Rotate % len(active)
	if start < 0 {
		start += len(active)
	}
	out := make([]meta.BrokerID, 0, min(c.Factor, len(active)))
	for i := range cap(out) {
		out = append(out, active[(start+i)%len(active)])
	}
	return out, nil
}

// live reports whether the control plane heard from id within the horizon
// (the placing broker: at all).
func (c *Candidates) live(id meta.BrokerID) bool {
	t, ok := c.Heard[id]
	return ok && (id == c.Self || t.After(c.Now.Add(-c.Horizon)))
}

// leftOut are the brokers PlaceNew left out, by reason.
type leftOut struct {
	unregistered, unplaceable, unheard []meta.BrokerID
}

func (l *leftOut) String(registered int, horizon time.Duration) string {
	if registered == 0 {
		return "no broker is registered"
	}
	parts := []string{fmt.Sprintf("%d registered", registered)}
	for _, r := range []struct {
		ids  []meta.BrokerID
		what string
	}{
		{l.unheard, fmt.Sprintf("not heard from within %v", horizon)},
		{l.unplaceable, "dead, suspect or unauthenticated on the last heal pass"},
		{l.unregistered, "without an admin address yet"},
	} {
		if len(r.ids) > 0 {
			slices.Sort(r.ids)
			parts = append(parts, fmt.Sprintf("%s: %v", r.what, r.ids))
		}
	}
	return strings.Join(parts, "; ")
}
