package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/plugin"
)

// The routes the heal coordinator serves (release, acknowledge, the dry
// run of the next pass): on this broker when it runs the coordinator,
// else on the leader.

// release lifts a mass-failure hold on the coordinator: here when this
// broker runs it, else on the leader.
func (b *Server) release(r *http.Request, _ []byte) (any, error) {
	return b.onCoordinator(r, "/v1/internal/heal/release", b.healRelease, map[string]any{"released": true, "broker": b.self})
}

// acknowledge marks a lost segment acknowledged by an operator: the
// reports keep it, marked so.
func (b *Server) acknowledge(r *http.Request, _ []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	ack := func() error {
		err := b.heal.Acknowledge(id)
		switch {
		case errors.Is(err, heal.ErrInvalid):
			return fmt.Errorf("%w: %v", errBadRequest, err)
		case errors.Is(err, heal.ErrNotLost):
			return fmt.Errorf("%w: %v", errNotFound, err)
		}
		return err
	}
	return b.onCoordinator(r, "/v1/internal/heal/acknowledge/"+string(id), ack, map[string]any{"acknowledged": id, "broker": b.self})
}

func (b *Server) healRelease() error { return b.heal.Release() }

// onCoordinator runs fn here when this broker runs the coordinator, else
// posts path to the leader's admin API (onLeader) and returns its answer.
func (b *Server) onCoordinator(r *http.Request, path string, fn func() error, ok any) (any, error) {
	if b.heal == nil {
		return nil, fmt.Errorf("%w: heal is disabled on broker %d", errNotFound, b.self)
	}
	var out map[string]any
	served := false
	err := b.onLeader(r.Context(), leaderRequest{
		what: "POST " + path, method: http.MethodPost, path: path, req: struct{}{}, resp: &out,
		here: func() (bool, error) {
			var err error
			served, err = b.coordinatorHere(fn())
			return served, err
		},
	})
	switch {
	case err != nil:
		return nil, err
	case served:
		return ok, nil
	}
	return out, nil
}

// coordinatorHere says what err, from a call to the coordinator, means
// for its request: served is false when the coordinator does not run here
// (plugin.ErrNotCoordinator) and another broker leads, which serves it; a
// leader whose coordinator has not started answers errNoLeader.
func (b *Server) coordinatorHere(err error) (served bool, _ error) {
	switch {
	case !errors.Is(err, plugin.ErrNotCoordinator):
		return true, err
	case b.node.IsLeader():
		return true, fmt.Errorf("%w: %v", errNoLeader, err)
	}
	return false, nil
}

// plan answers the dry run of the next heal pass (heal.Plan as JSON),
// computed by the coordinator: here when this broker leads, else by the
// leader (onLeader).
func (b *Server) plan(r *http.Request, _ []byte) (any, error) {
	if b.heal == nil {
		return nil, fmt.Errorf("%w: heal is disabled on broker %d", errNotFound, b.self)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var here heal.Plan
	var out json.RawMessage
	served := false
	err := b.onLeader(ctx, leaderRequest{
		what: "plan", method: http.MethodGet, path: "/v1/internal/plan", resp: &out,
		here: func() (bool, error) {
			var err error
			here, err = b.heal.DryRun(ctx)
			served, err = b.coordinatorHere(err)
			return served, err
		},
	})
	switch {
	case err != nil:
		return nil, err
	case served:
		return here, nil
	}
	return out, nil
}
