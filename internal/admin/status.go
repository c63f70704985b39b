package admin

import (
	"encoding/json"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// HealReport mirrors heal.Report as the plugin serves it in /status. The
// CLI decodes its own mirror (reasons and ops as strings) so that a field
// the plugin adds later never breaks status or demo.
type HealReport struct {
	Index           uint64           `json:"index"`
	Segments        int              `json:"segments"`
	Sealed          int              `json:"sealed"`
	Active          int              `json:"active"`
	UnderReplicated int              `json:"under_replicated"`
	Anomalies       int              `json:"anomalies"`
	Dead            []meta.BrokerID  `json:"dead"`
	Suspect         []meta.BrokerID  `json:"suspect"`
	Backfills       int              `json:"backfills"`
	Commands        int              `json:"commands"`
	Deferred        int              `json:"deferred"`
	Failed          []HealFailure    `json:"failed"`
	Unsettled       []CopyRef        `json:"unsettled"`
	Settling        []CopyRef        `json:"settling"`
	HoldReason      string           `json:"hold_reason"`
	HoldReleased    bool             `json:"hold_released"`
	Lost            []LostEntry      `json:"lost"`
	Healed          []meta.SegmentID `json:"healed"`
	Resumed         []CopyRef        `json:"resumed"`
	Settled         []CopyRef        `json:"settled"`
	Confirmed       []CopyRef        `json:"confirmed"`
	Deleted         []CopyRef        `json:"deleted"`
	Stale           []meta.SegmentID `json:"stale"`
	BytesCopied     int64            `json:"bytes_copied"`
	Aborted         bool             `json:"aborted"`
	AuthFailed      []AuthFailure    `json:"auth_failed"`
	// Leftovers mirror heal.Report.Leftovers: copies held outside their
	// segment's replica set, per broker and cause (never replicas).
	Leftovers        []LeftoverGroup `json:"leftovers"`
	LeftoverCopies   int             `json:"leftover_copies"`
	LeftoverBytes    int64           `json:"leftover_bytes"`
	LeftoversDeleted []CopyRef       `json:"leftovers_deleted"`
	LeftoverErrors   []HealFailure   `json:"leftover_errors"`
	// Moved and Rebalance mirror heal.Report.Moved (sets recorded by a
	// decommission's or the rebalancer's move) and heal.Report.Rebalance.
	Moved     []meta.SegmentID `json:"moved"`
	Rebalance *Rebalance       `json:"rebalance"`
}

// LeftoverGroup mirrors heal.LeftoverGroup with the cause as a string
// (returned_broker, partial_backfill, failed_delete, failed_load).
type LeftoverGroup struct {
	Broker   meta.BrokerID    `json:"broker"`
	Cause    string           `json:"cause"`
	Copies   int              `json:"copies"`
	Bytes    int64            `json:"bytes"`
	Err      string           `json:"err,omitempty"`
	Segments []meta.SegmentID `json:"segments,omitempty"`
}

// AuthFailure mirrors heal.AuthFailure: a broker the coordinator could not
// authenticate (or that refused it), and why.
type AuthFailure struct {
	Broker meta.BrokerID `json:"broker"`
	Reason string        `json:"reason"`
}

// CertStatus mirrors plugin.CertStatus: one of a broker's certificates.
type CertStatus struct {
	File     string    `json:"file"`
	NotAfter time.Time `json:"not_after"`
	// Warning is set within 30 days of the end (or after it).
	Warning string `json:"warning"`
}

type HealFailure struct {
	Segment meta.SegmentID  `json:"segment"`
	Reason  string          `json:"reason"`
	Copies  []meta.BrokerID `json:"copies,omitempty"`
	Err     string          `json:"err,omitempty"`
}

type CopyRef struct {
	Segment meta.SegmentID `json:"segment"`
	Broker  meta.BrokerID  `json:"broker"`
}

// FindReport looks through a /status document for the latest heal report:
// the first object (breadth first) that carries "under_replicated" and
// "index". ok is false when the document holds none (plugin disabled, no
// pass run yet).
func FindReport(status json.RawMessage) (HealReport, bool) {
	var root any
	if len(status) == 0 || json.Unmarshal(status, &root) != nil {
		return HealReport{}, false
	}
	queue := []any{root}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		switch x := n.(type) {
		case map[string]any:
			_, u := x["under_replicated"]
			_, i := x["index"]
			if u && i {
				b, _ := json.Marshal(x)
				var r HealReport
				if json.Unmarshal(b, &r) == nil {
					return r, true
				}
			}
			for _, v := range x {
				queue = append(queue, v)
			}
		case []any:
			queue = append(queue, x...)
		}
	}
	return HealReport{}, false
}

// PluginStatus mirrors plugin.Status, the JSON of a broker's /v1/status
// when the plugin is enabled.
type PluginStatus struct {
	Broker          meta.BrokerID `json:"broker"`
	Enabled         bool          `json:"enabled"`
	Leader          bool          `json:"leader"`
	RPCAddr         string        `json:"rpc_addr"`
	DataAddr        string        `json:"data_addr"`
	ProbeEngine     string        `json:"probe_engine"`
	FsyncEngine     string        `json:"fsync_engine"`
	Passes          uint64        `json:"passes"`
	LastPass        *HealReport   `json:"last_pass"`
	LastPassAt      time.Time     `json:"last_pass_at"`
	LastPassSeconds float64       `json:"last_pass_seconds"`
	// LastPassAge and LastPassStale: see plugin.Status.
	LastPassAge   float64 `json:"last_pass_age_seconds"`
	LastPassStale string  `json:"last_pass_stale"`
	// Totals: the coordinator's figures since it started (plugin.Totals).
	Totals *Totals `json:"totals"`
	Hold   string  `json:"hold"`
	// Insecure: the broker runs with insecure = true.
	Insecure bool `json:"insecure"`
	// Certificates are the broker's own, with a warning near their end.
	Certificates []CertStatus `json:"certificates"`
	// AuthFailed are the brokers the coordinator could not authenticate on
	// its last pass (the leader's status only).
	AuthFailed []AuthFailure `json:"auth_failed"`
	// Scrub is the scrubber's part, nil when the plugin has none or it
	// is off.
	Scrub *ScrubStatus `json:"scrub"`
}

// Totals mirrors plugin.Totals.
type Totals struct {
	Since          time.Time         `json:"since"`
	Passes         uint64            `json:"passes"`
	SegmentsHealed uint64            `json:"segments_healed"`
	BytesHealed    int64             `json:"bytes_healed"`
	Backfills      uint64            `json:"backfills"`
	Settled        uint64            `json:"settled"`
	Confirmed      uint64            `json:"confirmed"`
	Deleted        uint64            `json:"deleted"`
	Failures       map[string]uint64 `json:"failures"`
}

// ScrubStatus mirrors plugin.ScrubStatus.
type ScrubStatus struct {
	Enabled      bool             `json:"enabled"`
	Cycles       uint64           `json:"cycles"`
	Verified     uint64           `json:"verified"`
	BytesRead    int64            `json:"bytes_read"`
	Corrupt      []meta.SegmentID `json:"corrupt"`
	CycleSeconds float64          `json:"cycle_seconds"`
}

// DecodeStatus reads a /v1/status document: the plugin's Status, possibly
// wrapped in an object under "heal" or "status". ok is false for a
// disabled plugin ({"heal":"disabled"}) or an unknown shape.
func DecodeStatus(raw json.RawMessage) (PluginStatus, bool) {
	var st PluginStatus
	if len(raw) == 0 {
		return st, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return st, false
	}
	if _, ok := top["enabled"]; ok {
		if json.Unmarshal(raw, &st) == nil {
			return st, st.Enabled
		}
		return st, false
	}
	for _, k := range []string{"heal", "status", "plugin"} {
		if inner, ok := top[k]; ok {
			if s, ok := DecodeStatus(inner); ok {
				return s, true
			}
		}
	}
	return st, false
}

// LastPass returns the latest heal report of a status document, with the
// time the pass started (its end minus its duration).
func LastPass(raw json.RawMessage) (HealReport, time.Time, uint64, bool) {
	if st, ok := DecodeStatus(raw); ok && st.LastPass != nil {
		started := st.LastPassAt.Add(-time.Duration(st.LastPassSeconds * float64(time.Second)))
		return *st.LastPass, started, st.Passes, true
	}
	if r, ok := FindReport(raw); ok {
		return r, time.Time{}, 0, true
	}
	return HealReport{}, time.Time{}, 0, false
}

// LostEntry mirrors heal.LostSegment.
type LostEntry struct {
	Segment      meta.SegmentID  `json:"segment"`
	ByteSize     int64           `json:"byte_size"`
	Replicas     []meta.BrokerID `json:"replicas"`
	Reason       string          `json:"reason"`
	Acknowledged bool            `json:"acknowledged"`
}
