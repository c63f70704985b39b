package plugin

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/malachi-log/malachi/catchup"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/pki"
)

// metrics are one plugin instance's Prometheus collectors, registered on
// the instance's own registry (never the global one), served on /metrics.
type metrics struct {
	reg *prometheus.Registry

	underReplicated prometheus.Gauge
	failed          *prometheus.GaugeVec // by reason
	unsettled       prometheus.Gauge
	lostSegments    prometheus.Gauge
	lostBytes       prometheus.Gauge
	returned        prometheus.Counter
	bytesSaved      prometheus.Counter
	confirmed       prometheus.Counter
	healed          prometheus.Counter
	stale           prometheus.Counter
	backfillBytes   prometheus.Counter
	backfillArrived prometheus.Counter
	backfillSeconds prometheus.Histogram
	backfillStages  *prometheus.HistogramVec
	backfillErrors  prometheus.Counter
	probeSeconds    prometheus.Histogram
	passSeconds     prometheus.Histogram
	passes          prometheus.Counter
	commandSeconds  prometheus.Histogram
	barrierSeconds  prometheus.Histogram
	rpcSeconds      *prometheus.HistogramVec // by rpc, on the caller
	scrubBytes      prometheus.Counter
	scrubCorrupt    prometheus.Gauge
	scrubCycles     prometheus.Counter
	leader          prometheus.Gauge
	engine          *prometheus.GaugeVec // kind=probe|fsync, engine=uring|syscall
	hold            prometheus.Gauge     // 1 while the last pass's HoldReason is set
	auth            authMetrics
	lifecycle
	pace paceMetrics
}

// paceMetrics are the backfill rate's gauges: the rate applied, its
// reason, how long auto has held it at its floor, and the client latency
// auto held it against.
type paceMetrics struct {
	rate         prometheus.Gauge
	reason       *prometheus.GaugeVec // by reason, 1 for the current one
	floorSeconds prometheus.Gauge
	cuts         *prometheus.CounterVec // by reason: latency, pressure
	p99          prometheus.Gauge       // the last step's client p99; 0: none seen
	baseline     prometheus.Gauge       // the idle client p99 learned; 0: none yet
	blind        prometheus.Counter     // active steps without a client p99
}

// paceReasons are the values of the reason label: pace's, and fixed for
// a number in heal.backfill_bytes_per_second.
var paceReasons = []string{"latency", "pressure", "none", "fixed"}

// newPaceMetrics makes the pace gauges with f's namespace and subsystem.
func newPaceMetrics(f func(name, help string) prometheus.Opts) paceMetrics {
	m := paceMetrics{
		rate: prometheus.NewGauge(prometheus.GaugeOpts(f("backfill_rate_bytes_per_second",
			"The catch-up rate this broker applies now, in bytes per second; 0: no cap."))),
		reason: prometheus.NewGaugeVec(prometheus.GaugeOpts(f("backfill_rate_reason",
			"1 for the reason of the current catch-up rate: latency, pressure, none (heal.backfill_bytes_per_second = \"auto\") or fixed.")), []string{"reason"}),
		floorSeconds: prometheus.NewGauge(prometheus.GaugeOpts(f("backfill_rate_floor_seconds",
			"How long the automatic catch-up rate has been held at its floor while catch-up moved bytes; 0 when it is not."))),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts(f("backfill_rate_cuts_total",
			"Times the automatic catch-up rate was lowered, by reason: latency or pressure.")), []string{"reason"}),
		p99: prometheus.NewGauge(prometheus.GaugeOpts(f("backfill_client_p99_seconds",
			"The client p99 (this broker's Kafka Produce and Fetch handling, its follower appends) over the automatic catch-up rate's last step; 0 when it saw no request."))),
		baseline: prometheus.NewGauge(prometheus.GaugeOpts(f("backfill_client_p99_baseline_seconds",
			"The idle client p99 the automatic catch-up rate learned; 0 while none is known."))),
		blind: prometheus.NewCounter(prometheus.CounterOpts(f("backfill_rate_blind_steps_total",
			"Steps of the automatic catch-up rate during which catch-up moved bytes and this broker saw no client request: no latency to hold it against (only pressure)."))),
	}
	for _, r := range []string{"latency", "pressure"} {
		m.cuts.WithLabelValues(r)
	}
	for _, r := range paceReasons {
		m.reason.WithLabelValues(r).Set(0)
	}
	return m
}

// setPace records the rate applied, its reason (one of paceReasons) and
// its time at the floor.
func (m *metrics) setPace(rate int64, reason string, floorSeconds float64) {
	m.pace.rate.Set(float64(rate))
	for _, r := range paceReasons {
		v := 0.0
		if r == reason {
			v = 1
		}
		m.pace.reason.WithLabelValues(r).Set(v)
	}
	m.pace.floorSeconds.Set(floorSeconds)
}

// setPaceSignal records the client p99 of auto's last step and its idle
// baseline (each 0 when unknown), and counts a blind active step.
func (m *metrics) setPaceSignal(p99, baseline time.Duration, blind bool) {
	m.pace.p99.Set(p99.Seconds())
	m.pace.baseline.Set(baseline.Seconds())
	if blind {
		m.pace.blind.Inc()
	}
}

// lifecycle are the operator's lifecycle gauges: decommission
// progress by broker, brokers in maintenance, copies left outside their
// replica sets by cause. Declared and registered here so the alerts and
// the dashboard (deploy/) can name them; observePass sets them from the
// leader's pass report.
type lifecycle struct {
	decommissionLeft      *prometheus.GaugeVec // by broker: segments still to move
	decommissionBytesLeft *prometheus.GaugeVec // by broker: their bytes
	decommissionBlocked   *prometheus.GaugeVec // by broker, reason: segments that cannot move
	maintenanceBrokers    prometheus.Gauge
	leftoverCopies        *prometheus.GaugeVec // by cause
}

var failedReasons = []heal.Reason{heal.AllReplicasDead, heal.NoSpareBroker, heal.NoIntactSource, heal.BackfillFailed, heal.CommandFailed, heal.SealConflict}

func newMetrics(reg *prometheus.Registry) *metrics {
	const ns, sub = "malachi", "heal"
	m := &metrics{reg: reg}
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: ns, Subsystem: sub, Name: name, Help: help}
	}
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m.underReplicated = prometheus.NewGauge(prometheus.GaugeOpts(f("under_replicated_segments", "Sealed segments below their replication factor at the last pass (leader only).")))
	m.failed = prometheus.NewGaugeVec(prometheus.GaugeOpts(f("failed_segments", "Segments that could not be healed at the last pass, by reason (leader only).")), []string{"reason"})
	m.unsettled = prometheus.NewGauge(prometheus.GaugeOpts(f("unsettled_copies", "Overrun copies not yet confirmed at the last pass (leader only).")))
	m.lostSegments = prometheus.NewGauge(prometheus.GaugeOpts(f("lost_segments", "Sealed segments with no intact copy left at the last pass, acknowledged or not (leader only).")))
	m.lostBytes = prometheus.NewGauge(prometheus.GaugeOpts(f("lost_bytes", "Bytes of the lost segments at the last pass (leader only).")))
	m.returned = prometheus.NewCounter(prometheus.CounterOpts(f("returned_segments_total", "Segments whose backfills were cancelled because the replica they replaced came back (leader only).")))
	m.bytesSaved = prometheus.NewCounter(prometheus.CounterOpts(f("returned_bytes_saved_total", "Bytes those cancelled backfills would have copied (leader only).")))
	m.confirmed = prometheus.NewCounter(prometheus.CounterOpts(f("confirmed_copies_total", "Copies of this broker confirmed exact.")))
	m.healed = prometheus.NewCounter(prometheus.CounterOpts(f("segments_healed_total", "Replica sets recorded by this instance's coordinator.")))
	m.stale = prometheus.NewCounter(prometheus.CounterOpts(f("stale_commands_total", "SetSegmentReplicas refused as stale (compare-and-set lost).")))
	m.backfillBytes = prometheus.NewCounter(prometheus.CounterOpts(f("backfill_bytes_total", "Bytes received by this broker's committed backfills.")))
	m.backfillArrived = prometheus.NewCounter(prometheus.CounterOpts(f("backfill_arrived_bytes_total",
		"Bytes of backfills into this broker as they arrive, committed or not: a heal's progress while its copies are in flight.")))
	m.backfillSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "backfill_duration_seconds", Help: "Duration of this broker's committed backfills.", Buckets: buckets})
	m.backfillStages = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "backfill_stage_seconds",
		Help: "Time of each stage of this broker's backfills, committed or not: wait (for a transfer slot), transfer (the bytes, rate pauses included), commit (verification of the whole copy and its sync).", Buckets: buckets}, []string{"stage"})
	m.backfillErrors = prometheus.NewCounter(prometheus.CounterOpts(f("backfill_errors_total", "Backfills into this broker that failed and were rolled back.")))
	m.probeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "probe_duration_seconds", Help: "Duration of this broker's probe of its sealed copies.", Buckets: buckets})
	m.passSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "pass_duration_seconds", Help: "Duration of a heal pass, planning and execution (leader only).", Buckets: buckets})
	m.commandSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "command_duration_seconds", Help: "Time to commit one SetSegmentReplicas through the control plane (leader only).", Buckets: buckets})
	m.barrierSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "barrier_duration_seconds", Help: "Time of the control-plane barrier that starts each pass (leader only).", Buckets: buckets})
	m.rpcSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "rpc_duration_seconds", Help: "Duration of the replication RPCs this instance served, by rpc.", Buckets: buckets}, []string{"rpc"})
	m.passes = prometheus.NewCounter(prometheus.CounterOpts(f("passes_total", "Heal passes run by this instance's coordinator.")))
	m.scrubBytes = prometheus.NewCounter(prometheus.CounterOpts(f("scrub_bytes_total", "Bytes of sealed copies the scrubber verified on this broker.")))
	m.scrubCorrupt = prometheus.NewGauge(prometheus.GaugeOpts(f("scrub_corrupt_copies", "Copies of this broker the scrubber found corrupt, not yet replaced.")))
	m.scrubCycles = prometheus.NewCounter(prometheus.CounterOpts(f("scrub_cycles_total", "Full scrub cycles over this broker's sealed copies.")))
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts(f("leader", "1 while this instance runs the coordinator.")))
	m.engine = prometheus.NewGaugeVec(prometheus.GaugeOpts(f("engine_info", "The I/O engine in use: 1 for the (kind, engine) pair chosen at start.")), []string{"kind", "engine"})
	m.hold = prometheus.NewGauge(prometheus.GaugeOpts(f("hold", "1 while the mass-failure brake holds placement of new replicas (the last pass's hold_reason is set; leader only).")))
	m.lifecycle = newLifecycle(f)
	m.pace = newPaceMetrics(f)
	reg.MustRegister(m.pace.rate, m.pace.reason, m.pace.floorSeconds, m.pace.cuts, m.pace.p99, m.pace.baseline, m.pace.blind)
	reg.MustRegister(m.hold, m.decommissionLeft, m.decommissionBytesLeft, m.decommissionBlocked, m.maintenanceBrokers, m.leftoverCopies)
	reg.MustRegister(m.underReplicated, m.failed, m.unsettled, m.lostSegments, m.lostBytes, m.returned, m.bytesSaved, m.confirmed, m.healed, m.stale, m.backfillBytes, m.backfillArrived,
		m.backfillSeconds, m.backfillStages, m.backfillErrors, m.probeSeconds, m.passSeconds, m.passes, m.commandSeconds, m.barrierSeconds, m.rpcSeconds, m.scrubBytes, m.scrubCorrupt, m.scrubCycles, m.leader, m.engine)
	for _, r := range failedReasons {
		m.failed.WithLabelValues(r.String()).Set(0)
	}
	return m
}

// newLifecycle makes the lifecycle gauges with f's namespace and subsystem.
func newLifecycle(f func(name, help string) prometheus.Opts) lifecycle {
	return lifecycle{
		decommissionLeft: prometheus.NewGaugeVec(prometheus.GaugeOpts(f("decommission_segments_left",
			"Segments a decommissioned broker still holds a replica of, by broker (leader only).")), []string{"broker"}),
		decommissionBytesLeft: prometheus.NewGaugeVec(prometheus.GaugeOpts(f("decommission_bytes_left",
			"Bytes of those segments, by broker (leader only).")), []string{"broker"}),
		decommissionBlocked: prometheus.NewGaugeVec(prometheus.GaugeOpts(f("decommission_blocked_segments",
			"Segments of a decommissioned broker that cannot move at the last pass, by broker and reason (leader only).")), []string{"broker", "reason"}),
		maintenanceBrokers: prometheus.NewGauge(prometheus.GaugeOpts(f("maintenance_brokers",
			"Brokers inside a maintenance window at the last pass (leader only)."))),
		leftoverCopies: prometheus.NewGaugeVec(prometheus.GaugeOpts(f("leftover_copies",
			"Copies held outside their segment's replica set at the last pass, by cause (leader only).")), []string{"cause"}),
	}
}

// observePass records the last pass's report.
func (m *metrics) observePass(r *heal.Report, seconds float64) {
	m.passes.Inc()
	m.passSeconds.Observe(seconds)
	m.underReplicated.Set(float64(r.UnderReplicated))
	m.unsettled.Set(float64(len(r.Unsettled)))
	m.lostSegments.Set(float64(len(r.Lost)))
	m.lostBytes.Set(float64(r.LostBytes))
	m.hold.Set(0)
	if r.HoldReason != "" {
		m.hold.Set(1)
	}
	m.returned.Add(float64(len(r.Returned)))
	m.bytesSaved.Add(float64(r.BytesSaved))
	counts := map[heal.Reason]int{}
	for _, f := range r.Failed {
		counts[f.Reason]++
	}
	for _, reason := range failedReasons {
		m.failed.WithLabelValues(reason.String()).Set(float64(counts[reason]))
	}
	m.healed.Add(float64(len(r.Healed)))
	m.stale.Add(float64(len(r.Stale)))
	setLeftoverGauge(r, m.leftoverCopies)
	setLifecycleMetrics(r, lifecycleGauges{SegmentsLeft: m.decommissionLeft, BytesLeft: m.decommissionBytesLeft,
		Blocked: m.decommissionBlocked, Maintenance: m.maintenanceBrokers})
}

// CertWarning is how long before a certificate expires /status warns.
const CertWarning = 30 * 24 * time.Hour

// CertStatus is one of this broker's certificates in /status.
type CertStatus struct {
	File             string    `json:"file"`
	NotAfter         time.Time `json:"not_after"`
	ExpiresInSeconds float64   `json:"expires_in_seconds"`
	// Warning says the certificate expires within CertWarning (or has).
	Warning string `json:"warning,omitempty"`
}

// certStatus reads certs' expiries at now.
func certStatus(certs *pki.Certs, now time.Time) []CertStatus {
	if certs == nil {
		return nil
	}
	var out []CertStatus
	for _, e := range certs.Expiries() {
		left := e.NotAfter.Sub(now)
		cs := CertStatus{File: e.File, NotAfter: e.NotAfter, ExpiresInSeconds: left.Seconds()}
		switch {
		case left <= 0:
			cs.Warning = "expired: replace it and send SIGHUP"
		case left < CertWarning:
			cs.Warning = fmt.Sprintf("expires in %v: replace it and send SIGHUP", left.Round(time.Hour))
		}
		out = append(out, cs)
	}
	return out
}

// authMetrics are the security collectors: insecure mode, certificate
// expiry, refused requests, brokers the coordinator cannot authenticate.
type authMetrics struct {
	refusedTotal *prometheus.CounterVec // by reason: unauthenticated, forbidden
	authFailed   prometheus.Gauge
}

// watchCerts registers the security collectors on reg.
func (m *metrics) watchCerts(reg *prometheus.Registry, certs *pki.Certs, insecure bool) {
	const ns, sub = "malachi", "heal"
	ins := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "insecure",
		Help: "1 when this instance runs without authentication (insecure = true)."})
	if insecure {
		ins.Set(1)
	}
	m.auth.refusedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "auth_refused_total",
		Help: "Requests to this instance's rpc_listen refused for their credentials, by reason (unauthenticated, forbidden)."}, []string{"reason"})
	m.auth.authFailed = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "auth_failed_brokers",
		Help: "Brokers the coordinator could not authenticate (or that refused it) at the last pass (leader only)."})
	reg.MustRegister(ins, m.auth.refusedTotal, m.auth.authFailed)
	if certs == nil {
		return
	}
	reg.MustRegister(expiryCollector{certs: certs, desc: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "certificate_expiry_seconds"),
		"Seconds until the certificate expires (negative once it has), by file and serial number.", []string{"file", "serial"}, nil)})
}

// expiryCollector reports the certificates' expiries as they are at each
// scrape: a reload (SIGHUP) may replace them, and ca.crt may hold several.
type expiryCollector struct {
	certs *pki.Certs
	desc  *prometheus.Desc
}

func (c expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c expiryCollector) Collect(ch chan<- prometheus.Metric) {
	for _, e := range c.certs.Expiries() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, time.Until(e.NotAfter).Seconds(), e.File, e.Serial)
	}
}

// setEngine makes engine the one series of kind (probe or fsync) in
// engine_info: auto may switch the probe's engine after start.
func (m *metrics) setEngine(kind, engine string) {
	m.engine.DeletePartialMatch(prometheus.Labels{"kind": kind})
	m.engine.WithLabelValues(kind, engine).Set(1)
}

// refused counts a refusal of the rpc server.
func (m *metrics) refused(reason string) { m.auth.refusedTotal.WithLabelValues(reason).Inc() }

// observeBackfillStages records the stages one backfill went through (a
// stage it never reached is not observed).
func (m *metrics) observeBackfillStages(res catchup.Result) {
	m.backfillStages.WithLabelValues("wait").Observe(res.Wait.Seconds())
	if res.Transfer > 0 {
		m.backfillStages.WithLabelValues("transfer").Observe(res.Transfer.Seconds())
	}
	if res.Commit > 0 {
		m.backfillStages.WithLabelValues("commit").Observe(res.Commit.Seconds())
	}
}
