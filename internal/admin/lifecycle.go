package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// Mode is the answer of the lifecycle routes: broker's mode as recorded
// at Index (an empty Mode is active).
type Mode struct {
	Broker meta.BrokerID   `json:"broker"`
	Mode   meta.BrokerMode `json:"mode"`
	Until  time.Time       `json:"until,omitzero"`
	Index  uint64          `json:"index"`
}

// Decommission starts draining broker id: its replicas move to other
// brokers and it is never a target again. Refused (ErrRefused, code
// unknown_broker) for a broker not registered.
func (c *Client) Decommission(ctx context.Context, id meta.BrokerID) (Mode, error) {
	return c.mode(ctx, http.MethodPost, "/v1/brokers/"+id.String()+"/decommission")
}

// CancelDecommission puts broker id back to active; the moves already
// recorded stay.
func (c *Client) CancelDecommission(ctx context.Context, id meta.BrokerID) (Mode, error) {
	return c.mode(ctx, http.MethodDelete, "/v1/brokers/"+id.String()+"/decommission")
}

// Maintenance opens a maintenance window of length d for broker id, ending
// at the leader's now + d. Refused (code maintenance_full) when
// heal.max_maintenance brokers are in maintenance already.
func (c *Client) Maintenance(ctx context.Context, id meta.BrokerID, d time.Duration) (Mode, error) {
	return c.mode(ctx, http.MethodPost, "/v1/brokers/"+id.String()+"/maintenance?for="+url.QueryEscape(d.String()))
}

// EndMaintenance puts broker id back to active: from then on its absence
// is a failure again, after the grace delay.
func (c *Client) EndMaintenance(ctx context.Context, id meta.BrokerID) (Mode, error) {
	return c.mode(ctx, http.MethodDelete, "/v1/brokers/"+id.String()+"/maintenance")
}

func (c *Client) mode(ctx context.Context, method, path string) (Mode, error) {
	var m Mode
	var body any
	if method == http.MethodPost {
		body = struct{}{}
	}
	err := c.do(ctx, method, path, body, &m)
	return m, err
}

// Lifecycle mirrors the lifecycle part of heal.Report as the plugin serves
// it in /status (decoded apart from HealReport, as its own mirror).
type Lifecycle struct {
	Decommission     []Drain            `json:"decommission"`
	Maintenance      []MaintenanceEntry `json:"maintenance"`
	MaintenanceFloor []FloorEntry       `json:"maintenance_floor"`
}

// Drain mirrors heal.Drain: one decommissioning broker's progress.
type Drain struct {
	Broker   meta.BrokerID    `json:"broker"`
	Up       bool             `json:"up"`
	Segments int              `json:"segments"`
	Bytes    int64            `json:"bytes"`
	Moving   int              `json:"moving"`
	Blocked  map[string]int   `json:"blocked"`
	Examples []BlockedSegment `json:"examples"`
	Drained  bool             `json:"drained"`
	Rate     float64          `json:"rate_bytes_per_sec"`
	ETA      time.Duration    `json:"eta"`
}

// BlockedSegment mirrors heal.BlockedSegment.
type BlockedSegment struct {
	Segment meta.SegmentID `json:"segment"`
	Reason  string         `json:"reason"`
}

// MaintenanceEntry mirrors heal.Maintenance.
type MaintenanceEntry struct {
	Broker meta.BrokerID `json:"broker"`
	Until  time.Time     `json:"until"`
	Seen   bool          `json:"seen"`
	Ended  bool          `json:"ended"`
}

// FloorEntry mirrors heal.MaintenanceFloor.
type FloorEntry struct {
	Segment meta.SegmentID `json:"segment"`
	Broker  meta.BrokerID  `json:"broker"`
	Reason  string         `json:"reason"`
}

// FindLifecycle returns the lifecycle part of the latest heal report of a
// /status document (see FindReport); ok is false when it holds none.
func FindLifecycle(status json.RawMessage) (Lifecycle, bool) {
	var l Lifecycle
	st, ok := DecodeStatus(status)
	if !ok || st.LastPass == nil {
		return l, false
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(status, &doc) != nil {
		return l, false
	}
	raw := findKey(doc, "last_pass")
	return l, raw != nil && json.Unmarshal(raw, &l) == nil
}

// findKey returns the value of key in doc or in an object nested in it
// (the status may be wrapped under "heal", "status" or "plugin").
func findKey(doc map[string]json.RawMessage, key string) json.RawMessage {
	if v, ok := doc[key]; ok {
		return v
	}
	for _, k := range []string{"heal", "status", "plugin"} {
		var inner map[string]json.RawMessage
		if v, ok := doc[k]; ok && json.Unmarshal(v, &inner) == nil {
			if r := findKey(inner, key); r != nil {
				return r
			}
		}
	}
	return nil
}
