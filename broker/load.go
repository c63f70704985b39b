package broker

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
)

// The load generator (POST /v1/load): create, write and seal many
// segments of generated records, numbered after the prefix's highest.

// parseLoad decodes and checks the body of POST /v1/load, filling in the
// defaults; every segment id it names is valid.
func parseLoad(body []byte) (admin.LoadRequest, error) {
	req := admin.LoadRequest{Segments: 1, RecordsPerSegment: 256, RecordSize: 4096, Prefix: "s"}
	if err := decodeJSON(body, &req); err != nil {
		return admin.LoadRequest{}, err
	}
	if req.Segments < 1 || req.Segments > 1_000_000 {
		return admin.LoadRequest{}, fmt.Errorf("%w: segments = %d: want 1 to 1000000", errBadRequest, req.Segments)
	}
	if req.RecordsPerSegment < 1 || req.RecordsPerSegment > 1<<20 {
		return admin.LoadRequest{}, fmt.Errorf("%w: records_per_segment = %d: want 1 to %d", errBadRequest, req.RecordsPerSegment, 1<<20)
	}
	if req.RecordSize < 0 || req.RecordSize > 16<<20 {
		return admin.LoadRequest{}, fmt.Errorf("%w: record_size = %d: want 0 to %d", errBadRequest, req.RecordSize, 16<<20)
	}
	if req.First < 0 || req.First > math.MaxInt32 {
		return admin.LoadRequest{}, fmt.Errorf("%w: first = %d: want 0 to %d", errBadRequest, req.First, math.MaxInt32)
	}
	if req.Concurrency < 0 || req.Concurrency > 1024 {
		return admin.LoadRequest{}, fmt.Errorf("%w: concurrency = %d: want 0 (8) to 1024", errBadRequest, req.Concurrency)
	}
	if req.Concurrency == 0 {
		req.Concurrency = 8
	}
	// Only the digits differ between the ids: the first and the last
	// (the longest) stand for all.
	for _, n := range []int{req.First, req.First + req.Segments - 1} {
		if err := loadID(req.Prefix, n).Validate(); err != nil {
			return admin.LoadRequest{}, fmt.Errorf("%w: prefix = %q: %w", errBadRequest, req.Prefix, err)
		}
	}
	return req, nil
}

// loadID is the id of the n-th segment of a load: prefix, one "-" (none
// when prefix ends in one), then n in five digits or more.
func loadID(prefix string, n int) meta.SegmentID {
	if !strings.HasSuffix(prefix, "-") {
		prefix += "-"
	}
	return meta.SegmentID(fmt.Sprintf("%s%05d", prefix, n))
}

// nextLoadNumber is one past the highest n of any segment in v named
// loadID(prefix, n), 0 when there is none. O(log segments + those of the
// prefix): ids are in order in v.
func nextLoadNumber(v *meta.View, prefix string) int {
	head := string(loadID(prefix, 0))
	head = head[:len(head)-5]
	next := 0
	i, _ := v.Find(meta.SegmentID(head))
	for ; i < v.Len(); i++ {
		rest, ok := strings.CutPrefix(string(v.At(i).ID), head)
		if !ok {
			break
		}
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 && len(rest) >= 5 && n >= next {
			next = n + 1
		}
	}
	return next
}

func (b *Server) load(r *http.Request, body []byte) (any, error) {
	req, err := parseLoad(body)
	if err != nil {
		return nil, err
	}
	if req.First == 0 {
		req.First = nextLoadNumber(b.node.View(), req.Prefix)
		if err := loadID(req.Prefix, req.First+req.Segments-1).Validate(); err != nil {
			return nil, fmt.Errorf("%w: prefix = %q from number %d: %w", errBadRequest, req.Prefix, req.First, err)
		}
	}
	start := time.Now()
	var mu sync.Mutex
	var total int64
	g, ctx := errgroup.WithContext(r.Context())
	g.SetLimit(req.Concurrency)
	for i := 0; i < req.Segments; i++ {
		id := loadID(req.Prefix, req.First+i)
		g.Go(func() error {
			if _, err := b.create(ctx, admin.CreateRequest{ID: id}); err != nil {
				return err
			}
			rr := admin.RecordsRequest{Count: req.RecordsPerSegment, Size: req.RecordSize, Seed: uint64(req.First + i + 1)}
			if _, err := b.append(ctx, id, rr); err != nil {
				return err
			}
			s, err := b.seal(ctx, id)
			if err != nil {
				return err
			}
			mu.Lock()
			total += s.Segment.ByteSize
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return admin.LoadResponse{Segments: req.Segments, First: loadID(req.Prefix, req.First), Last: loadID(req.Prefix, req.First+req.Segments-1), Bytes: total, Seconds: time.Since(start).Seconds()}, nil
}
