package broker

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
)

// The write path's appends, on the broker that coordinates them: a
// RecordsRequest checked, its records generated deterministically (or
// given), written and synced on every replica (replica.go).

func checkRecords(rr *admin.RecordsRequest) error {
	if len(rr.Records) > 0 && rr.Count > 0 {
		return fmt.Errorf("%w: records: give count/size/seed or records, not both", errBadRequest)
	}
	if rr.Count < 0 || rr.Count > 1<<20 {
		return fmt.Errorf("%w: count = %d: want 0 to %d", errBadRequest, rr.Count, 1<<20)
	}
	if rr.Count > 0 && (rr.Size < 0 || rr.Size > 16<<20) {
		return fmt.Errorf("%w: size = %d: want 0 to %d", errBadRequest, rr.Size, 16<<20)
	}
	for i, s := range rr.Records {
		if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			return fmt.Errorf("%w: records[%d]: %v", errBadRequest, i, err)
		}
	}
	return nil
}

// payloads yields the records of rr, generated deterministically.
func payloads(rr *admin.RecordsRequest, fn func(p []byte) error) error {
	if len(rr.Records) > 0 {
		for _, s := range rr.Records {
			p, _ := base64.StdEncoding.DecodeString(s)
			if err := fn(p); err != nil {
				return err
			}
		}
		return nil
	}
	// One random block per request; record i is the block rotated by i
	// words with i in its first 8 bytes: distinct, deterministic, cheap.
	n := rr.Size
	block := make([]byte, n+8)
	g := rand.NewPCG(rr.Seed, 0x6d616c616368)
	for j := 0; j < n; j += 8 {
		binary.LittleEndian.PutUint64(block[j:], g.Uint64())
	}
	block = block[:n]
	buf := make([]byte, n)
	for i := 0; i < rr.Count; i++ {
		if n > 0 {
			r := (i * 8) % n
			copy(buf, block[r:])
			copy(buf[n-r:], block[:r])
			var idx [8]byte
			binary.LittleEndian.PutUint64(idx[:], uint64(i))
			copy(buf, idx[:])
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
	return nil
}

// parseRecords decodes and checks the path id and the body of POST
// /v1/segments/{id}/records (and of its internal twin).
func parseRecords(pathID string, body []byte) (meta.SegmentID, admin.RecordsRequest, error) {
	id, err := parseSegmentID(pathID)
	if err != nil {
		return "", admin.RecordsRequest{}, err
	}
	var req admin.RecordsRequest
	if err := decodeJSON(body, &req); err != nil {
		return "", admin.RecordsRequest{}, err
	}
	if err := checkRecords(&req); err != nil {
		return "", admin.RecordsRequest{}, err
	}
	return id, req, nil
}

func (b *Server) appendRecords(r *http.Request, body []byte) (any, error) {
	id, req, err := parseRecords(r.PathValue("id"), body)
	if err != nil {
		return nil, err
	}
	return b.append(r.Context(), id, req)
}

// append writes the records on every replica (each syncs before it
// answers) and checks that they agree on the next offset.
func (b *Server) append(ctx context.Context, id meta.SegmentID, req admin.RecordsRequest) (admin.AppendResponse, error) {
	if err := checkRecords(&req); err != nil {
		return admin.AppendResponse{}, err
	}
	seg, err := b.segment(ctx, id)
	if err != nil {
		return admin.AppendResponse{}, err
	}
	if seg.Sealed {
		return admin.AppendResponse{}, fmt.Errorf("%w: segment %s", meta.ErrSealed, id)
	}
	unlock := b.lockSegment(id)
	defer unlock()
	res, err := onReplicas[admin.AppendResponse](ctx, b, seg, "append", req)
	if err != nil {
		return admin.AppendResponse{}, err
	}
	for i := range res {
		if res[i] != res[0] {
			return admin.AppendResponse{}, fmt.Errorf("%w: append to %s: broker %d at %+v, broker %d at %+v", errDisagree, id, seg.Replicas[0], res[0], seg.Replicas[i], res[i])
		}
	}
	return res[0], nil
}
