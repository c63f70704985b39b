package broker

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/malachi-log/malachi/kafka"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/store"
)

// The internal copy routes of the Kafka log, between brokers (rpc.Brokers):
// a raw frame appended at an expected store offset, a seal at a byte and
// its undoing (unseal: the metadata did not record it), a fence (the copy
// takes no more frames) that answers the copy's durable end, that end
// without a fence (asked by a leader before its first frame of a
// segment), a read of a copy's bytes; and /v1/health for brokers. Every
// route but read takes the segment's lock on the replica, so none
// interleaves with another there.
func (b *Server) kafkaRoutes(srv *rpc.Server, mux *http.ServeMux) {
	for _, rt := range []struct {
		pattern string
		h       adminHandler
	}{
		{"POST /v1/internal/copies/{id}/frame", b.internalFrame},
		{"POST /v1/internal/copies/{id}/seal_at", b.internalSealAt},
		{"POST /v1/internal/copies/{id}/unseal", b.internalUnseal},
		{"POST /v1/internal/copies/{id}/fence", b.internalFence},
		{"POST /v1/internal/copies/{id}/end", b.internalEnd},
		{"POST /v1/internal/copies/{id}/read", b.internalRead},
		{"GET /v1/internal/health", b.health}, // the keeper's liveness check of a partition's leader
	} {
		srv.Handle(mux, rt.pattern, rpc.Brokers, adapt(rt.h))
	}
	b.groupRoutes(srv, mux) // kafka_groups.go
}

// frameRequest is the JSON body of POST /v1/internal/copies/{id}/frame:
// one frame's payload and the store offset it must land at. The leader
// sends the payload raw instead (rpc.Raw, Content-Type
// application/octet-stream) with the offset as ?offset=N: JSON carries
// bytes as base64, whose encoding and decoding took most of a replica's
// CPU at a few tens of MB/s (bench/README.md, Kafka).
// Start is the segment's start offset, which a copy reopened before its
// first frame cannot read from its file (store.DB.RestoreStart). Waited
// (?waited_ns=N) is how long the partition leader's previous replicate
// round of the partition took (partLog.round), what its acks=all clients
// waited on; absent or 0 (a first round, an older leader): unknown.
type frameRequest struct {
	Start   uint64        `json:"start"`
	Offset  uint64        `json:"offset"`
	Waited  time.Duration `json:"waited_ns,omitempty"`
	Payload []byte        `json:"payload"`
}

// parseFrameQuery reads a raw frame request's query (the payload is the
// body): start and offset, and waited_ns when present. A bad value is
// errBadRequest naming the parameter.
func parseFrameQuery(id meta.SegmentID, q url.Values) (frameRequest, error) {
	var req frameRequest
	for _, f := range []struct {
		name string
		v    *uint64
	}{{"start", &req.Start}, {"offset", &req.Offset}} {
		var err error
		if *f.v, err = strconv.ParseUint(q.Get(f.name), 10, 64); err != nil {
			return req, fmt.Errorf("%w: frame of %s: %s %q: %v", errBadRequest, id, f.name, q.Get(f.name), err)
		}
	}
	if q.Has("waited_ns") {
		ns, err := strconv.ParseInt(q.Get("waited_ns"), 10, 64)
		if err == nil && ns < 0 {
			err = errors.New("want at least 0")
		}
		if err != nil {
			return req, fmt.Errorf("%w: frame of %s: waited_ns %q: %v", errBadRequest, id, q.Get("waited_ns"), err)
		}
		req.Waited = time.Duration(ns)
	}
	return req, nil
}

// sealAtRequest asks a copy to cut at byte Bytes and seal there. Fenced
// says Bytes came from fencing the copies (a takeover, sealActive): the
// copy is cut only while its fence holds, since a copy whose fence a
// restart dropped may have taken, and a leader acknowledged, frames past
// Bytes since.
type sealAtRequest struct {
	Start  uint64 `json:"start"`
	Bytes  int64  `json:"bytes"`
	Fenced bool   `json:"fenced,omitempty"`
}

type endResponse struct {
	Bytes      int64  `json:"bytes"`
	Frames     uint64 `json:"frames"`
	NextOffset uint64 `json:"next_offset"`
	Footer     bool   `json:"footer"`
}

type readRequest struct {
	From int64 `json:"from"`
	Len  int64 `json:"len"`
}

type readResponse struct {
	Data []byte `json:"data"`
}

// appendFrame appends payload to the local copy of id, the segment
// starting at store offset start, as the frame at store offset want and
// syncs it. A copy whose next frame is not want refuses with errDisagree,
// and a fenced copy with errFenced; neither writes anything.
func appendFrame(b *Server, id meta.SegmentID, start, want uint64, payload []byte) error {
	unlock := b.lockSegment(id)
	defer unlock()
	if b.fenced(id) {
		return fmt.Errorf("%w: frame of %s at offset %d: a takeover is sealing the segment", errFenced, id, want)
	}
	if err := b.db.RestoreStart(id, start); err != nil {
		return err
	}
	if err := b.db.AppendAt(id, want, payload); err != nil {
		if errors.Is(err, store.ErrNotNext) {
			return fmt.Errorf("%w: frame of %s: %w", errDisagree, id, err)
		}
		return err
	}
	return b.db.Sync(id)
}

func (b *Server) internalFrame(r *http.Request, body []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	var req frameRequest
	if r.Header.Get("Content-Type") == rpc.RawContentType {
		if req, err = parseFrameQuery(id, r.URL.Query()); err != nil {
			return nil, err
		}
		req.Payload = body
	} else if err := decodeJSON(body, &req); err != nil {
		return nil, err
	} else if req.Waited < 0 {
		return nil, fmt.Errorf("%w: frame of %s: waited_ns %d: want at least 0", errBadRequest, id, req.Waited)
	}
	start := time.Now()
	if err := appendFrame(b, id, req.Start, req.Offset, req.Payload); err != nil {
		return nil, err
	}
	// The partition's clients (acks=all) wait on this append and on the
	// leader's whole round, whose previous length the leader sent: the
	// longer of the two is what they wait on now, as far as this broker
	// knows, and the backfill pacer's signal here, weighed by the
	// frame's records as the listener weighs a Produce (kafka.Latency).
	// A follower no client talks to so paces the catch-up it receives by
	// the partition leaders' clients, not by its own appends alone.
	end := time.Now()
	b.clientLatency.ObserveN(end, max(end.Sub(start), req.Waited), frameRecords(req.Payload))
	return struct{}{}, nil
}

// frameRecords is the number of records of a frame's Kafka batch, 1 when
// its header does not parse.
func frameRecords(payload []byte) int {
	h, _, err := kafka.ParseBatch(payload)
	if err != nil {
		return 1
	}
	return int(h.Records())
}

// parseSealAt reads the segment id and the sealAtRequest of a seal_at or
// unseal request.
func parseSealAt(r *http.Request, body []byte) (meta.SegmentID, sealAtRequest, error) {
	var req sealAtRequest
	id, err := parseSegmentID(r.PathValue("id"))
	if err == nil {
		err = decodeJSON(body, &req)
	}
	return id, req, err
}

// internalSealAt cuts the copy to byte req.Bytes (dropping frames past
// it) and seals it there. A copy sealed already answers its seal when it
// ends there; one shorter than req.Bytes is refused (errDisagree), and so
// is a fenced seal's cut of a copy no longer fenced (errFenced).
func (b *Server) internalSealAt(r *http.Request, body []byte) (any, error) {
	id, req, err := parseSealAt(r, body)
	if err != nil {
		return nil, err
	}
	unlock := b.lockSegment(id)
	defer unlock()
	if err := b.db.RestoreStart(id, req.Start); err != nil {
		return nil, err
	}
	end, err := b.db.DurableEnd(id)
	if err != nil {
		return nil, err
	}
	switch {
	case end.Footer && end.Bytes != req.Bytes:
		return nil, fmt.Errorf("%w: seal %s at byte %d: sealed at %d", errDisagree, id, req.Bytes, end.Bytes)
	case end.Bytes < req.Bytes:
		return nil, fmt.Errorf("%w: seal %s at byte %d: the copy ends at %d", errDisagree, id, req.Bytes, end.Bytes)
	case end.Bytes > req.Bytes && !end.Footer && req.Fenced && !b.fenced(id):
		return nil, fmt.Errorf("%w: seal %s at byte %d: the copy ends at %d and its fence is gone (a restart): frames past the fence may be acknowledged", errFenced, id, req.Bytes, end.Bytes)
	case end.Bytes > req.Bytes:
		if err := b.db.Truncate(id, req.Bytes); err != nil {
			return nil, err
		}
	}
	s, err := b.db.Seal(id)
	if err != nil {
		return nil, err
	}
	b.setFence(id, false) // the footer refuses frames now
	return sealResult{StartOffset: s.StartOffset, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum}, nil
}

// internalUnseal takes a seal that the metadata did not record off the
// copy (unsealReplicas): a footer after byte req.Bytes is cut, the frames
// stay, and the copy is fenced, so that it takes no frame until a seal.
// A copy sealed at another byte (another seal's) is left as it is.
func (b *Server) internalUnseal(r *http.Request, body []byte) (any, error) {
	id, req, err := parseSealAt(r, body)
	if err != nil {
		return nil, err
	}
	unlock := b.lockSegment(id)
	defer unlock()
	end, err := b.db.DurableEnd(id)
	switch {
	case err != nil:
		return nil, err
	case end.Footer && end.Bytes != req.Bytes:
		return struct{}{}, nil
	case end.Footer:
		if err := b.db.Truncate(id, end.Bytes); err != nil {
			return nil, err
		}
	}
	b.setFence(id, true)
	return struct{}{}, nil
}

// internalFence fences the copy (appendFrame refuses every frame from
// now on, until it is sealed) and answers its durable end: a takeover
// seals at the longest of its replicas' (fenceReplicas).
func (b *Server) internalFence(r *http.Request, body []byte) (any, error) {
	return b.copyEnd(r, body, true)
}

// internalEnd answers the copy's durable end and fences nothing: a leader
// that opens an active segment its own copy holds no frame of asks the
// other replicas whether they hold some (openPartLog). No fence is
// needed there: only that leader writes the segment's frames.
func (b *Server) internalEnd(r *http.Request, body []byte) (any, error) {
	return b.copyEnd(r, body, false)
}

// copyEnd answers the durable end of the copy the request names, fencing
// it first (when unsealed) with fence, under the segment's lock.
func (b *Server) copyEnd(r *http.Request, body []byte, fence bool) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if err := decodeJSON(body, &struct{}{}); err != nil {
		return nil, err
	}
	unlock := b.lockSegment(id)
	defer unlock()
	end, err := b.db.DurableEnd(id)
	if err != nil {
		return nil, err
	}
	if fence && !end.Footer {
		b.setFence(id, true)
	}
	return endResponse{Bytes: end.Bytes, Frames: end.Frames, NextOffset: end.NextOffset, Footer: end.Footer}, nil
}

// maxRead bounds one read of a copy's bytes.
const maxRead = 64 << 20

func (b *Server) internalRead(r *http.Request, body []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	var req readRequest
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if req.From < 0 || req.Len < 0 || req.Len > maxRead {
		return nil, fmt.Errorf("%w: read %s: from %d len %d: want from >= 0 and len 0 to %d", errBadRequest, id, req.From, req.Len, maxRead)
	}
	buf := make([]byte, req.Len)
	n, err := b.db.ReadAt(id, buf, req.From)
	if err != nil && n < len(buf) {
		return nil, err
	}
	return readResponse{Data: buf}, nil
}
