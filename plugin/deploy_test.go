package plugin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

// deployDir is where the alerting rules and the dashboard live.
const deployDir = "../deploy"

// exportedNames builds an instance's registry as Plugin.New does (with
// certificates), gives every labelled family a child (a vector with none
// exports nothing), gathers it, and returns every series name a query
// can use: histograms as _bucket, _sum and _count, summaries as
// themselves, _sum and _count, the others as gathered.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	l, err := pki.CreateLocal(t.TempDir(), []meta.BrokerID{1}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.LoadBroker(l.BrokerDir(1))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.watchCerts(reg, certs, false)
	m.rpcSeconds.WithLabelValues("probe").Observe(0.01)
	m.setEngine("probe", "syscall")
	m.refused("forbidden")
	m.decommissionLeft.WithLabelValues("4").Set(1)
	m.decommissionBytesLeft.WithLabelValues("4").Set(1)
	m.decommissionBlocked.WithLabelValues("4", "no_spare_broker").Set(1)
	m.leftoverCopies.WithLabelValues("returned_broker").Set(1)
	m.backfillStages.WithLabelValues("wait").Observe(0.01)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		n := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[n], names[n+"_sum"], names[n+"_count"] = true, true, true
		default:
			names[n] = true
		}
	}
	return names
}

// grafanaVars are the dashboard's interval variables, replaced by a
// duration before a query is parsed ($job stays: it is inside a string).
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// queryMetrics parses expr (PromQL) and returns the metric names its
// selectors name; a selector without a metric name is an error.
func queryMetrics(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return nil, fmt.Errorf("parsing %q: %w", expr, err)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, lm := range vs.LabelMatchers {
			if name == "" && lm.Name == model.MetricNameLabel && lm.Type == labels.MatchEqual {
				name = lm.Value
			}
		}
		if name == "" {
			err = fmt.Errorf("%q: selector %s names no metric", expr, vs)
		}
		names = append(names, name)
		return nil
	})
	return names, err
}

// checkQueries returns one error per query of queries (where → PromQL)
// that does not parse or names a metric not in exported.
func checkQueries(queries map[string]string, exported map[string]bool) []error {
	var errs []error
	for _, where := range slices.Sorted(func(yield func(string) bool) {
		for k := range queries {
			if !yield(k) {
				return
			}
		}
	}) {
		names, err := queryMetrics(queries[where])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		for _, n := range names {
			if !exported[n] {
				errs = append(errs, fmt.Errorf("%s: %q names %s, which the plugin does not export", where, queries[where], n))
			}
		}
	}
	return errs
}

// ruleQueries reads every rule's expr from the alerting rules file.
func ruleQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "malachi-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("malachi-alerts.yml: %v", err)
	}
	q := map[string]string{}
	for _, g := range f.Groups {
		for i, r := range g.Rules {
			q[fmt.Sprintf("rule %s/%d %s%s", g.Name, i, r.Alert, r.Record)] = r.Expr
		}
	}
	return q
}

// labelValues is Grafana's variable query label_values(metric, label).
var labelValues = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)

// dashboardQueries walks the dashboard's JSON for every "expr" (panel
// targets, rows' panels included) and every label_values variable query.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "malachi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("malachi.json: %v", err)
	}
	q := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					q[path+".expr"] = s
				}
				if s, ok := x.(string); ok {
					for i, m := range labelValues.FindAllStringSubmatch(s, -1) {
						q[fmt.Sprintf("%s.%s[%d]", path, k, i)] = m[1]
					}
				}
				walk(path+"."+k, x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		}
	}
	walk("dashboard", doc)
	return q
}

// Every query of the alerting rules and of the Grafana dashboard parses as
// PromQL and names only metrics the plugin registers.
func TestDeployQueriesNameRegisteredMetrics(t *testing.T) {
	exported := exportedNames(t)
	rules, dash := ruleQueries(t), dashboardQueries(t)
	if len(rules) < 8 || len(dash) < 30 {
		t.Fatalf("read %d rules and %d dashboard queries: want at least 8 and 30", len(rules), len(dash))
	}
	for _, q := range []map[string]string{rules, dash} {
		for _, err := range checkQueries(q, exported) {
			t.Error(err)
		}
	}
	// The lifecycle gauges other parts set are declared with these labels.
	for name, want := range map[string][]string{
		"malachi_heal_decommission_segments_left":    {"broker"},
		"malachi_heal_decommission_bytes_left":       {"broker"},
		"malachi_heal_decommission_blocked_segments": {"broker", "reason"},
		"malachi_heal_maintenance_brokers":           nil,
		"malachi_heal_leftover_copies":               {"cause"},
		"malachi_heal_hold":                          nil,
	} {
		if !exported[name] {
			t.Errorf("%s (labels %v) is not registered", name, want)
		}
	}
}

// The check fails on a query naming a metric the plugin does not export,
// on one that does not parse, and on a selector without a name.
func TestCheckQueriesRejectsUnknownMetrics(t *testing.T) {
	exported := exportedNames(t)
	bad := map[string]string{
		"typo":      `sum(rate(malachi_heal_backfill_byte_total[5m]))`,
		"bare hist": `rate(malachi_heal_pass_duration_seconds[5m])`,
		"no _total": `rate(malachi_heal_passes[$__rate_interval])`,
		"syntax":    `sum(malachi_heal_leader`,
		"no name":   `{job="malachi"}`,
		"in binop":  `malachi_heal_leader and on (instance) malachi_heal_no_such_gauge`,
	}
	errs := checkQueries(bad, exported)
	if len(errs) != len(bad) {
		t.Fatalf("%d errors for %d bad queries: %v", len(errs), len(bad), errs)
	}
	good := map[string]string{"ok": `histogram_quantile(0.99, sum by (le) (rate(malachi_heal_pass_duration_seconds_bucket{job=~"$job"}[$__rate_interval])))`}
	if errs := checkQueries(good, exported); len(errs) != 0 {
		t.Errorf("a good query rejected: %v", errs)
	}
}

// malachi_heal_hold follows the last pass's HoldReason.
func TestHoldGaugeFollowsTheReport(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	for _, tc := range []struct {
		reason string
		want   float64
	}{{"", 0}, {"brokers_missing: 3 of 6 within 1s", 1}, {"brokers_missing: 2 of 6 within 1s", 1}, {"", 0}} {
		m.observePass(&heal.Report{HoldReason: tc.reason}, 0.01)
		if got := testutil.ToFloat64(m.hold); got != tc.want {
			t.Errorf("hold_reason %q: malachi_heal_hold %v, want %v", tc.reason, got, tc.want)
		}
	}
}

// deploy/README.md lists every metric the plugin registers, and names no
// metric it does not: the operator's reference stays the code's.
func TestDeployReadmeListsEveryMetric(t *testing.T) {
	exported := exportedNames(t)
	doc, err := os.ReadFile(filepath.Join(deployDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`malachi_heal_[a-z0-9_]+`).FindAllString(string(doc), -1) {
		named[m] = true
		if !exported[m] && !exported[m+"_bucket"] {
			t.Errorf("deploy/README.md names %s, which the plugin does not register", m)
		}
	}
	for name := range exported {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && exported[b+"_bucket"] {
				base = b
			}
		}
		if !named[base] {
			t.Errorf("%s is registered but not listed in deploy/README.md", base)
		}
	}
}
