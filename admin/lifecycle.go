package admin

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/malachi-log/malachi/meta"
)

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
