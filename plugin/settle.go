package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// MaxSettleBatch bounds the copies of one settle or confirm request; the
// client splits a longer batch.
const MaxSettleBatch = 4096

// minSettleRate is the read rate a settle request's deadline assumes on
// top of the client's timeout: a settle that cannot trust its copy reads
// it whole.
const minSettleRate = 32 << 20 // bytes per second

// Settle implements heal.Settler: one request per MaxSettleBatch copies.
func (c *Client) Settle(ctx context.Context, broker meta.BrokerID, segs []meta.Segment, errs []error) error {
	return c.batch(ctx, broker, pathSettle, segs, errs)
}

// Confirm implements heal.Settler.
func (c *Client) Confirm(ctx context.Context, broker meta.BrokerID, segs []meta.Segment, errs []error) error {
	return c.batch(ctx, broker, pathConfirm, segs, errs)
}

// batch sends segs to path on broker, MaxSettleBatch at a time, and sets
// errs[i] from each answer. A request that fails whole fails each of its
// copies with its error.
func (c *Client) batch(ctx context.Context, broker meta.BrokerID, path string, segs []meta.Segment, errs []error) error {
	if len(errs) < len(segs) {
		return fmt.Errorf("plugin: %s: %d errors for %d segments", path, len(errs), len(segs))
	}
	br, err := c.addr(broker)
	if err != nil {
		return err
	}
	for lo := 0; lo < len(segs); lo += MaxSettleBatch {
		part := segs[lo:min(lo+MaxSettleBatch, len(segs))]
		var resp BatchResponse
		err := c.call(ctx, br, path, part, &resp)
		if err == nil && len(resp.Items) != len(part) {
			err = fmt.Errorf("%w: %s to broker %d: %d answers for %d segments", ErrRemote, path, broker, len(resp.Items), len(part))
		}
		for k := range part {
			switch {
			case err != nil:
				errs[lo+k] = err
			case resp.Items[k].Code != "":
				it := resp.Items[k]
				errs[lo+k] = c.classify(path, broker, fmt.Errorf("%s: %w", part[k].ID, errCodes.Decode(it.Code, it.Message)))
			default:
				errs[lo+k] = nil
			}
		}
	}
	return nil
}

// call sends one batch request, its deadline the client's timeout plus the
// time to read the batch's bytes at minSettleRate.
func (c *Client) call(ctx context.Context, br meta.Broker, path string, segs []meta.Segment, resp *BatchResponse) error {
	if c.timeout > 0 {
		var bytes int64
		for i := range segs {
			bytes += segs[i].ByteSize
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout+time.Duration(bytes)*time.Second/minSettleRate)
		defer cancel()
	}
	return c.classify(path, br.ID, c.rpc.CallBroker(ctx, br.ID, "POST", br.RPCAddr, path, SegmentsRequest{Segments: segs}, resp))
}

// segmentsReq decodes and validates a batch request.
func (s *server) segmentsReq(body []byte) ([]meta.Segment, error) {
	var req SegmentsRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if len(req.Segments) > MaxSettleBatch {
		return nil, fmt.Errorf("%w: %d segments in one request, at most %d", store.ErrInvalid, len(req.Segments), MaxSettleBatch)
	}
	for i := range req.Segments {
		if err := req.Segments[i].Validate(); err != nil {
			return nil, fmt.Errorf("segment %d of the request: %w", i, err)
		}
	}
	return req.Segments, nil
}

// itemError is the wire form of one copy's error.
func itemError(err error) BatchItem {
	code, _ := errCodes.Encode(err)
	return BatchItem{Code: code, Message: err.Error()}
}

// settle brings each local copy of the batch down to its sealed size and
// fences it; the copies' directories are made durable together.
func (s *server) settle(ctx context.Context, body []byte) (any, error) {
	segs, err := s.segmentsReq(body)
	if err != nil {
		return nil, err
	}
	results := make([]store.SettleResult, len(segs))
	errs := make([]error, len(segs))
	if err := s.db.SettleBatch(ctx, segs, results, errs); err != nil {
		return nil, err
	}
	resp := BatchResponse{Items: make([]BatchItem, len(segs))}
	var failed, footers int
	var cut int64
	for i, r := range results {
		if errs[i] != nil {
			resp.Items[i] = itemError(errs[i])
			failed++
			continue
		}
		resp.Items[i] = BatchItem{FooterWritten: r.FooterWritten, SyncedAndRolled: r.SyncedAndRolled, BytesCut: r.BytesCut}
		if r.FooterWritten || r.BytesCut > 0 {
			s.log.Info().Str("segment", string(segs[i].ID)).Bool("footer_written", r.FooterWritten).Int64("bytes_cut", r.BytesCut).Msg("copy settled")
			footers++
			cut += r.BytesCut
		}
	}
	s.log.Debug().Int("copies", len(segs)).Int("failed", failed).Int("changed", footers).Int64("bytes_cut", cut).Msg("settle batch")
	return resp, nil
}

// confirm records, durably and with one write, that each local copy of
// the batch is exact (its file identity as it is now, at its sealed size).
func (s *server) confirm(ctx context.Context, body []byte) (any, error) {
	segs, err := s.segmentsReq(body)
	if err != nil {
		return nil, err
	}
	resp := BatchResponse{Items: make([]BatchItem, len(segs))}
	ids := make([]meta.SegmentID, 0, len(segs))
	fis := make([]store.FileIdentity, 0, len(segs))
	at := make([]int, 0, len(segs))
	for i, seg := range segs {
		fi, err := s.db.Identity(seg.ID)
		if err == nil && fi.Size != seg.ByteSize+store.FooterSize {
			err = fmt.Errorf("%w: confirm %s: copy measures %d bytes, want %d", store.ErrInvalid, seg.ID, fi.Size, seg.ByteSize+store.FooterSize)
		}
		if err != nil {
			resp.Items[i] = itemError(err)
			continue
		}
		ids, fis, at = append(ids, seg.ID), append(fis, fi), append(at, i)
	}
	errs := make([]error, len(ids))
	if err := s.db.ConfirmBatch(ids, fis, errs); err != nil {
		return nil, err
	}
	for k, i := range at {
		if errs[k] != nil {
			resp.Items[i] = itemError(errs[k])
			continue
		}
		s.metrics.confirmed.Inc()
	}
	return resp, nil
}
