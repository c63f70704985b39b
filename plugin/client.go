package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/malachi-log/malachi/catchup"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pass"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/store"
)

// Client calls other instances' replication servers. It implements
// pass.Brokers for the coordinator, resolving a broker's control and data
// addresses from the metadata. It is safe for concurrent use.
type Client struct {
	rpc     *rpc.Client
	certs   *pki.Certs // signs catch-up tickets; nil in insecure mode
	self    meta.BrokerID
	resolve func(meta.BrokerID) (meta.Broker, bool)
	timeout time.Duration
	now     func() time.Time
}

var _ pass.Brokers = (*Client)(nil)

// TicketLife is how long a catch-up ticket a Backfill hands its target
// stays valid: the target presents it at once, so a minute is ample.
const TicketLife = time.Minute

// NewClient returns a Client of broker self that presents certs (nil:
// plaintext, insecure mode) and signs each backfill's ticket with them.
// resolve returns the registered broker (its RPCAddr and DataAddr);
// timeout bounds every call but a probe (bounded by the caller's context)
// and a backfill.
func NewClient(certs *pki.Certs, self meta.BrokerID, resolve func(meta.BrokerID) (meta.Broker, bool), timeout time.Duration) *Client {
	return &Client{rpc: rpc.NewClient(certs, errCodes, 0), certs: certs, self: self, resolve: resolve, timeout: timeout, now: time.Now}
}

// Close releases idle connections.
func (c *Client) Close() { c.rpc.Close() }

func (c *Client) addr(b meta.BrokerID) (meta.Broker, error) {
	br, ok := c.resolve(b)
	if !ok || br.RPCAddr == "" {
		return meta.Broker{}, fmt.Errorf("%w: broker %d has no heal rpc address in the metadata", ErrUnknownBroker, b)
	}
	return br, nil
}

func (c *Client) do(ctx context.Context, b meta.BrokerID, path string, req, resp any, bounded bool) error {
	br, err := c.addr(b)
	if err != nil {
		return err
	}
	if bounded && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	return c.classify(path, b, c.rpc.CallBroker(ctx, b, http.MethodPost, br.RPCAddr, path, req, resp))
}

// classify wraps an error of path on broker b in the heal sentinel it
// means to the coordinator.
func (c *Client) classify(path string, b meta.BrokerID, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrSealConflict):
		// The broker's copy keeps its own seal: the coordinator leaves
		// the segment alone (heal.SealConflict).
		return fmt.Errorf("%w: %s to broker %d: %w", heal.ErrSealConflict, path, b, err)
	case rpc.IsUnauthenticated(err):
		// Not a silent broker: one that cannot be authenticated (or
		// cannot authenticate this one) is reported, never counted dead.
		return fmt.Errorf("%w: %s to broker %d: %w", heal.ErrUnauthenticated, path, b, err)
	}
	return fmt.Errorf("plugin: %s to broker %d: %w", path, b, err)
}

// Probe implements pass.Prober.
func (c *Client) Probe(ctx context.Context, broker meta.BrokerID, snapshotIndex uint64) (heal.ProbeReport, error) {
	req := ProbeRequest{Index: snapshotIndex}
	if dl, ok := ctx.Deadline(); ok {
		// Leave the answer a tenth of the time to travel back.
		req.DeadlineMillis = max(1, time.Until(dl).Milliseconds()*9/10)
	}
	var rep heal.ProbeReport
	if err := c.do(ctx, broker, pathProbe, req, &rep, false); err != nil {
		return heal.ProbeReport{}, err
	}
	if rep.Broker != broker {
		return heal.ProbeReport{}, fmt.Errorf("%w: probe of broker %d answered by broker %d", ErrRemote, broker, rep.Broker)
	}
	if err := rep.Validate(); err != nil {
		return heal.ProbeReport{}, fmt.Errorf("%w: %w", ErrRemote, err)
	}
	return rep, nil
}

// Backfill implements pass.Backfiller: it asks the target to pull from the
// source's data listener, resuming at its own durable end (one request).
func (c *Client) Backfill(ctx context.Context, target, source meta.BrokerID, seg meta.Segment) (int64, error) {
	src, ok := c.resolve(source)
	if !ok || src.DataAddr == "" {
		return 0, fmt.Errorf("%w: broker %d has no catch-up data address in the metadata", ErrUnknownBroker, source)
	}
	req := BackfillRequest{Segment: seg, Source: source, SourceAddr: src.DataAddr}
	if c.certs != nil {
		t := catchup.Ticket{Segment: seg, From: 0, To: seg.ByteSize + store.FooterSize, Source: source, Target: target,
			Issuer: c.self, Expires: c.now().Add(TicketLife)}
		ticket, err := catchup.IssueTicket(c.certs, t)
		if err != nil {
			return 0, fmt.Errorf("plugin: backfill %s from broker %d to %d: %w", seg.ID, source, target, err)
		}
		req.Ticket = ticket
	}
	var resp BackfillResponse
	if err := c.do(ctx, target, pathBackfill, req, &resp, false); err != nil {
		return 0, err
	}
	return resp.Bytes, nil
}

// Delete implements pass.Deleter.
func (c *Client) Delete(ctx context.Context, broker meta.BrokerID, seg meta.SegmentID) error {
	return c.do(ctx, broker, pathDelete, DeleteRequest{Segment: seg}, nil, true)
}

// Latched lists the copies latched on broker.
func (c *Client) Latched(ctx context.Context, broker meta.BrokerID) ([]meta.SegmentID, error) {
	var resp LatchedResponse
	if err := c.do(ctx, broker, pathLatched, empty{}, &resp, true); err != nil {
		return nil, err
	}
	return resp.Latched, nil
}
