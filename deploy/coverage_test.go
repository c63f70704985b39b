package deploy

import (
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Every alert of the rules file has a unit test where it fires and one
// where it does not, and every unit test names an alert that exists.
func TestEveryAlertTestedFiringAndNot(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	read(t, "malachi-alerts.yml", &rules)
	read(t, "malachi-alerts_test.yml", &tests)
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if !fires[r.Alert] || !silent[r.Alert] {
				t.Errorf("alert %s: tested firing %v, not firing %v; want both", r.Alert, fires[r.Alert], silent[r.Alert])
			}
		}
	}
	if len(alerts) < 9 {
		t.Errorf("%d alerts in malachi-alerts.yml, want 9", len(alerts))
	}
	for name := range fires {
		if !alerts[name] {
			t.Errorf("a unit test names alert %s, which malachi-alerts.yml does not define", name)
		}
	}
}

func read(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("prometheus", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}
