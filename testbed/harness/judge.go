package harness

import (
	"fmt"
	"math"
	"slices"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// LoadSpread is the min, mean and max of the replicas and replica bytes
// of sealed segments per running broker.
type LoadSpread struct {
	CountMin  int     `json:"count_min"`
	CountMean float64 `json:"count_mean"`
	CountMax  int     `json:"count_max"`
	BytesMin  int64   `json:"bytes_min"`
	BytesMean float64 `json:"bytes_mean"`
	BytesMax  int64   `json:"bytes_max"`
	// Within says every broker is within max(10% of the mean, one
	// replica; one mean replica's bytes) of the mean, by both.
	Within bool `json:"within"`
}

func (s LoadSpread) String() string {
	return fmt.Sprintf("replicas %d/%.1f/%d, bytes %d/%.0f/%d (min/mean/max)", s.CountMin, s.CountMean, s.CountMax, s.BytesMin, s.BytesMean, s.BytesMax)
}

// Spread computes the load spread of the brokers in bs over snap.
func Spread(snap *meta.Snapshot, bs []*Broker) LoadSpread {
	cnt, byt := map[meta.BrokerID]int{}, map[meta.BrokerID]int64{}
	for _, b := range bs {
		cnt[b.ID], byt[b.ID] = 0, 0
	}
	var tc, tb float64
	for _, s := range snap.Segments {
		if !s.Sealed {
			continue
		}
		for _, r := range s.Replicas {
			if _, ok := cnt[r]; ok {
				cnt[r]++
				byt[r] += s.ByteSize
				tc++
				tb += float64(s.ByteSize)
			}
		}
	}
	out := LoadSpread{CountMin: math.MaxInt, BytesMin: math.MaxInt64}
	if len(cnt) == 0 || tc == 0 {
		return LoadSpread{}
	}
	k := float64(len(cnt))
	out.CountMean, out.BytesMean = tc/k, tb/k
	bc, bb := max(0.1*out.CountMean, 1), max(0.1*out.BytesMean, tb/tc)
	out.Within = true
	for id, c := range cnt {
		out.CountMin, out.CountMax = min(out.CountMin, c), max(out.CountMax, c)
		out.BytesMin, out.BytesMax = min(out.BytesMin, byt[id]), max(out.BytesMax, byt[id])
		out.Within = out.Within && math.Abs(float64(c)-out.CountMean) <= bc && math.Abs(float64(byt[id])-out.BytesMean) <= bb
	}
	return out
}

// HeldBy counts the segments whose replica set in snap names id.
func HeldBy(snap *meta.Snapshot, id meta.BrokerID) int {
	n := 0
	for _, s := range snap.Segments {
		if s.HasReplica(id) {
			n++
		}
	}
	return n
}

// AddedReplicas counts the replicas in next's sets that prev's did not
// name.
func AddedReplicas(prev, next *meta.Snapshot) int {
	n := 0
	for _, s := range next.Segments {
		p, ok := prev.Segment(s.ID)
		if !ok {
			continue
		}
		for _, r := range s.Replicas {
			if !p.HasReplica(r) {
				n++
			}
		}
	}
	return n
}

// SetsBelow counts the segments of snap with fewer than rf replicas.
func SetsBelow(snap meta.Snapshot, rf int) int {
	n := 0
	for _, s := range snap.Segments {
		if len(s.Replicas) < rf {
			n++
		}
	}
	return n
}

// CommandsBelow lists the segments of r's commands whose replica set has
// fewer than rf members.
func CommandsBelow(r *heal.Report, rf int) []meta.SegmentID {
	var out []meta.SegmentID
	for _, c := range r.Ready {
		if len(c.Replicas) < rf {
			out = append(out, c.ID)
		}
	}
	return out
}

// SetsChangedBy lists, once each, the segments whose replica set r
// changed or handed the control plane a change of.
func SetsChangedBy(r *heal.Report) []meta.SegmentID {
	var out []meta.SegmentID
	add := func(id meta.SegmentID) {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	for _, c := range r.Ready {
		add(c.ID)
	}
	for _, id := range slices.Concat(r.Healed, r.Moved) {
		add(id)
	}
	for _, f := range r.MaintenanceFloor {
		add(f.Segment)
	}
	return out
}
