package plugin

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/malachi-log/malachi/heal"
)

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func TestSetLifecycleMetrics(t *testing.T) {
	g := lifecycleGauges{
		SegmentsLeft: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "segments_left"}, []string{"broker"}),
		BytesLeft:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bytes_left"}, []string{"broker"}),
		Blocked:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "blocked"}, []string{"broker", "reason"}),
		Maintenance:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "maintenance"}),
	}
	now := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	rep := heal.Report{
		Decommission: []heal.Drain{
			{Broker: 2, Segments: 7, Bytes: 7000, Blocked: map[string]int{heal.DrainNoSpareBroker: 2, heal.DrainDeferred: 3}},
			{Broker: 4, Drained: true},
		},
		Maintenance: []heal.Maintenance{{Broker: 3, Until: now}, {Broker: 5, Until: now, Ended: true}},
	}
	setLifecycleMetrics(&rep, g)
	for _, c := range []struct {
		got, want float64
		what      string
	}{
		{gaugeValue(t, g.SegmentsLeft.WithLabelValues("2")), 7, "segments left of 2"},
		{gaugeValue(t, g.BytesLeft.WithLabelValues("2")), 7000, "bytes left of 2"},
		{gaugeValue(t, g.SegmentsLeft.WithLabelValues("4")), 0, "segments left of drained 4"},
		{gaugeValue(t, g.Blocked.WithLabelValues("2", heal.DrainNoSpareBroker)), 2, "no_spare_broker of 2"},
		{gaugeValue(t, g.Blocked.WithLabelValues("2", heal.DrainDeferred)), 3, "deferred of 2"},
		{gaugeValue(t, g.Maintenance), 1, "brokers in an open window"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	// The next pass: 2's decommission was cancelled. No stale series stays.
	setLifecycleMetrics(&heal.Report{}, g)
	reg := prometheus.NewRegistry()
	reg.MustRegister(g.SegmentsLeft, g.BytesLeft, g.Blocked)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if len(f.GetMetric()) != 0 {
			t.Fatalf("%s: %d series left after the decommissions ended", f.GetName(), len(f.GetMetric()))
		}
	}
	if v := gaugeValue(t, g.Maintenance); v != 0 {
		t.Fatalf("maintenance = %v after the windows ended", v)
	}
	setLifecycleMetrics(&rep, lifecycleGauges{}) // nil gauges are skipped
}
