package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/kafka"
	"github.com/malachi-log/malachi/meta"
)

// A partition's roll: seal its active segment at the last acknowledged
// frame on the replicas that answer, then create the next segment.

// maybeRoll rolls the active segment once it holds segment_bytes, or
// segment_ms after its first batch.
func (l *partLog) maybeRoll(ctx context.Context) error {
	l.mu.Lock()
	act := l.chain[len(l.chain)-1]
	ms := l.b.cfg.Kafka.SegmentMS
	due := act.frames > 0 && (act.bytes >= l.b.cfg.Kafka.SegmentBytes || ms > 0 && time.Since(l.born) >= time.Duration(ms)*time.Millisecond)
	l.mu.Unlock()
	if !due {
		return nil
	}
	if err := l.roll(ctx, act, true, nil); err != nil {
		return fmt.Errorf("%w: %s/%d: roll: %w", kafka.ErrNotLeader, l.topic, l.index, err)
	}
	return nil
}

// roll seals act at its last acknowledged frame on every replica that
// answers (a failed replica stays in the sealed set, for heal to replace)
// and creates the next segment: on the same replicas when keep and all
// answered, so this broker keeps leading, else placed by the control
// plane's leader without the replicas in failed (those whose write of
// the last frame failed: the seal does not wait on them either). When
// the next segment is not led here, l steps down.
func (l *partLog) roll(ctx context.Context, act chainSeg, keep bool, failed []meta.BrokerID) error {
	seg := meta.Segment{ID: act.id, StartOffset: act.start, Replicas: act.replicas}
	sealed, on, err := sealActive(ctx, l.b, seg, act.bytes, failed)
	if err != nil {
		l.stepDown()
		return err
	}
	topic, p, seq, _ := meta.ParsePartitionSegment(act.id)
	req := admin.CreateRequest{ID: meta.PartitionSegmentID(topic, p, seq+1), StartOffset: sealed.EndOffset(), Exclude: failed}
	if keep && len(on) == len(act.replicas) {
		req.Replicas = act.replicas
	}
	next, err := l.b.create(ctx, req)
	if err != nil && req.Replicas != nil {
		req.Replicas = nil
		next, err = l.b.create(ctx, req)
	}
	if err == nil {
		// The NOT_LEADER answer that follows a roll names the partition's
		// new leader (Produce v10) from this broker's view: wait for the
		// view to hold the next segment, or the hint names the old leader
		// and the client waits for its next metadata refresh instead.
		if werr := l.b.node.AwaitView(ctx, func(v *meta.View) bool { _, ok := v.Segment(next.ID); return ok }); werr != nil {
			l.b.log.Debug().Err(werr).Str("segment", string(next.ID)).Msg("kafka: the roll's next segment is not in this broker's view yet")
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.chain[len(l.chain)-1].sealed = true
	if err != nil || len(next.Replicas) == 0 || next.Replicas[0] != l.b.self {
		l.stepped = true
		return err
	}
	l.chain = append(l.chain, chainSeg{id: next.ID, start: next.StartOffset, replicas: slices.Clone(next.Replicas)})
	l.born = time.Now()
	return nil
}

func (l *partLog) stepDown() {
	l.mu.Lock()
	l.stepped = true
	l.mu.Unlock()
}

// sealActive seals the active segment seg on every replica that
// answers, at byte at (the leader's last acknowledged frame) or, with at
// < 0, at the longest durable end among them after fencing each
// (fenceReplicas), then commits SealSegment. The replicas are asked at
// once, so one that does not answer costs one call's timeout, and those
// in skip are not asked (their write just failed). A replica that does
// not answer, is skipped, or ends short of the seal keeps its copy
// unsealed and stays in the replica set: heal completes or replaces it.
// It returns the segment as sealed and the replicas that sealed it.
func sealActive(ctx context.Context, b *Server, seg meta.Segment, at int64, skip []meta.BrokerID) (meta.Segment, []meta.BrokerID, error) {
	rs := registeredReplicas(b, seg, skip)
	fenced := at < 0
	if fenced {
		var err error
		if at, rs, err = fenceReplicas(ctx, b, seg, rs); err != nil {
			return seg, nil, err
		}
	}
	return sealReplicasAt(ctx, b, seg, rs, sealAtRequest{Start: seg.StartOffset, Bytes: at, Fenced: fenced}, skip)
}

// registeredReplicas is every replica of seg registered in this broker's view,
// but those in skip.
func registeredReplicas(b *Server, seg meta.Segment, skip []meta.BrokerID) []sealReplica {
	v := b.node.View()
	var rs []sealReplica
	for _, r := range seg.Replicas {
		if br, ok := v.Broker(r); ok && !slices.Contains(skip, r) {
			rs = append(rs, sealReplica{r, br.AdminAddr})
		}
	}
	return rs
}

// fenceReplicas fences the copy of seg on each of rs (it refuses every
// frame from then on) and returns where to seal, and those that answered:
// the end of a copy sealed already (an earlier seal chose it), else the
// longest durable end among them. Only the segment's leader writes its
// frames, each at the offset after the last on every replica, so the
// copies are prefixes of one another: the longest holds every frame any
// leader acknowledged (one was acknowledged only once every replica wrote
// it) even when another copy fell short of what it wrote (its disk lost
// synced writes, or it was put back from an older image), and a frame it
// holds past the acknowledged ones is one the client retries, answered
// from the log by its idempotent sequence. The fence keeps a leader that
// was only paused from having a frame acknowledged after the ends are
// read: every fenced replica refuses it. A shorter copy refuses the seal
// and is left to heal.
func fenceReplicas(ctx context.Context, b *Server, seg meta.Segment, rs []sealReplica) (int64, []sealReplica, error) {
	ends := make([]endResponse, len(rs))
	errs := eachReplica(rs, func(i int, r sealReplica) error { return callCopy(ctx, b, r, seg.ID, "fence", struct{}{}, &ends[i]) })
	at, sealed := int64(-1), false
	var live []sealReplica
	for i, r := range rs {
		if errs[i] != nil {
			continue
		}
		live = append(live, r)
		switch e := ends[i]; {
		case sealed:
		case e.Footer:
			at, sealed = e.Bytes, true
		case e.Bytes > at:
			at = e.Bytes
		}
	}
	if len(live) == 0 {
		return -1, nil, fmt.Errorf("seal %s: no replica of %v answers its fence: %w", seg.ID, seg.Replicas, errors.Join(errs...))
	}
	return at, live, nil
}

// sealReplicasAt seals the copy of seg on each of rs as req asks and
// commits SealSegment once they agree.
func sealReplicasAt(ctx context.Context, b *Server, seg meta.Segment, rs []sealReplica, req sealAtRequest, skip []meta.BrokerID) (meta.Segment, []meta.BrokerID, error) {
	results := make([]sealResult, len(rs))
	errs := eachReplica(rs, func(i int, r sealReplica) error {
		return callCopy(ctx, b, r, seg.ID, "seal_at", req, &results[i])
	})
	var got []sealResult
	var on []meta.BrokerID
	var failed []error
	for i, r := range rs {
		if errs[i] != nil {
			failed = append(failed, fmt.Errorf("broker %d: %w", r.id, errs[i]))
			continue
		}
		got, on = append(got, results[i]), append(on, r.id)
	}
	if len(got) == 0 {
		return seg, nil, fmt.Errorf("seal %s at byte %d on %v (skipping %v): %w", seg.ID, req.Bytes, seg.Replicas, skip, errors.Join(failed...))
	}
	s := got[0]
	var err error
	for _, o := range got[1:] {
		if o != s {
			err = fmt.Errorf("%w: seal %s at byte %d: replicas sealed %+v and %+v", errDisagree, seg.ID, req.Bytes, s, o)
		}
	}
	if err == nil {
		_, err = b.apply(ctx, meta.SealSegment{ID: seg.ID, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum})
	}
	if err != nil {
		unsealReplicas(ctx, b, seg, rs, errs, results)
		return seg, on, err
	}
	seg.Length, seg.ByteSize, seg.Checksum, seg.Sealed = s.Length, s.ByteSize, s.Checksum, true
	return seg, on, nil
}

// unsealReplicas takes back the seal of each copy of rs that sealed (errs
// nil) at results' byte size when SealSegment was not committed: the
// footer comes off, the frames stay, and the copy stays fenced (it takes
// no frame). Otherwise a copy would keep a seal the metadata may never
// record: a broker cut off from the control plane (a takeover seen only
// by itself, a leader's roll) sealed its own copy, another seal was
// committed at a different end, and the copy's own seal then refused
// every settle for ever (a seal conflict, which heal leaves to the
// operator). A copy with no footer is settled to whatever seal the
// metadata records. Failures are logged: the copy keeps its seal.
func unsealReplicas(ctx context.Context, b *Server, seg meta.Segment, rs []sealReplica, errs []error, results []sealResult) {
	ctx = context.WithoutCancel(ctx)
	uerrs := eachReplica(rs, func(i int, r sealReplica) error {
		if errs[i] != nil {
			return nil
		}
		return callCopy(ctx, b, r, seg.ID, "unseal", sealAtRequest{Start: seg.StartOffset, Bytes: results[i].ByteSize}, nil)
	})
	if err := errors.Join(uerrs...); err != nil {
		b.log.Warn().Err(err).Str("segment", string(seg.ID)).Msg("kafka: a seal not recorded in the metadata could not be taken back; heal reports the copy's seal conflict")
	}
}

// callCopy posts req to replica r's copy route op of segment id, with a
// timeout of its own.
func callCopy(ctx context.Context, b *Server, r sealReplica, id meta.SegmentID, op string, req, resp any) error {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return b.post(cctx, r.addr, "/v1/internal/copies/"+string(id)+"/"+op, req, resp)
}

// sealReplica is a replica a seal asks, by its admin address.
type sealReplica struct {
	id   meta.BrokerID
	addr string
}

// eachReplica runs f on every replica at once and returns its errors in
// rs's order.
func eachReplica(rs []sealReplica, f func(i int, r sealReplica) error) []error {
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() { errs[i] = f(i, r) })
	}
	wg.Wait()
	return errs
}
