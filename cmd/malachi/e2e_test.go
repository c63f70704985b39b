package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/harness"
)

// End-to-end tests: real malachid processes on loopback, driven by the CLI.

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries builds malachid once per test run (the tests run the CLI as
// run, in this process). They skip, saying why, while cmd/malachid does
// not build.
func binaries(t *testing.T) (malachid string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the end-to-end tests with real processes")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = harness.BuildTemp(context.Background(), "malachi-e2e-bin-", "./cmd/malachid")
	})
	if buildErr != nil {
		if strings.Contains(buildErr.Error(), "./cmd/malachid") {
			t.Skipf("cmd/malachid does not build yet, so there is no broker to run: %v", buildErr)
		}
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "malachid")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// status, load and plan against a running cluster.
func TestCommandsAgainstCluster(t *testing.T) {
	malachid := binaries(t)
	c, err := harness.New(harness.Config{Bin: malachid, Root: t.TempDir(), Brokers: 3, RF: 3, Tick: 200 * time.Millisecond, Grace: time.Second, Raft: harness.DemoRaft(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx := context.Background()
	start := time.Now()
	if _, err := c.WaitReady(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRegistered(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster ready in %v", time.Since(start))
	admin := c.Brokers()[1].Admin
	// cli is a command line of cmd as the cluster's operator.
	cli := func(cmd string, args ...string) []string {
		return append(append([]string{cmd}, c.CLIFlags()...), args...)
	}
	defer func(t0 time.Time) { t.Logf("commands took %v", time.Since(t0)) }(time.Now())
	var out, errb strings.Builder
	if code := run(cli("load", "--admin", admin, "--segments", "5", "--records", "8", "--size", "1KiB", "--prefix", "t"), &out, &errb); code != 0 {
		t.Fatalf("load: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "loaded 5 sealed segments of 8 records") {
		t.Errorf("load output: %s", out.String())
	}
	out.Reset()
	if code := run(cli("status", "--admin", admin, "--json"), &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	var st clusterStatus
	if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if st.Sealed != 5 || st.UnderReplicated != 0 || len(st.Brokers) != 3 || st.Leader == 0 || st.ReplicationFactor != 3 {
		t.Fatalf("status: %+v", st)
	}
	for _, b := range st.Brokers {
		if !b.Up || b.Copies != 5 || b.Heal != "enabled" {
			t.Errorf("broker %+v", b)
		}
	}
	checkRefusals(t, c, admin, cli)
	// A broker down (not the leader, so that no election runs) shows by
	// name and address.
	victim := c.Brokers()[2]
	if st.Leader == victim.ID {
		victim = c.Brokers()[0]
	}
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(cli("status", "--admin", admin), &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"DOWN", victim.Admin, "segments: 5 (5 sealed, 0 active)", "with a replica on a down broker 5"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	errb.Reset()
	if code := run(cli("plan", "--admin", admin), &out, &errb); code != 0 {
		t.Fatalf("plan: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"dry run of the next heal pass at index", "nothing is executed", "would find: sealed=5"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, out.String())
		}
	}
	t.Logf("plan with broker %d down:\n%s", victim.ID, out.String())
	out.Reset()
	if code := run(cli("plan", "--admin", admin, "--json"), &out, &errb); code != 0 {
		t.Fatalf("plan --json: exit %d: %s", code, errb.String())
	}
	var p planDoc
	if err := json.Unmarshal([]byte(out.String()), &p); err != nil || p.Index == 0 || p.Report.Sealed != 5 {
		t.Fatalf("plan --json: %v: %s", err, out.String())
	}
	// Past the grace delay, with no spare broker, the dry run and the
	// status report the segments failed, by reason.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out.Reset()
		run(cli("plan", "--admin", admin), &out, &errb)
		if strings.Contains(out.String(), "report_failed") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "reason=no_spare_broker") {
		t.Errorf("plan past the grace delay, 2 of 3 brokers for RF 3:\n%s", out.String())
	}
	t.Logf("plan past the grace:\n%s", out.String())
	deadline = time.Now().Add(30 * time.Second)
	for {
		out.Reset()
		run(cli("status", "--admin", admin), &out, &errb)
		if strings.Contains(out.String(), "failed no_spare_broker: 5") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "failed no_spare_broker: 5") || !strings.Contains(out.String(), fmt.Sprintf("dead brokers [%d]", victim.ID)) {
		t.Errorf("status past the grace delay:\n%s", out.String())
	}
	out.Reset()
	if code := run(cli("release", "--admin", admin), &out, &errb); code != 0 || !strings.Contains(out.String(), "released") {
		t.Fatalf("release: exit %d: %s %s", code, out.String(), errb.String())
	}
}

// checkRefusals: on cluster c, the viewer reads but may not load and
// plaintext reaches nothing; both refusals say why and change nothing
// (the 5 segments loaded before stay the only ones).
func checkRefusals(t *testing.T, c *harness.Cluster, admin string, cli func(string, ...string) []string) {
	t.Helper()
	var out, errb strings.Builder
	var st clusterStatus
	viewer := []string{"--certs-dir", c.Certs().ClientDir(), "--user", "viewer"}
	if code := run(append([]string{"status", "--admin", admin, "--json"}, viewer...), &out, &errb); code != 0 {
		t.Fatalf("status as viewer: exit %d: %s", code, errb.String())
	}
	errb.Reset()
	if code := run(append([]string{"load", "--admin", admin, "--segments", "1", "--records", "1", "--size", "1KiB", "--prefix", "v"}, viewer...), &out, &errb); code != 1 || !strings.Contains(errb.String(), "needs a certificate of role operator") {
		t.Errorf("load as viewer: exit %d, stderr %q; want exit 1 naming the operator role", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"status", "--admin", admin, "--insecure"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "HTTPS") {
		t.Errorf("status --insecure against a TLS cluster: exit %d, stderr %q; want exit 1 saying it wants HTTPS", code, errb.String())
	}
	out.Reset()
	if code := run(cli("status", "--admin", admin, "--json"), &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	if err := json.Unmarshal([]byte(out.String()), &st); err != nil || st.Sealed != 5 || st.Insecure {
		t.Fatalf("after the refusals: %+v %v, want the 5 sealed segments only, not insecure", st, err)
	}
}
