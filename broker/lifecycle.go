package broker

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/rpc"
)

// The operator's lifecycle writes: decommission and maintenance
// of a broker, each a meta.SetBrokerMode applied through raft. The leader
// computes a maintenance window's end from its own clock (now + for) and
// fills IssuedAt and MaxMaintenance (heal.max_maintenance), so the state
// machine's quota check is decided by the log alone; a follower forwards
// the request to the leader's internal route.
//
//	POST   /v1/brokers/{id}/decommission          start draining broker id
//	DELETE /v1/brokers/{id}/decommission          cancel: back to active
//	POST   /v1/brokers/{id}/maintenance?for=30m   a maintenance window
//	DELETE /v1/brokers/{id}/maintenance           end it: back to active

// maxMaintenanceWindow bounds ?for=: a longer absence is a decommission.
const maxMaintenanceWindow = 7 * 24 * time.Hour

// modeRequest is what a lifecycle route asks, parsed from its path and
// query (and forwarded as is to the leader).
type modeRequest struct {
	broker meta.BrokerID
	mode   meta.BrokerMode
	dur    time.Duration
}

// parseModeRequest reads broker id from the path and, for a maintenance
// start, the window's length from ?for=.
func parseModeRequest(r *http.Request, mode meta.BrokerMode) (modeRequest, error) {
	id, err := meta.ParseBrokerID(r.PathValue("id"))
	if err != nil {
		return modeRequest{}, fmt.Errorf("%w: path: %w", errBadRequest, err)
	}
	req := modeRequest{broker: id, mode: mode}
	if mode != meta.ModeMaintenance {
		return req, nil
	}
	s := r.URL.Query().Get("for")
	if s == "" {
		return req, fmt.Errorf("%w: maintenance of broker %d: no ?for= duration (e.g. for=30m)", errBadRequest, id)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > maxMaintenanceWindow {
		return req, fmt.Errorf("%w: maintenance of broker %d: for=%q: want a duration from 1s to %v", errBadRequest, id, s, maxMaintenanceWindow)
	}
	req.dur = d
	return req, nil
}

// path is the route that asks req (internal: between brokers).
func (m modeRequest) path(internal bool) string {
	p := "/v1/brokers/" + m.broker.String()
	if internal {
		p = "/v1/internal/brokers/" + m.broker.String()
	}
	switch m.mode {
	case meta.ModeDecommissioning:
		return p + "/decommission"
	case meta.ModeMaintenance:
		return p + "/maintenance?for=" + url.QueryEscape(m.dur.String())
	}
	return p + "/mode/active"
}

// modeCommand is the SetBrokerMode the leader applies for m at now.
func (b *Server) modeCommand(m modeRequest, now time.Time) meta.SetBrokerMode {
	c := meta.SetBrokerMode{Broker: m.broker, Mode: m.mode, IssuedAt: now.UTC(), MaxMaintenance: b.cfg.Heal.MaxMaintenance}
	if m.mode == meta.ModeMaintenance {
		c.Until = now.Add(m.dur).UTC()
	}
	return c
}

// setMode applies m here when this broker leads, else on the leader
// (onLeader), through its internal route.
func (b *Server) setMode(r *http.Request, m modeRequest) (any, error) {
	var resp admin.Mode // the internal routes are all POST: the path names the mode
	err := b.onLeader(r.Context(), leaderRequest{
		what: fmt.Sprintf("%s of broker %d", m.mode, m.broker), method: http.MethodPost, path: m.path(true), req: struct{}{}, resp: &resp,
		here: func() (bool, error) {
			if !b.node.IsLeader() {
				return false, nil
			}
			var err error
			resp, err = b.applyMode(r.Context(), m)
			if notLeader(err) {
				return false, nil
			}
			return true, err
		},
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// applyMode commits m's SetBrokerMode through this broker's node and
// answers the mode the metadata then records.
func (b *Server) applyMode(ctx context.Context, m modeRequest) (admin.Mode, error) {
	c := b.modeCommand(m, time.Now())
	idx, err := b.node.Apply(ctx, c)
	if err != nil {
		return admin.Mode{}, err
	}
	resp := admin.Mode{Broker: c.Broker, Mode: c.Mode, Until: c.Until, Index: idx}
	if br, ok := b.node.View().Broker(c.Broker); ok && br.Mode != "" {
		resp.Mode, resp.Until = br.Mode, br.Until
	}
	return resp, nil
}

// lifecycleRoutes are the routes of this file with the mode each sets;
// internal ones take a follower's forward (role brokers), the others an
// operator's request (role operators), authenticated as every admin write.
var lifecycleRoutes = []struct {
	pattern  string
	internal bool
	mode     meta.BrokerMode
}{
	{"POST /v1/brokers/{id}/decommission", false, meta.ModeDecommissioning},
	{"DELETE /v1/brokers/{id}/decommission", false, meta.ModeActive},
	{"POST /v1/brokers/{id}/maintenance", false, meta.ModeMaintenance},
	{"DELETE /v1/brokers/{id}/maintenance", false, meta.ModeActive},
	{"POST /v1/internal/brokers/{id}/decommission", true, meta.ModeDecommissioning},
	{"POST /v1/internal/brokers/{id}/maintenance", true, meta.ModeMaintenance},
	{"POST /v1/internal/brokers/{id}/mode/active", true, meta.ModeActive},
}

// handleLifecycle registers lifecycleRoutes on mux through srv.
func (b *Server) handleLifecycle(srv *rpc.Server, mux *http.ServeMux) {
	for _, rt := range lifecycleRoutes {
		roles := rpc.Operators
		if rt.internal {
			roles = rpc.Brokers
		}
		srv.Handle(mux, rt.pattern, roles, adapt(b.modeHandler(rt.mode)))
	}
}

// modeHandler is the handler of one lifecycle route.
func (b *Server) modeHandler(mode meta.BrokerMode) adminHandler {
	return func(r *http.Request, _ []byte) (any, error) {
		m, err := parseModeRequest(r, mode)
		if err != nil {
			return nil, err
		}
		return b.setMode(r, m)
	}
}
