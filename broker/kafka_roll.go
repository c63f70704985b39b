package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	if err := l.roll(ctx, act, true); err != nil {
		return fmt.Errorf("%w: %s/%d: roll: %w", kafka.ErrNotLeader, l.topic, l.index, err)
	}
	return nil
}

// roll seals act at its last acknowledged frame on every replica that
// answers (a failed replica stays in the sealed set, for heal to replace)
// and creates the next segment: on the same replicas when keep and all
// answered, so this broker keeps leading, else placed by the control
// plane's leader. When the next segment is not led here, l steps down.
func (l *partLog) roll(ctx context.Context, act chainSeg, keep bool) error {
	seg := meta.Segment{ID: act.id, StartOffset: act.start, Replicas: act.replicas}
	sealed, on, err := sealAtCommon(ctx, l.b, seg, act.bytes)
	if err != nil {
		l.stepDown()
		return err
	}
	topic, p, seq, _ := meta.ParsePartitionSegment(act.id)
	req := admin.CreateRequest{ID: meta.PartitionSegmentID(topic, p, seq+1), StartOffset: sealed.EndOffset()}
	if keep && len(on) == len(act.replicas) {
		req.Replicas = act.replicas
	}
	next, err := l.b.create(ctx, req)
	if err != nil && req.Replicas != nil {
		req.Replicas = nil
		next, err = l.b.create(ctx, req)
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

// sealAtCommon seals the active segment seg on every replica that
// answers, at byte at (the leader's last acknowledged frame) or, with at
// < 0, at the least durable end among them (every acknowledged frame is on
// every replica, so none is lost), then commits SealSegment. A replica
// that does not answer keeps its copy unsealed and stays in the replica
// set: heal replaces it. It returns the segment as sealed and the
// replicas that sealed it.
func sealAtCommon(ctx context.Context, b *Server, seg meta.Segment, at int64) (meta.Segment, []meta.BrokerID, error) {
	v := b.node.View()
	type replica struct {
		id   meta.BrokerID
		addr string
	}
	var rs []replica
	for _, r := range seg.Replicas {
		if br, ok := v.Broker(r); ok {
			rs = append(rs, replica{r, br.AdminAddr})
		}
	}
	call := func(r replica, op string, req, resp any) error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return b.post(cctx, r.addr, "/v1/internal/copies/"+string(seg.ID)+"/"+op, req, resp)
	}
	if at < 0 {
		var live []replica
		for _, r := range rs {
			var end endResponse
			if err := call(r, "end", struct{}{}, &end); err != nil {
				continue
			}
			if at < 0 || end.Bytes < at {
				at = end.Bytes
			}
			live = append(live, r)
		}
		if len(live) == 0 {
			return seg, nil, fmt.Errorf("seal %s: no replica of %v answers", seg.ID, seg.Replicas)
		}
		rs = live
	}
	var got []sealResult
	var on []meta.BrokerID
	var errs []error
	for _, r := range rs {
		var s sealResult
		if err := call(r, "seal_at", sealAtRequest{Start: seg.StartOffset, Bytes: at}, &s); err != nil {
			errs = append(errs, fmt.Errorf("broker %d: %w", r.id, err))
			continue
		}
		got, on = append(got, s), append(on, r.id)
	}
	if len(got) == 0 {
		return seg, nil, fmt.Errorf("seal %s at byte %d: %w", seg.ID, at, errors.Join(errs...))
	}
	s := got[0]
	for _, o := range got[1:] {
		if o != s {
			return seg, on, fmt.Errorf("%w: seal %s at byte %d: replicas sealed %+v and %+v", errDisagree, seg.ID, at, s, o)
		}
	}
	if _, err := b.apply(ctx, meta.SealSegment{ID: seg.ID, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum}); err != nil {
		return seg, on, err
	}
	seg.Length, seg.ByteSize, seg.Checksum, seg.Sealed = s.Length, s.ByteSize, s.Checksum, true
	return seg, on, nil
}
