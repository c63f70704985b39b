package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/malachi-log/malachi/kafka"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/store"
)

// partLog is the kafka.Log of a partition this broker leads. Each Kafka
// record batch is one frame of the partition's active segment, written
// and synced on every replica before Append returns (acks=all); store
// offsets count frames, contiguous across the chain. The index idx maps
// each stored batch to its Kafka offsets and its place in a segment; it
// is built from the copies' frames when the Log opens and grown by
// Append.
//
// INVARIANT: every batch in idx is on every replica of its segment,
// synced; hw is the end of the last one. Protected by mu; Append calls
// are serialized by the listener, and only Append changes chain (under
// mu, after its I/O).
type partLog struct {
	b     *Server
	topic string
	index int32

	mu      sync.Mutex
	chain   []chainSeg
	idx     []batchRef
	hw      int64
	wake    chan struct{} // closed and replaced when hw grows
	born    time.Time     // when the active segment took its first batch here
	stepped bool          // no longer the leader: Partition opens a new Log
	// round is how long the last acknowledged replicate round took, from
	// sending its frame to the last replica's answer (the local append
	// included); 0 before the first. The next frame carries it to the
	// followers (waited_ns), which count it as client latency, so that a
	// follower no client talks to paces the catch-up it receives by what
	// this partition's clients wait on. Chosen over the leader's client
	// p99 of the last second: an acks=all Produce answers when its round
	// does, so the round is the wait replication adds to this partition's
	// clients, per partition and free to measure, where the p99 mixes in
	// every partition the broker leads and its Fetches, lags by its
	// window and costs a sort per frame. A failed round is not recorded:
	// its length is a dead or hung replica's grace, not load.
	round time.Duration
}

var _ kafka.AppendReader = (*partLog)(nil)

// chainSeg is one segment of the partition's chain as this Log knows it.
type chainSeg struct {
	id       meta.SegmentID
	start    uint64 // store offset (frames) of its first frame
	frames   uint64
	bytes    int64
	replicas []meta.BrokerID
	sealed   bool
}

// batchRef is one stored batch: its Kafka offsets [base, end) and where
// its frame's payload is.
type batchRef struct {
	base, end int64
	seg       int   // position in chain
	pos       int64 // byte of the payload in the segment's copy
	size      int32
}

// leading reports whether l still leads its partition.
func (l *partLog) leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.stepped
}

// openPartLog builds the Log of a partition whose last segment (chain's
// last, active) names this broker first, reading every segment's frames.
// An active segment that already holds frames (an earlier leader's, here
// or on another replica: takeEmpty) is not taken: it is sealed at the
// longest end its replicas hold and the partition waits for its next
// segment (an error).
func openPartLog(b *Server, topic string, index int32, chain []*meta.Segment) (*partLog, error) {
	l := &partLog{b: b, topic: topic, index: index, wake: make(chan struct{}), born: time.Now()}
	for i, s := range chain {
		cs := chainSeg{id: s.ID, start: s.StartOffset, frames: s.Length, bytes: s.ByteSize, replicas: slices.Clone(s.Replicas), sealed: s.Sealed}
		if !s.Sealed {
			end, err := b.db.DurableEnd(s.ID)
			if errors.Is(err, store.ErrUnknownCopy) {
				// This broker lost its copy (a data directory emptied or
				// replaced, then restarted): it cannot lead the segment, and
				// answering it would hold the partition forever, since the
				// other replicas see it answer and never take over. Every
				// acknowledged frame is on the others: seal there.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, _, serr := sealActive(ctx, b, *s, -1, []meta.BrokerID{b.self})
				cancel()
				return nil, fmt.Errorf("active segment %s: this broker holds no copy of it (%w): sealed at the longest end the other replicas hold (%v); its next segment leads", s.ID, err, serr)
			}
			if err != nil {
				return nil, fmt.Errorf("active segment %s: %w", s.ID, err)
			}
			if end.Frames > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, _, err := sealActive(ctx, b, *s, -1, nil)
				cancel()
				return nil, fmt.Errorf("active segment %s holds %d frames from an earlier leader: sealed at the longest end its replicas hold (%v); its next segment leads", s.ID, end.Frames, err)
			}
			if err := takeEmpty(b, *s); err != nil {
				return nil, err
			}
			cs.frames, cs.bytes = 0, 0
		}
		l.chain = append(l.chain, cs)
		if err := l.indexSegment(i); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// takeEmpty checks that the active segment s, whose copy here holds no
// frame, holds none on its other replicas either, before this broker
// appends its first frame at the segment's start. A replica that holds
// frames means this broker's copy fell behind what it wrote (its disk
// lost synced writes, or was put back from an older image): s is then
// sealed at the longest end its replicas hold, and the error says so
// (its next segment leads). No other replica answering is an error too:
// this broker cannot tell whether its copy fell behind, and the client
// retries. A replica that holds no copy of s holds no frame of it.
func takeEmpty(b *Server, s meta.Segment) error {
	rs := registeredReplicas(b, s, []meta.BrokerID{b.self})
	if len(rs) == 0 {
		return nil // the only replica
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends := make([]endResponse, len(rs))
	errs := eachReplica(rs, func(i int, r sealReplica) error { return callCopy(ctx, b, r, s.ID, "end", struct{}{}, &ends[i]) })
	answered := false
	for i, r := range rs {
		switch {
		case errors.Is(errs[i], store.ErrUnknownCopy):
			answered = true
		case errs[i] != nil:
		case ends[i].Frames > 0 || ends[i].Footer:
			_, _, err := sealActive(ctx, b, s, -1, nil)
			return fmt.Errorf("active segment %s: this broker's copy holds no frame, broker %d's holds %d: sealed at the longest end its replicas hold (%v); its next segment leads", s.ID, r.id, ends[i].Frames, err)
		default:
			answered = true
		}
	}
	if !answered {
		return fmt.Errorf("active segment %s: this broker's copy holds no frame and no other replica answers whether its own holds any: %w", s.ID, errors.Join(errs...))
	}
	return nil
}

// indexSegment reads the frames of chain[i] and appends its batches to
// idx. The copy is read here when this broker holds it, else from a
// replica.
func (l *partLog) indexSegment(i int) error {
	cs := l.chain[i]
	if cs.bytes == 0 {
		return nil
	}
	data, err := l.readSegment(cs, 0, cs.bytes)
	if err != nil {
		return err
	}
	for pos := int64(0); pos < cs.bytes; {
		if cs.bytes-pos < store.FrameHeaderSize {
			return fmt.Errorf("segment %s: a torn frame header at byte %d of %d", cs.id, pos, cs.bytes)
		}
		n := int64(binary.LittleEndian.Uint32(data[pos+4 : pos+8]))
		payload := data[pos+store.FrameHeaderSize : pos+store.FrameHeaderSize+n]
		h, _, err := kafka.ParseBatch(payload)
		if err != nil {
			return fmt.Errorf("segment %s: frame at byte %d: %w", cs.id, pos, err)
		}
		if h.BaseOffset != l.hw {
			return fmt.Errorf("segment %s: frame at byte %d holds Kafka offset %d, want %d", cs.id, pos, h.BaseOffset, l.hw)
		}
		end := h.BaseOffset + int64(h.Records())
		l.idx = append(l.idx, batchRef{base: h.BaseOffset, end: end, seg: i, pos: pos + store.FrameHeaderSize, size: int32(n)})
		l.hw = end
		pos += store.FrameHeaderSize + n
	}
	return nil
}

// readSegment returns bytes [from, to) of a copy of cs: the local one, or
// one of a replica's.
func (l *partLog) readSegment(cs chainSeg, from, to int64) ([]byte, error) {
	return l.appendSegment(nil, cs, from, to)
}

// appendSegment appends bytes [from, to) of a copy of cs to dst: from the
// local one, or one of a replica's.
func (l *partLog) appendSegment(dst []byte, cs chainSeg, from, to int64) ([]byte, error) {
	n := len(dst)
	dst = slices.Grow(dst, int(to-from))[:n+int(to-from)]
	got, err := l.b.db.ReadAt(cs.id, dst[n:], from)
	if err == nil && int64(got) == to-from {
		return dst, nil
	}
	dst = dst[:n]
	v := l.b.node.View()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range cs.replicas {
		br, ok := v.Broker(r)
		if r == l.b.self || !ok {
			continue
		}
		var resp readResponse
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := l.b.post(ctx, br.AdminAddr, "/v1/internal/copies/"+string(cs.id)+"/read", readRequest{From: from, Len: to - from}, &resp)
		cancel()
		if err == nil && int64(len(resp.Data)) == to-from {
			return append(dst, resp.Data...), nil
		}
		errs = append(errs, fmt.Errorf("broker %d: %w", r, err))
	}
	return nil, fmt.Errorf("read %s bytes %d..%d: %w", cs.id, from, to, errors.Join(errs...))
}

// Offsets implements kafka.Log.
func (l *partLog) Offsets() (int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return 0, l.hw
}

// Wait implements kafka.Log.
func (l *partLog) Wait(offset int64) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hw > offset {
		done := make(chan struct{})
		close(done)
		return done
	}
	return l.wake
}

// Read implements kafka.Log: whole batches from the one holding offset.
func (l *partLog) Read(offset int64, maxBytes int32) ([]byte, error) {
	return l.AppendRead(nil, offset, maxBytes)
}

// AppendRead implements kafka.AppendReader: Read into dst.
func (l *partLog) AppendRead(dst []byte, offset int64, maxBytes int32) ([]byte, error) {
	l.mu.Lock()
	hw := l.hw
	if offset < 0 || offset > hw {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %d outside [0, %d]", kafka.ErrOffsetOutOfRange, offset, hw)
	}
	i, _ := slices.BinarySearchFunc(l.idx, offset, func(r batchRef, off int64) int {
		switch {
		case r.end <= off:
			return -1
		case r.base > off:
			return 1
		}
		return 0
	})
	var refs []batchRef
	total := int64(0)
	for ; i < len(l.idx); i++ {
		r := l.idx[i]
		if len(refs) > 0 && (total+int64(r.size) > int64(maxBytes) || r.seg != refs[0].seg) {
			break
		}
		refs = append(refs, r)
		total += int64(r.size)
	}
	var cs chainSeg
	if len(refs) > 0 {
		cs = l.chain[refs[0].seg]
	}
	l.mu.Unlock()
	if len(refs) == 0 {
		return dst, nil
	}
	// The batches of one segment are consecutive frames: read the span
	// once, then drop the frame headers between them in place (each batch
	// moves toward the start by the headers before it).
	first, last := refs[0], refs[len(refs)-1]
	base := len(dst)
	span, err := l.appendSegment(dst, cs, first.pos, last.pos+int64(last.size))
	if err != nil {
		return dst, err
	}
	n := base
	for _, r := range refs {
		from := int64(base) + r.pos - first.pos
		n += copy(span[n:], span[from:from+int64(r.size)])
	}
	return span[:n], nil
}

// Append implements kafka.Log: the batch as one frame of the active
// segment, on every replica, synced. A failed write seals the segment at
// the last acknowledged frame on the replicas that answer and rolls the
// partition; the error (NOT_LEADER_OR_FOLLOWER) makes the client refresh
// its metadata and retry, stored once by its idempotent sequence.
func (l *partLog) Append(ctx context.Context, batch []byte, records int32) (int64, error) {
	if err := l.maybeRoll(ctx); err != nil {
		return 0, err
	}
	l.mu.Lock()
	if l.stepped {
		l.mu.Unlock()
		return 0, fmt.Errorf("%w: %s/%d", kafka.ErrNotLeader, l.topic, l.index)
	}
	act := l.chain[len(l.chain)-1]
	base, waited := l.hw, l.round
	l.mu.Unlock()

	kafka.SetBaseOffset(batch, base)
	foff := act.start + act.frames
	began := time.Now()
	if failed, err := l.replicate(ctx, act, foff, batch, waited); err != nil {
		l.b.log.Warn().Err(err).Str("segment", string(act.id)).Any("failed", failed).Msg("kafka: append failed; sealing the segment at its last acknowledged frame and rolling onto other replicas")
		rctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if rerr := l.roll(rctx, act, false, failed); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return 0, fmt.Errorf("%w: %s/%d: %w", kafka.ErrNotLeader, l.topic, l.index, err)
	}
	took := time.Since(began)
	l.mu.Lock()
	l.round = took
	last := &l.chain[len(l.chain)-1]
	if last.frames == 0 {
		l.born = time.Now()
	}
	l.idx = append(l.idx, batchRef{base: base, end: base + int64(records), seg: len(l.chain) - 1, pos: last.bytes + store.FrameHeaderSize, size: int32(len(batch))})
	last.frames++
	last.bytes += store.FrameHeaderSize + int64(len(batch))
	l.hw = base + int64(records)
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
	if h := l.b.holds; h != nil { // fault_injection only
		h.hold(l.b.bgCtx, l.b, HeldBatch{Topic: l.topic, Partition: l.index, BaseOffset: base, Records: records})
	}
	return base, nil
}

// replicate writes batch as the frame at store offset foff of act on
// every replica (here through the store, the others by the internal frame
// route), each syncing before it answers. A follower gets the heal grace
// to answer (heal.grace: what Kafka's replica.lag.time.max.ms bounds),
// so a paused or partitioned follower holds the partition's clients no
// longer than a dead one would hold heal. failed names the replicas whose
// own write failed (none when ctx, the client's request, ended first):
// the roll that follows seals without waiting on them and places the
// next segment elsewhere. waited, when above 0, is sent to the followers
// as what the partition's clients waited on its previous round (round).
func (l *partLog) replicate(ctx context.Context, act chainSeg, foff uint64, batch []byte, waited time.Duration) (failed []meta.BrokerID, err error) {
	b := l.b
	v := b.node.View()
	errs := make([]error, len(act.replicas))
	path := "/v1/internal/copies/" + string(act.id) + "/frame?start=" + strconv.FormatUint(act.start, 10) + "&offset=" + strconv.FormatUint(foff, 10)
	if waited > 0 {
		path += "&waited_ns=" + strconv.FormatInt(int64(waited), 10)
	}
	var wg sync.WaitGroup
	for i, r := range act.replicas {
		if r == b.self {
			wg.Go(func() { errs[i] = appendFrame(b, act.id, act.start, foff, batch) })
			continue
		}
		br, ok := v.Broker(r)
		if !ok {
			errs[i] = fmt.Errorf("replica %d of %s is not registered", r, act.id)
			continue
		}
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, b.cfg.Heal.Grace)
			defer cancel()
			if err := b.post(rctx, br.AdminAddr, path, rpc.Raw(batch), nil); err != nil {
				errs[i] = fmt.Errorf("replica %d: %w", r, err)
			}
		})
	}
	wg.Wait()
	for i, e := range errs {
		if e != nil && ctx.Err() == nil {
			failed = append(failed, act.replicas[i])
		}
	}
	return failed, errors.Join(errs...)
}
