package plugin

import "github.com/malachi-log/malachi/meta"

// RPC paths on the control listener. Every one is a POST of a JSON body
// from a broker authenticated by mutual TLS, answered with JSON or an
// error {"code","message"} (package rpc).
const (
	pathProbe    = "/rpc/v1/probe"
	pathBackfill = "/rpc/v1/backfill"
	pathSettle   = "/rpc/v1/settle"
	pathConfirm  = "/rpc/v1/confirm"
	pathDelete   = "/rpc/v1/delete"
	pathLatched  = "/rpc/v1/latched"
)

// ProbeRequest asks a broker to probe every sealed copy the metadata at
// Index (or later) assigns to it. The answer is a heal.ProbeReport.
type ProbeRequest struct {
	Index uint64 `json:"index"`
	// DeadlineMillis bounds the stat batch on the broker; 0 means the
	// broker's own heal.probe_deadline.
	DeadlineMillis int64 `json:"deadline_ms,omitempty"`
}

// BackfillRequest asks the target broker (the receiver of the RPC) to pull
// Segment's bytes from Source's catch-up data listener, from its own
// copy's durable end to the end of the frames and footer: one request.
// (It had a "from" field, which the target validated and ignored, and a
// durable_end RPC the coordinator asked first; both are gone. Strict
// decoding refuses "from" from an older coordinator: a cluster is upgraded
// whole.)
type BackfillRequest struct {
	Segment    meta.Segment  `json:"segment"`
	Source     meta.BrokerID `json:"source"`
	SourceAddr string        `json:"source_addr"`
	// Ticket authorizes the transfer at the source's data listener
	// (catchup.IssueTicket); absent only in insecure mode.
	Ticket []byte `json:"ticket,omitempty"`
}

// BackfillResponse reports a committed backfill.
type BackfillResponse struct {
	Bytes int64 `json:"bytes"`
}

// SegmentsRequest names a batch of segments by their full metadata (the
// settle and confirm RPCs: one request per broker and pass).
type SegmentsRequest struct {
	Segments []meta.Segment `json:"segments"`
}

// BatchResponse answers a SegmentsRequest: Items[i] for Segments[i].
type BatchResponse struct {
	Items []BatchItem `json:"items"`
}

// BatchItem is one copy's answer: an error (Code, as the RPC layer's
// error codes, and Message) or, for a settle, what it did.
type BatchItem struct {
	Code            string `json:"code,omitempty"`
	Message         string `json:"message,omitempty"`
	FooterWritten   bool   `json:"footer_written,omitempty"`
	SyncedAndRolled bool   `json:"synced_and_rolled,omitempty"`
	BytesCut        int64  `json:"bytes_cut,omitempty"`
}

// DeleteRequest names a copy to delete.
type DeleteRequest struct {
	Segment meta.SegmentID `json:"segment"`
}

// LatchedResponse lists the copies latched on a broker.
type LatchedResponse struct {
	Latched []meta.SegmentID `json:"latched"`
}

// empty is the answer of an RPC with nothing to say.
type empty struct{}
