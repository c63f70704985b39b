package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// pathDeleteLeftover deletes a copy the metadata does not assign to the
// broker (DeleteLeftoverRequest).
const pathDeleteLeftover = "/rpc/v1/delete_leftover"

// DeleteLeftoverRequest names a leftover copy to delete and the metadata
// index the coordinator planned it at: the broker refuses while its view
// at that index or later names it in the segment's set.
type DeleteLeftoverRequest struct {
	Segment meta.SegmentID `json:"segment"`
	Index   uint64         `json:"index"`
}

// leftovers is what the probe reports of the copies its store holds
// outside their replica set: a list recomputed only when the store's
// copies, the view's index or the failed deletes changed, and the error
// text of the last failed delete of each copy.
type leftovers struct {
	mu      sync.Mutex
	failed  map[meta.SegmentID]string // the last failed delete, by copy
	gen     uint64                    // changes with failed
	version uint64                    // store.CopiesVersion of list
	index   uint64                    // view index of list
	at      uint64                    // gen of list
	valid   bool
	list    []heal.Leftover // shared with the reports: never modified
}

// report returns the leftovers of db at view (self's copies outside
// their set), from the cache while nothing changed. The cost, when
// something did, is one pass over the store's list and one Tail per
// leftover.
func (l *leftovers) report(db *store.DB, view *meta.View, self meta.BrokerID) []heal.Leftover {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := db.CopiesVersion()
	if l.valid && l.version == v && l.index == view.Index() && l.at == l.gen {
		return l.list
	}
	var list []heal.Leftover
	for _, id := range db.List() {
		if seg, ok := view.Segment(id); ok && slices.Contains(seg.Replicas, self) {
			continue
		}
		t, err := db.Tail(id)
		if errors.Is(err, store.ErrUnknownCopy) {
			continue // deleted meanwhile
		}
		lf := heal.Leftover{Segment: id, Size: t.Size, Footer: t.Footer, DeleteErr: l.failed[id]}
		if err != nil && lf.DeleteErr == "" {
			lf.DeleteErr = err.Error() // unreadable: say why, it is not collected blindly
		}
		var r heal.ProbeReport
		r.AddLeftover(lf) // cuts a long error text
		list = append(list, r.Leftovers[0])
	}
	l.list, l.version, l.index, l.at, l.valid = list, v, view.Index(), l.gen, true
	return list
}

// deleted records the result of a delete of id: a failure's error text is
// reported with the copy until a delete of it succeeds.
func (l *leftovers) deleted(id meta.SegmentID, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, had := l.failed[id]
	switch {
	case err != nil:
		if l.failed == nil {
			l.failed = map[meta.SegmentID]string{}
		}
		l.failed[id] = err.Error()
	case had:
		delete(l.failed, id)
	default:
		return
	}
	l.gen++
}

// deleteLeftover deletes the local copy of a segment whose set, in this
// broker's metadata at the request's index or later, does not name it; it
// refuses (store.ErrInvalid: nothing was touched) when the set names it or
// the segment is active with this broker in its set. A missing copy is not
// an error. A failed delete is remembered with its error text.
func (s *server) deleteLeftover(ctx context.Context, body []byte) (any, error) {
	var req DeleteLeftoverRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := req.Segment.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeDeadline)
	defer cancel()
	view, err := s.viewAt(ctx, req.Index)
	if err != nil {
		return nil, err
	}
	if seg, ok := view.Segment(req.Segment); ok && slices.Contains(seg.Replicas, s.self) {
		return nil, fmt.Errorf("%w: delete leftover %s: broker %d is in its replica set %v at index %d (asked at %d): not a leftover",
			store.ErrInvalid, req.Segment, s.self, seg.Replicas, view.Index(), req.Index)
	}
	err = s.db.Delete(req.Segment)
	if errors.Is(err, store.ErrUnknownCopy) {
		err = nil
	}
	s.left.deleted(req.Segment, err)
	if err != nil {
		s.log.Warn().Err(err).Str("segment", string(req.Segment)).Msg("leftover copy: delete failed")
		return nil, fmt.Errorf("delete leftover %s on broker %d: %w", req.Segment, s.self, err)
	}
	if s.scrub != nil {
		if err := s.scrub.clear(req.Segment); err != nil {
			return nil, err
		}
	}
	s.log.Info().Str("segment", string(req.Segment)).Uint64("index", view.Index()).Msg("leftover copy deleted")
	return empty{}, nil
}

// DeleteLeftover implements pass.LeftoverDeleter.
func (c *Client) DeleteLeftover(ctx context.Context, broker meta.BrokerID, seg meta.SegmentID, index uint64) error {
	return c.do(ctx, broker, pathDeleteLeftover, DeleteLeftoverRequest{Segment: seg, Index: index}, nil, true)
}

// setLeftoverGauge sets g, a gauge vector labelled by cause (as
// malachi_heal_leftover_copies{cause}), to rep's leftover copies of each
// cause, every cause set (zero when there is none).
func setLeftoverGauge(rep *heal.Report, g *prometheus.GaugeVec) {
	var n [len(heal.Causes) + 1]int
	for _, lg := range rep.Leftovers {
		if int(lg.Cause) < len(n) {
			n[lg.Cause] += lg.Copies
		}
	}
	for _, c := range heal.Causes {
		g.WithLabelValues(c.String()).Set(float64(n[c]))
	}
}
