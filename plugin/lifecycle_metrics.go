package plugin

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/malachi-log/malachi/heal"
)

// lifecycleGauges are the decommission and maintenance gauges a pass's
// Report sets (declared with the plugin's other metrics):
//
//	malachi_heal_decommission_segments_left{broker}
//	malachi_heal_decommission_bytes_left{broker}
//	malachi_heal_decommission_blocked_segments{broker,reason}
//	malachi_heal_maintenance_brokers
//
// A nil field is skipped.
type lifecycleGauges struct {
	SegmentsLeft *prometheus.GaugeVec // label broker
	BytesLeft    *prometheus.GaugeVec // label broker
	Blocked      *prometheus.GaugeVec // labels broker, reason
	Maintenance  prometheus.Gauge
}

// setLifecycleMetrics sets g from rep: per decommissioning broker, the
// segments and bytes its replica sets still name and the segments blocked
// this pass by reason; the number of brokers in an open maintenance
// window. The vectors are reset first, so a broker no longer
// decommissioning (or a reason that cleared) leaves no stale series; a
// drained broker reads 0 left until its mode changes.
func setLifecycleMetrics(rep *heal.Report, g lifecycleGauges) {
	for _, v := range []*prometheus.GaugeVec{g.SegmentsLeft, g.BytesLeft, g.Blocked} {
		if v != nil {
			v.Reset()
		}
	}
	for _, d := range rep.Decommission {
		b := strconv.FormatUint(uint64(d.Broker), 10)
		if g.SegmentsLeft != nil {
			g.SegmentsLeft.WithLabelValues(b).Set(float64(d.Segments))
		}
		if g.BytesLeft != nil {
			g.BytesLeft.WithLabelValues(b).Set(float64(d.Bytes))
		}
		if g.Blocked != nil {
			for reason, n := range d.Blocked {
				g.Blocked.WithLabelValues(b, reason).Set(float64(n))
			}
		}
	}
	if g.Maintenance != nil {
		open := 0
		for _, m := range rep.Maintenance {
			if !m.Ended {
				open++
			}
		}
		g.Maintenance.Set(float64(open))
	}
}
