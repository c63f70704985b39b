package broker

import (
	"context"
	"fmt"
	"net/http"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
)

// The write path's last step: seal every replica, check that they agree,
// commit SealSegment.

func (b *Server) sealSegment(r *http.Request, _ []byte) (any, error) {
	id, err := parseSegmentID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return b.seal(r.Context(), id)
}

// seal seals every replica, checks that they agree, then commits
// SealSegment through raft.
func (b *Server) seal(ctx context.Context, id meta.SegmentID) (admin.SealResponse, error) {
	seg, err := b.segment(ctx, id)
	if err != nil {
		return admin.SealResponse{}, err
	}
	unlock := b.lockSegment(id)
	defer unlock()
	seals, err := onReplicas[sealResult](ctx, b, seg, "seal", struct{}{})
	if err != nil {
		return admin.SealResponse{}, err
	}
	for i := range seals {
		if seals[i] != seals[0] {
			return admin.SealResponse{}, fmt.Errorf("%w: seal %s: broker %d sealed %+v, broker %d sealed %+v", errDisagree, id, seg.Replicas[0], seals[0], seg.Replicas[i], seals[i])
		}
	}
	s := seals[0]
	if s.StartOffset != seg.StartOffset {
		return admin.SealResponse{}, fmt.Errorf("%w: seal %s: copies start at %d, metadata at %d", errDisagree, id, s.StartOffset, seg.StartOffset)
	}
	if _, err := b.apply(ctx, meta.SealSegment{ID: id, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum}); err != nil {
		return admin.SealResponse{}, err
	}
	seg.Length, seg.ByteSize, seg.Checksum, seg.Sealed = s.Length, s.ByteSize, s.Checksum, true
	return admin.SealResponse{Segment: seg}, nil
}
