package deploy

import (
	"os/exec"
	"strings"
	"testing"
)

// promtool runs promtool with args in the prometheus directory and fails
// the test with its output when it exits non-zero. It skips, saying why,
// when promtool is not installed.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian package prometheus ships it; `make deps` installs promtool alone): the alerting rules are not checked")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = "prometheus"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The rules parse and every template in them is valid.
func TestPromtoolCheckRules(t *testing.T) {
	out := promtool(t, "check", "rules", "malachi-alerts.yml")
	if !strings.Contains(out, "SUCCESS: 9 rules found") {
		t.Errorf("promtool check rules: want 9 rules found:\n%s", out)
	}
}

// Every rule's unit tests (firing, not firing, annotations) pass.
func TestPromtoolTestRules(t *testing.T) {
	out := promtool(t, "test", "rules", "malachi-alerts_test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules: no SUCCESS:\n%s", out)
	}
}
