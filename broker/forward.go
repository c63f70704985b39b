package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/malachi-log/malachi/cluster"
	"github.com/malachi-log/malachi/internal/retry"
	"github.com/malachi-log/malachi/meta"
)

// leaderRequest is a request only the raft leader serves (a metadata
// write, placing a segment, a broker's mode) or the coordinator, which runs
// beside it (a dry run, a release, an acknowledgement).
type leaderRequest struct {
	what         string // what is asked, for errors: "apply seal_segment"
	method, path string // the leader's route
	req, resp    any    // the body (nil: none) and where the answer goes (nil: dropped)
	// here serves the request on this broker; served is false when this
	// broker is not the one to serve it (not the leader): the request then
	// goes to the leader. nil: always to the leader.
	here func() (served bool, err error)
}

// onLeader serves r here when this broker can, else on the leader (see
// forwarder.do), waiting 10 ms doubling to 200 ms between tries.
func (b *Server) onLeader(ctx context.Context, r leaderRequest) error {
	var qw quorumWatch
	f := forwarder{
		leader:  b.leaderAdmin,
		call:    b.rpc.Call,
		quorum:  func() error { return qw.check(b.node) },
		backoff: retry.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond},
	}
	return f.do(ctx, r)
}

// forwarder sends leaderRequests to the raft leader's admin API.
type forwarder struct {
	// leader names the leader and its admin address, or fails with
	// errNoLeader.
	leader func() (meta.BrokerID, string, error)
	// call sends one request to a broker's admin API (rpc.Client.Call).
	call func(ctx context.Context, method, addr, path string, req, resp any) error
	// quorum fails once waiting for a leader is hopeless (quorumWatch).
	quorum  func() error
	backoff retry.Backoff
}

// do tries r.here, then the leader, until one serves r. It tries again,
// after the backoff, while no leader is known, the leader it asked is no
// longer the leader or does not answer (a connection refused, reset or
// cut); it stops when ctx is done or the quorum check fails. Errors start
// with r.what; an error of the leader's names the leader and its address
// ("apply seal_segment: leader 3 at 10.0.0.3:7001: ...") and wraps the
// sentinel its code names; an error of here is returned as it is.
func (f *forwarder) do(ctx context.Context, r leaderRequest) error {
	for {
		if r.here != nil {
			if served, err := r.here(); served {
				return err
			}
		}
		err := f.forward(ctx, r)
		if err == nil {
			return nil
		}
		if !retryable(err) && ctx.Err() == nil {
			return fmt.Errorf("%s: %w", r.what, err)
		}
		if qerr := f.quorum(); qerr != nil {
			return fmt.Errorf("%s: %w (last: %v)", r.what, qerr, err)
		}
		if werr := f.backoff.Wait(ctx); werr != nil {
			return fmt.Errorf("%s: %w (last: %v)", r.what, werr, err)
		}
	}
}

// forward sends r once to the leader.
func (f *forwarder) forward(ctx context.Context, r leaderRequest) error {
	id, addr, err := f.leader()
	if err != nil {
		return err
	}
	if err := f.call(ctx, r.method, addr, r.path, r.req, r.resp); err != nil {
		return fmt.Errorf("leader %d at %s: %w", id, addr, err)
	}
	return nil
}

// retryable reports whether a forwarded request that failed with err may
// succeed on another try: no leader yet, a leader change, a leader that
// does not answer.
func retryable(err error) bool {
	return errors.Is(err, errNoLeader) || notLeader(err) || isConnErr(err)
}

// notLeader reports whether err says the broker that answered it is not,
// or no longer, the leader.
func notLeader(err error) bool {
	return errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrLeadershipLost)
}

// post sends a JSON request to another broker's admin API with this
// broker's certificate and decodes the answer; an error answer comes back
// as the sentinel its code names.
func (b *Server) post(ctx context.Context, addr, path string, req, resp any) error {
	return b.call(ctx, http.MethodPost, addr, path, req, resp)
}

// call sends method path with req (nil: no body) to another broker's
// admin API and decodes the answer into resp (nil: discarded).
func (b *Server) call(ctx context.Context, method, addr, path string, req, resp any) error {
	if err := b.rpc.Call(ctx, method, addr, path, req, resp); err != nil {
		return fmt.Errorf("%s %s: %w", addr, path, err)
	}
	return nil
}

// leaderAdmin returns the leader's admin address from the metadata.
func (b *Server) leaderAdmin() (meta.BrokerID, string, error) {
	id, _ := b.node.Leader()
	if id == 0 {
		return 0, "", fmt.Errorf("%w: no leader known", errNoLeader)
	}
	snap := b.node.Snapshot()
	br, ok := snap.Broker(id)
	if !ok || br.AdminAddr == "" {
		return id, "", fmt.Errorf("%w: leader %d has not registered its admin address yet", errNoLeader, id)
	}
	return id, br.AdminAddr, nil
}

// quorumWatch fails a write that waits for a leader once its node has
// lacked a quorum for a whole Quorum.Window in a row (an election that can
// succeed ends well within it), with the error that says how many voters
// answer, instead of waiting out the caller's deadline.
type quorumWatch struct{ since time.Time }

func (w *quorumWatch) check(n *cluster.Node) error {
	q := n.Quorum()
	err := q.Err()
	if err == nil {
		w.since = time.Time{}
		return nil
	}
	now := time.Now()
	if w.since.IsZero() {
		w.since = now
	}
	if now.Sub(w.since) < q.Window {
		return nil
	}
	return err
}

// isConnErr reports whether err is a connection that failed or broke
// before an answer came back.
func isConnErr(err error) bool {
	return strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "EOF")
}
