package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/catchup"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/retry"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/probe"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/store"
)

// statter stats a batch of copies, each relative to its shard directory,
// without opening any of them (probe.Prober behind an adapter). Once its
// arguments are warm it allocates nothing per copy.
type statter interface {
	StatBatch(ctx context.Context, b *probe.Batch, out []probe.Result) error
	Engine() string
}

// fetcher brings the local copy of a sealed segment up to date from the
// catch-up server at addr, resuming at the local durable end, and commits
// it only once it verifies (catchup.Client over the local store).
type fetcher interface {
	Fetch(ctx context.Context, addr string, seg meta.Segment, ticket []byte) (catchup.Result, error)
}

// server is the replication server every enabled instance runs: it answers
// the leader's coordinator about and on behalf of the local store.
type server struct {
	self    meta.BrokerID
	db      *store.DB
	cp      ControlPlane
	stat    statter
	fetch   fetcher
	cfg     Config
	log     zerolog.Logger
	metrics *metrics
	scrub   *scrubber // nil when scrubbing is off
	// scratch is the probe's memory, kept from probe to probe under
	// scratchMu (takeScratch).
	scratchMu sync.Mutex
	scratch   *probeScratch
	// left are the leftover copies the probe reports (leftover.go).
	left leftovers
}

// routes registers the RPCs on mux, for brokers only (rpcs authenticates
// and authorizes every request before its handler runs).
func (s *server) routes(mux *http.ServeMux, rpcs *rpc.Server) {
	for path, h := range map[string]handler{
		pathProbe:          s.probe,
		pathBackfill:       s.backfill,
		pathSettle:         s.settle,
		pathConfirm:        s.confirm,
		pathDelete:         s.delete,
		pathLatched:        s.latched,
		pathDeleteLeftover: s.deleteLeftover,
	} {
		name := path[strings.LastIndexByte(path, '/')+1:]
		obs := s.metrics.rpcSeconds.WithLabelValues(name)
		rpcs.Handle(mux, "POST "+path, rpc.Brokers, func(ctx context.Context, r *rpc.Request) (any, error) {
			start := time.Now()
			defer func() { obs.Observe(time.Since(start).Seconds()) }()
			return h(ctx, r.Body)
		})
	}
}

// viewAt waits until the local metadata has applied index, bounded by
// ctx, and returns it. It fails with ErrLagging.
func (s *server) viewAt(ctx context.Context, index uint64) (*meta.View, error) {
	bo := retry.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}
	for {
		v := s.cp.View()
		if v.Index() >= index {
			return v, nil
		}
		if err := bo.Wait(ctx); err != nil {
			return nil, fmt.Errorf("%w: broker %d at index %d, asked for %d: %w", ErrLagging, s.self, v.Index(), index, err)
		}
	}
}

// probeScratch is the probe's memory, reused from probe to probe so that
// a probe allocates nothing per copy once warm.
//
// known caches the store's confirmations in the order the view lists the
// broker's copies, while the store's ConfirmationsVersion stays version:
// a steady probe reads them in sequence, where a lookup per copy in the
// store's map of 10^5 or more missed the cache on most copies. An entry
// whose segment is not the one at its position is looked up again.
type probeScratch struct {
	segs      []*meta.Segment // the copies stat'ed, parallel to batch
	known     []confirmation  // their confirmations, parallel to segs
	version   uint64
	versionOK bool
	dirs      store.StatDirs // the shard directories, opened for this probe
	batch     probe.Batch
	out       []probe.Result
}

// confirmation is the store's confirmed identity of a copy, if any.
type confirmation struct {
	id meta.SegmentID
	fi store.FileIdentity
	ok bool
}

// probe stats every sealed copy assigned to this broker in one batch, each
// relative to its shard directory, and reports the facts of the copies
// that are not intact (heal.ProbeReport.Add decides which).
func (s *server) probe(ctx context.Context, body []byte) (any, error) {
	var req ProbeRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	start := time.Now()
	// One deadline for waiting on the metadata and for the stat batch: the
	// caller's, when it sent one, within heal.probe_deadline.
	deadline := s.cfg.ProbeDeadline
	if req.DeadlineMillis > 0 && req.DeadlineMillis < deadline.Milliseconds() {
		// Compared in milliseconds: a huge deadline_ms would overflow a
		// Duration and come out negative.
		deadline = time.Duration(req.DeadlineMillis) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	// A broker whose metadata lags answers so (ErrLagging) within half the
	// deadline, while the caller still waits: it is up, only behind.
	vctx, vcancel := context.WithTimeout(ctx, deadline/2)
	view, err := s.viewAt(vctx, req.Index)
	vcancel()
	if err != nil {
		return nil, err
	}
	rep, err := s.probeView(ctx, view)
	// auto may switch engines as it measures them: the metric follows.
	s.metrics.setEngine("probe", s.stat.Engine())
	if err != nil {
		return nil, err
	}
	s.metrics.probeSeconds.Observe(time.Since(start).Seconds())
	return rep, nil
}

// probeView probes this broker's sealed copies in view, within ctx.
func (s *server) probeView(ctx context.Context, view *meta.View) (heal.ProbeReport, error) {
	rep := heal.ProbeReport{Broker: s.self, Index: view.Index()}
	if err := s.db.LoadConfirmations(); err != nil {
		// Without its confirmations no copy of this broker can be told
		// intact this tick: the whole probe fails, and the broker's
		// copies are unknown rather than all overrun.
		return rep, fmt.Errorf("plugin: broker %d: probe: %w", s.self, err)
	}
	sc, release := s.takeScratch()
	defer release()
	if err := s.db.OpenStatDirs(&sc.dirs); err != nil {
		return rep, fmt.Errorf("plugin: broker %d: probe: %w", s.self, err)
	}
	defer sc.dirs.Close()
	version := s.db.ConfirmationsVersion()
	known := sc.known
	if !sc.versionOK || sc.version != version {
		known = nil // a confirmation changed: look every copy up again
	}
	sc.segs = sc.segs[:0]
	sc.batch.Reset()
	for seg := range view.HeldBy(s.self) {
		if !seg.Sealed {
			continue
		}
		rep.Copies++
		if latch := s.db.ProbeLatch(seg.ID); latch != nil {
			rep.Add(seg, heal.Fact{Segment: seg.ID, Flags: heal.FactLatched, Why: latch.Error()})
			continue
		}
		k := len(sc.segs)
		if k >= len(known) || known[k].id != seg.ID {
			_, fi, ok := s.db.ProbeFacts(seg.ID)
			c := confirmation{id: seg.ID, fi: fi, ok: ok}
			if k < len(sc.known) {
				sc.known[k] = c
			} else {
				sc.known = append(sc.known, c)
			}
		}
		sc.segs = append(sc.segs, seg)
		sc.batch.Add(sc.dirs.Target(seg.ID))
	}
	sc.known = sc.known[:len(sc.segs)]
	sc.version, sc.versionOK = version, true
	if cap(sc.out) < len(sc.segs) {
		sc.out = make([]probe.Result, len(sc.segs))
	}
	out := sc.out[:len(sc.segs)]
	if err := s.stat.StatBatch(ctx, &sc.batch, out); err != nil {
		return rep, fmt.Errorf("plugin: broker %d: probing %d copies: %w", s.self, len(sc.segs), err)
	}
	for i, seg := range sc.segs {
		rep.Add(seg, s.fact(seg, &out[i], sc.known[i]))
	}
	rep.Leftovers = s.left.report(s.db, view, s.self)
	return rep, nil
}

// takeScratch returns the server's probe memory and the func that gives
// it back, or a fresh one while another probe holds it (a pass and a dry
// run at once).
func (s *server) takeScratch() (*probeScratch, func()) {
	if s.scratchMu.TryLock() {
		if s.scratch == nil {
			s.scratch = new(probeScratch)
		}
		return s.scratch, s.scratchMu.Unlock
	}
	return new(probeScratch), func() {}
}

// fact is what the probe observed of the copy of seg: its stat r and the
// store's confirmation c.
func (s *server) fact(seg *meta.Segment, r *probe.Result, c confirmation) heal.Fact {
	f := heal.Fact{Segment: seg.ID}
	switch {
	case r.Err == nil:
	case errors.Is(r.Err, probe.ErrNotExist):
		f.Flags = heal.FactMissing
		return f
	case errors.Is(r.Err, probe.ErrDeadline):
		f.Flags = heal.FactTimedOut
		return f
	default:
		// A copy the broker cannot stat is in an unknown state this tick.
		s.log.Warn().Err(r.Err).Str("segment", string(seg.ID)).Msg("probe: stat failed")
		f.Flags, f.Why = heal.FactStatFailed, r.Err.Error()
		return f
	}
	f.Size, f.Dev, f.Ino = r.Size, r.Dev, r.Ino
	fi := store.FileIdentity{Dev: r.Dev, Ino: r.Ino, Size: r.Size}
	if s.scrub.corruptNow(seg.ID, r.Dev, r.Ino, r.Size) {
		f.Flags |= heal.FactCorrupt
	}
	if c.ok && c.fi == fi {
		f.Flags |= heal.FactConfirmed
	}
	return f
}

// backfill pulls the segment's bytes from the source into the local copy,
// resuming at the copy's durable end, and commits it only once it
// verifies. A copy that cannot be opened there fails before the source is
// read, wrapping heal.ErrNoDurableEnd (resumeSink).
func (s *server) backfill(ctx context.Context, body []byte) (any, error) {
	var req BackfillRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := req.Segment.Validate(); err != nil {
		return nil, err
	}
	if !req.Segment.Sealed {
		return nil, fmt.Errorf("%w: backfill %s: segment not sealed", store.ErrInvalid, req.Segment.ID)
	}
	if req.Source == s.self {
		return nil, fmt.Errorf("%w: backfill %s: source is the target (broker %d)", store.ErrInvalid, req.Segment.ID, s.self)
	}
	if req.Source == 0 {
		return nil, fmt.Errorf("%w: backfill %s: source broker id 0 is reserved", store.ErrInvalid, req.Segment.ID)
	}
	if host, port, err := net.SplitHostPort(req.SourceAddr); err != nil || host == "" || port == "" {
		return nil, fmt.Errorf("%w: backfill %s: source_addr %q: want host:port", store.ErrInvalid, req.Segment.ID, req.SourceAddr)
	}
	if s.cfg.BackfillTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.BackfillTimeout)
		defer cancel()
	}
	start := time.Now()
	res, err := s.fetch.Fetch(ctx, req.SourceAddr, req.Segment, req.Ticket)
	n := res.Received
	s.metrics.observeBackfillStages(res)
	if err != nil {
		s.metrics.backfillErrors.Inc()
		if sourceRefused(err) {
			return nil, fmt.Errorf("%w: backfill %s from broker %d at %s: %w", heal.ErrSourceRefused, req.Segment.ID, req.Source, req.SourceAddr, err)
		}
		return nil, fmt.Errorf("backfill %s from broker %d at %s: %w", req.Segment.ID, req.Source, req.SourceAddr, err)
	}
	s.metrics.backfillBytes.Add(float64(n))
	s.metrics.backfillSeconds.Observe(time.Since(start).Seconds())
	s.log.Info().Str("segment", string(req.Segment.ID)).Uint32("source", uint32(req.Source)).Int64("bytes", n).
		Float64("took_seconds", time.Since(start).Seconds()).Float64("wait_seconds", res.Wait.Seconds()).
		Float64("transfer_seconds", res.Transfer.Seconds()).Float64("commit_seconds", res.Commit.Seconds()).Msg("backfill committed")
	return BackfillResponse{Bytes: n}, nil
}

// delete removes the local copy; a missing copy is not an error.
func (s *server) delete(ctx context.Context, body []byte) (any, error) {
	var req DeleteRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := req.Segment.Validate(); err != nil {
		return nil, err
	}
	if err := s.db.Delete(req.Segment); err != nil && !errors.Is(err, store.ErrUnknownCopy) {
		s.left.deleted(req.Segment, err) // reported as a leftover, retried by heal
		return nil, err
	}
	s.left.deleted(req.Segment, nil)
	if s.scrub != nil {
		if err := s.scrub.clear(req.Segment); err != nil {
			return nil, err
		}
	}
	s.log.Info().Str("segment", string(req.Segment)).Msg("copy deleted")
	return empty{}, nil
}

// latched lists the latched local copies.
func (s *server) latched(ctx context.Context, body []byte) (any, error) {
	if err := decode(body, &empty{}); err != nil {
		return nil, err
	}
	var out LatchedResponse
	for _, id := range s.db.List() {
		if s.db.LatchErr(id) != nil {
			out.Latched = append(out.Latched, id)
		}
	}
	return out, nil
}

// sourceRefused reports whether a failed fetch says the source's copy is
// unusable (no copy, unsealed, latched, disagreeing with the metadata, or
// bytes that failed verification here), as opposed to a failure of this
// target or of the network.
func sourceRefused(err error) bool {
	for _, e := range []error{catchup.ErrUnknownSegment, catchup.ErrUnsealed, catchup.ErrLatched, catchup.ErrMismatch, catchup.ErrVerify} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
