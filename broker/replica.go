package broker

import (
	"errors"
	"net/http"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// The write path's replica side (role brokers): create, append to and
// seal this broker's copy of a segment, as the coordinating broker asks.

type copyCreate struct {
	StartOffset uint64 `json:"start_offset"`
}

type sealResult struct {
	StartOffset uint64        `json:"start_offset"`
	Length      uint64        `json:"length"`
	ByteSize    int64         `json:"byte_size"`
	Checksum    meta.Checksum `json:"checksum"`
}

func (b *Server) internalCreate(r *http.Request, body []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	var req copyCreate
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	if err := b.db.Create(id, req.StartOffset); err != nil {
		// A retried create: an empty copy at the same start offset is it.
		if errors.Is(err, store.ErrExists) {
			if end, eerr := b.db.DurableEnd(id); eerr == nil && end.Frames == 0 && !end.Footer && (end.NextOffset == req.StartOffset || end.NextOffset == 0) {
				return struct{}{}, nil
			}
		}
		return nil, err
	}
	return struct{}{}, nil
}

func (b *Server) internalAppend(r *http.Request, body []byte) (any, error) {
	id, req, err := parseRecords(r.PathValue("id"), body)
	if err != nil {
		return nil, err
	}
	var next uint64
	n := 0
	err = payloads(&req, func(p []byte) error {
		off, err := b.db.Append(id, p)
		next, n = off+1, n+1
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := b.db.Sync(id); err != nil {
		return nil, err
	}
	if n == 0 {
		end, err := b.db.DurableEnd(id)
		if err != nil {
			return nil, err
		}
		next = end.NextOffset
	}
	return admin.AppendResponse{NextOffset: next, Records: n}, nil
}

func (b *Server) internalSeal(r *http.Request, body []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if err := decodeJSON(body, &struct{}{}); err != nil {
		return nil, err
	}
	s, err := b.db.Seal(id)
	if err != nil {
		return nil, err
	}
	return sealResult{StartOffset: s.StartOffset, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum}, nil
}
