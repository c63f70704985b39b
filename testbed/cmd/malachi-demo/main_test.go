package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/demo"
	"github.com/malachi-log/malachi/testbed/harness"
)

// TestFlagErrors: a bad command line exits 2 naming the flag, once
// prefixed; the demo's own failures are in its report, on stdout (exit 1).
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
		stdout string
	}{
		{[]string{"--brokers", "-1"}, 2, "malachi-demo: usage: --brokers -1", ""},
		{[]string{"--poll", "0s"}, 2, "--poll 0s", ""},
		{[]string{"extra"}, 2, `unexpected argument "extra"`, ""},
		{[]string{"--malachid", "/nonexistent/malachid", "--json"}, 1, "", `"error": "--malachid /nonexistent/malachid: stat /nonexistent/malachid: no such file or directory"`},
		{[]string{"--malachid", os.Args[0], "--malachi", "/nonexistent/malachi", "--json"}, 1, "", `"error": "--malachi /nonexistent/malachi: stat /nonexistent/malachi: no such file or directory"`},
		{[]string{"--dir", "/", "--json"}, 1, "", "not empty"},
	} {
		var out, errb strings.Builder
		code := run(tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.stderr) || !strings.Contains(out.String(), tc.stdout) {
			t.Errorf("malachi-demo %q: exit %d, stderr %q, stdout %s; want exit %d, %q and %q", tc.args, code, errb.String(), out.String(), tc.code, tc.stderr, tc.stdout)
		}
		if n := strings.Count(errb.String(), "malachi-demo:"); tc.code == 2 && n != 1 {
			t.Errorf("malachi-demo %q: %d prefixes in %q", tc.args, n, errb.String())
		}
	}
}

// TestHelpExitsZero: -h and --help print the flags and exit 0.
func TestHelpExitsZero(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		var out, errb bytes.Buffer
		if code := run([]string{h}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "-malachi ") {
			t.Errorf("malachi-demo %s: exit %d, %q", h, code, errb.String())
		}
	}
}

// End-to-end tests: real malachid processes on loopback.

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries builds malachid, malachi and malachi-demo once per test run.
// The tests skip, saying why, while cmd/malachid does not build.
func binaries(t *testing.T) (malachid, malachi, malachiDemo string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the end-to-end tests with real processes")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = harness.BuildTemp(context.Background(), "malachi-demo-e2e-bin-", "./cmd/malachid", "./cmd/malachi", "./testbed/cmd/malachi-demo")
	})
	if buildErr != nil {
		if strings.Contains(buildErr.Error(), "./cmd/malachid") {
			t.Skipf("cmd/malachid does not build yet, so there is no broker to run: %v", buildErr)
		}
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "malachid"), filepath.Join(buildDir, "malachi"), filepath.Join(buildDir, "malachi-demo")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// processesOf lists the pids of running processes whose executable is bin.
func processesOf(t *testing.T, bin string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc to look for leftover processes: %v", err)
	}
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			continue // a zombie has exited
		}
		if arg0, _, _ := bytes.Cut(cmdline, []byte{0}); string(arg0) == bin {
			pids = append(pids, pid)
		}
	}
	return pids
}

func waitNoProcesses(t *testing.T, bin string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		pids := processesOf(t, bin)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("brokers still running %v after malachi-demo exited: %v", within, pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// --insecure runs the brokers in plaintext: no certificates anywhere, every
// broker in insecure mode, and the kill still healed.
func TestDemoInsecure(t *testing.T) {
	malachid, malachi, _ := binaries(t)
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"--malachid", malachid, "--malachi", malachi, "--brokers", "4", "--rf", "3", "--segments", "6", "--segment-size", "16KiB",
		"--faults", "kill,restart", "--insecure", "--json", "--dir", dir, "--stage-timeout", "60s"}, &out, &errb)
	var rep demo.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errb.String())
	}
	if code != 0 || !rep.OK || rep.Config["insecure"] != "true" || len(rep.Faults) != 2 || !rep.Faults[0].Healed {
		t.Fatalf("exit %d, ok %v, config %v, faults %+v\n%s", code, rep.OK, rep.Config, rep.Faults, errb.String())
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "b1", "malachid.toml"))
	if err != nil || !strings.Contains(string(cfg), "insecure = true") || strings.Contains(string(cfg), "certs_dir") {
		t.Fatalf("broker 1's config: %v\n%s", err, cfg)
	}
	if _, err := os.Stat(filepath.Join(dir, "certs")); !os.IsNotExist(err) {
		t.Fatalf("%s/certs: %v, want no certificates", dir, err)
	}
	waitNoProcesses(t, malachid, 10*time.Second)
}

// A bit flip keeps the size: with the scrubber off it goes undetected,
// which the demo must say (and exit 1) rather than hide; it then puts the
// bits back, so nothing is lost.
func TestDemoBitflipReportedUndetected(t *testing.T) {
	malachid, malachi, _ := binaries(t)
	var out, errb bytes.Buffer
	code := run([]string{"--malachid", malachid, "--malachi", malachi, "--brokers", "3", "--rf", "3", "--segments", "6", "--segment-size", "16KiB",
		"--faults", "bitflip", "--scrub-interval", "0s", "--copies", "1", "--json", "--dir", t.TempDir(), "--stage-timeout", "20s"}, &out, &errb)
	var rep demo.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errb.String())
	}
	if len(rep.Faults) != 1 || !rep.Faults[0].Injected {
		t.Fatalf("faults: %+v\n%s", rep.Faults, errb.String())
	}
	f := rep.Faults[0]
	if code != 1 || rep.OK || f.Detected || !strings.Contains(f.Note, "NOT DETECTED") {
		t.Fatalf("undetected bit flip: exit %d ok %v stage %+v", code, rep.OK, f)
	}
	if rep.DataLossSegments != 0 || rep.UnderReplicated != 0 || rep.Failed != 0 {
		t.Fatalf("after the demo restored the bits: %+v", rep)
	}
	waitNoProcesses(t, malachid, 10*time.Second)
}

// SIGINT stops the demo and its brokers; SIGKILL of malachi-demo still takes the
// brokers down (parent-death signal).
func TestDemoSignalsCleanUp(t *testing.T) {
	malachid, malachi, malachiDemo := binaries(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(malachiDemo, "--malachid", malachid, "--malachi", malachi, "--brokers", "4", "--segments", "2000", "--segment-size", "64KiB", "--dir", dir)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for len(processesOf(t, malachid)) < 4 {
				if ctx.Err() != nil {
					cmd.Process.Kill()
					t.Fatalf("brokers never started:\n%s", out.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			if sig == syscall.SIGINT {
				ee, ok := err.(*exec.ExitError)
				if !ok || ee.ExitCode() != 1 {
					t.Errorf("after SIGINT: %v, want exit status 1\n%s", err, out.String())
				}
				if !strings.Contains(out.String(), "NOT HEALED") {
					t.Errorf("no report after SIGINT:\n%s", out.String())
				}
			}
			waitNoProcesses(t, malachid, 10*time.Second)
		})
	}
}
