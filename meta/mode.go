package meta

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrUnknownBroker is returned by Apply for a command naming a broker that
// is not registered.
var ErrUnknownBroker = errors.New("meta: unknown broker")

// ErrMaintenanceFull is returned by Apply for a SetBrokerMode entering
// maintenance while MaxMaintenance other brokers are in maintenance windows
// still open at the command's IssuedAt.
var ErrMaintenanceFull = errors.New("meta: too many brokers in maintenance")

// BrokerMode is an operator's lifecycle state of a broker. The zero value
// (and "active") is an ordinary member.
type BrokerMode string

const (
	// ModeActive is an ordinary member; the zero value means the same.
	ModeActive BrokerMode = "active"
	// ModeDecommissioning: the broker's replicas move to others while it
	// still serves as a source; it is never a placement target.
	ModeDecommissioning BrokerMode = "decommissioning"
	// ModeMaintenance: until Broker.Until, the broker's absence is not a
	// failure (heal neither counts it dead nor replaces its replicas).
	ModeMaintenance BrokerMode = "maintenance"
)

// Validate reports whether m is one of the three modes (or empty).
func (m BrokerMode) Validate() error {
	switch m {
	case "", ModeActive, ModeDecommissioning, ModeMaintenance:
		return nil
	}
	return fmt.Errorf("%w: broker mode %q: want active, decommissioning or maintenance", ErrInvalid, string(m))
}

// Is reports whether b's mode is m, the empty mode counting as active.
func (b Broker) Is(m BrokerMode) bool {
	if b.Mode == "" {
		return m == ModeActive
	}
	return b.Mode == m
}

// InMaintenance reports whether b is in a maintenance window still open at
// now (Until after now).
func (b Broker) InMaintenance(now time.Time) bool {
	return b.Mode == ModeMaintenance && b.Until.After(now)
}

// SetBrokerMode changes a registered broker's lifecycle mode. Until is the
// end of a maintenance window (absolute, from the leader's clock; zero for
// the other modes). IssuedAt is when the command was issued (the leader's
// clock) and MaxMaintenance the operator's bound: entering maintenance is
// refused when MaxMaintenance other brokers are in maintenance with an
// Until after IssuedAt, so the check is decided by the log alone.
// MaxMaintenance zero means no bound.
type SetBrokerMode struct {
	Broker         BrokerID   `json:"broker"`
	Mode           BrokerMode `json:"mode"`
	Until          time.Time  `json:"until,omitzero"`
	IssuedAt       time.Time  `json:"issued_at,omitzero"`
	MaxMaintenance int        `json:"max_maintenance,omitempty"`
}

// Op implements Command.
func (SetBrokerMode) Op() string { return "set_broker_mode" }

// Validate implements Command.
func (c SetBrokerMode) Validate() error {
	if c.Broker == 0 {
		return fmt.Errorf("%w: set_broker_mode: broker id 0 is reserved", ErrInvalid)
	}
	if c.Mode == "" {
		return fmt.Errorf("%w: set_broker_mode %d: no mode: want active, decommissioning or maintenance", ErrInvalid, c.Broker)
	}
	if err := c.Mode.Validate(); err != nil {
		return fmt.Errorf("set_broker_mode %d: %w", c.Broker, err)
	}
	if c.MaxMaintenance < 0 {
		return fmt.Errorf("%w: set_broker_mode %d: max_maintenance %d is negative", ErrInvalid, c.Broker, c.MaxMaintenance)
	}
	switch {
	case c.Mode == ModeMaintenance && c.Until.IsZero():
		return fmt.Errorf("%w: set_broker_mode %d: maintenance needs an end time (until)", ErrInvalid, c.Broker)
	case c.Mode == ModeMaintenance && !c.IssuedAt.IsZero() && !c.Until.After(c.IssuedAt):
		return fmt.Errorf("%w: set_broker_mode %d: maintenance until %s is not after issued_at %s", ErrInvalid, c.Broker,
			c.Until.UTC().Format(time.RFC3339), c.IssuedAt.UTC().Format(time.RFC3339))
	case c.Mode != ModeMaintenance && !c.Until.IsZero():
		return fmt.Errorf("%w: set_broker_mode %d: until is only for maintenance, not %s", ErrInvalid, c.Broker, c.Mode)
	}
	return nil
}

// applyMode applies c to brokers (sorted by id) and returns the new slice;
// brokers is never written in place (Views share it).
func applyMode(brokers []Broker, c SetBrokerMode) ([]Broker, error) {
	i, ok := slices.BinarySearchFunc(brokers, c.Broker, func(b Broker, id BrokerID) int { return cmp.Compare(b.ID, id) })
	if !ok {
		return brokers, fmt.Errorf("%w: set_broker_mode: broker %d is not registered", ErrUnknownBroker, c.Broker)
	}
	if c.Mode == ModeMaintenance && c.MaxMaintenance > 0 {
		var in []BrokerID
		for _, b := range brokers {
			if b.ID != c.Broker && b.Mode == ModeMaintenance && b.Until.After(c.IssuedAt) {
				in = append(in, b.ID)
			}
		}
		if len(in) >= c.MaxMaintenance {
			return brokers, fmt.Errorf("%w: set_broker_mode %d: brokers %v are in maintenance at %s, max_maintenance is %d",
				ErrMaintenanceFull, c.Broker, in, c.IssuedAt.UTC().Format(time.RFC3339), c.MaxMaintenance)
		}
	}
	bs := slices.Clone(brokers)
	b := &bs[i]
	switch {
	case c.Mode != ModeActive:
		b.Mode, b.Until = c.Mode, c.Until.UTC()
	case b.Mode == ModeMaintenance && !c.IssuedAt.IsZero() && b.Until.After(c.IssuedAt):
		// A window ended early: Until records when, so the grace delay
		// of a broker still absent starts then.
		b.Mode, b.Until = "", c.IssuedAt.UTC()
	default:
		b.Mode, b.Until = "", time.Time{}
	}
	return bs, nil
}
