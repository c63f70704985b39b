package admin

import (
	"time"

	"github.com/malachi-log/malachi/meta"
)

// The admin API's requests and answers: the broker (package broker)
// encodes and decodes these very types, so a client decodes what the
// broker serves without a copy of its own. The generated records of a
// RecordsRequest and every check of a request's values are the broker's.

// Health is the answer of GET /v1/health.
type Health struct {
	ID       meta.BrokerID `json:"id"`
	Leader   meta.BrokerID `json:"leader"`
	IsLeader bool          `json:"is_leader"`
	Heal     bool          `json:"heal"`
	Index    uint64        `json:"index"`
	// Quorum is what the broker's node knows of the voters.
	Quorum Quorum `json:"quorum"`
}

// Quorum is cluster.Quorum as /v1/health serves it: Error is
// cluster.Quorum.Err's text ("cluster: no quorum: 2 of 5 voters reachable
// ..."), empty while the broker hears a quorum.
type Quorum struct {
	Voters    int             `json:"voters"`
	Reachable []meta.BrokerID `json:"reachable"`
	Error     string          `json:"error,omitempty"`
}

// Copy is one local copy in GET /v1/copies: {id, size, latched, sealed},
// and confirmed when the server says whether it confirmed the copy (the
// broker does not: nil).
type Copy struct {
	ID        meta.SegmentID `json:"id"`
	Size      int64          `json:"size"`
	Latched   bool           `json:"latched"`
	Sealed    bool           `json:"sealed"`
	Confirmed *bool          `json:"confirmed,omitempty"`
	// LatchError is the error that latched the copy (store.DB.LatchErr).
	LatchError string `json:"latch_error,omitempty"`
}

// CreateRequest is the body of POST /v1/segments.
type CreateRequest struct {
	ID          meta.SegmentID  `json:"id"`
	StartOffset uint64          `json:"start_offset"`
	Replicas    []meta.BrokerID `json:"replicas,omitempty"` // optional: chosen by the leader when empty
	// Exclude are brokers the leader's placement leaves out (with
	// Replicas empty): a roll's replicas whose write just failed.
	Exclude []meta.BrokerID `json:"exclude,omitempty"`
}

// RecordsRequest is the body of POST /v1/segments/{id}/records: either
// Count generated records of Size bytes from Seed, or explicit Records.
type RecordsRequest struct {
	Count   int      `json:"count,omitempty"`
	Size    int      `json:"size,omitempty"`
	Seed    uint64   `json:"seed,omitempty"`
	Records []string `json:"records,omitempty"` // base64
}

// AppendResponse is the answer of an append: the next offset.
type AppendResponse struct {
	NextOffset uint64 `json:"next_offset"`
	Records    int    `json:"records"`
}

// SealResponse is what every replica sealed and the metadata recorded.
type SealResponse struct {
	Segment meta.Segment `json:"segment"`
}

// LoadRequest is the body of POST /v1/load: create, write and seal
// Segments segments named Prefix-NNNNN (Prefix NNNNN when Prefix ends in
// "-"), numbered from First; without First (absent or 0), from one past
// the highest number any segment of that prefix has, so that a second
// load makes new ids instead of failing with segment_exists (two loads of
// one prefix at the same moment may still collide: one fails). An absent
// field takes the broker's default (1 segment, 256 records of 4096 bytes,
// prefix "s", concurrency 8).
type LoadRequest struct {
	Segments          int    `json:"segments"`
	RecordsPerSegment int    `json:"records_per_segment"`
	RecordSize        int    `json:"record_size"`
	Prefix            string `json:"prefix,omitempty"`
	// Concurrency bounds the segments loaded at once.
	Concurrency int `json:"concurrency,omitempty"`
	First       int `json:"first,omitempty"`
}

// LoadResponse reports a load.
type LoadResponse struct {
	Segments int `json:"segments"`
	// First and Last are the ids of the first and last segment made.
	First   meta.SegmentID `json:"first"`
	Last    meta.SegmentID `json:"last"`
	Bytes   int64          `json:"bytes"`
	Seconds float64        `json:"seconds"`
}

// Mode is the answer of the lifecycle routes: the broker's mode as
// recorded at Index (an empty Mode is active).
type Mode struct {
	Broker meta.BrokerID   `json:"broker"`
	Mode   meta.BrokerMode `json:"mode"`
	Until  time.Time       `json:"until,omitzero"`
	Index  uint64          `json:"index"`
}
