package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/malachi-log/malachi/meta"
)

// Metadata writes: a command committed through raft here when this broker
// leads, else through the leader's /v1/internal/apply (onLeader).

type applyRequest struct {
	Command json.RawMessage `json:"command"`
}

type applyResponse struct {
	Index uint64 `json:"index"`
}

// apply commits c through raft: here when this broker leads, else through
// the leader's admin API (onLeader: retried across an election, bounded by
// ctx and by the quorum). Every command this broker proposes is safe to
// retry: register and seal are idempotent, a create that did land comes
// back as ErrSegmentExists and is checked by the caller.
func (b *Server) apply(ctx context.Context, c meta.Command) (uint64, error) {
	enc, err := meta.EncodeCommand(c)
	if err != nil {
		return 0, err
	}
	var resp applyResponse
	err = b.onLeader(ctx, leaderRequest{
		what: "apply " + c.Op(), method: http.MethodPost, path: "/v1/internal/apply",
		req: applyRequest{Command: enc}, resp: &resp,
		here: func() (bool, error) {
			idx, err := b.node.Apply(ctx, c)
			if notLeader(err) {
				return false, nil
			}
			resp.Index = idx
			return true, err
		},
	})
	return resp.Index, err
}

// parseApply decodes and checks the body of POST /v1/internal/apply.
func parseApply(body []byte) (meta.Command, error) {
	var req applyRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if len(req.Command) == 0 {
		return nil, fmt.Errorf("%w: body: no command", errBadRequest)
	}
	c, err := meta.DecodeCommand(req.Command)
	if err != nil {
		return nil, fmt.Errorf("%w: command: %w", errBadRequest, err)
	}
	return c, nil
}

func (b *Server) internalApply(r *http.Request, body []byte) (any, error) {
	c, err := parseApply(body)
	if err != nil {
		return nil, err
	}
	idx, err := b.node.Apply(r.Context(), c)
	if err != nil {
		return nil, err
	}
	return applyResponse{Index: idx}, nil
}
