package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/testbed/harness"
)

// TestHelpEveryWayExitsZero: -h, --help and help print the flags and exit 0.
func TestHelpEveryWayExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"--config", "x.toml", "--help"}} {
		var stderr bytes.Buffer
		if code := run(args, &stderr); code != 0 || !strings.Contains(stderr.String(), "-heal.enabled") {
			t.Errorf("malachid %s: exit %d, %q", strings.Join(args, " "), code, stderr.String())
		}
	}
}

// TestEveryRefusalNamesTheCommandOnce: configuration and start-up
// failures carry one "malachid:" each.
func TestEveryRefusalNamesTheCommandOnce(t *testing.T) {
	dir := t.TempDir()
	raft, err := harness.FreeLoopbackPorts(1) // a port nothing listens on, claimed for this process
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--bogus"},
		{"--config", filepath.Join(dir, "missing.toml")},
		{"--id", "0"},
		{"--insecure", "--data_dir", dir, "--heal.enabled", "--heal.tick", "0s"},
		{"--insecure", "--data_dir", filepath.Join(file, "sub"), "--raft_listen", raft[0], "--admin_listen", "127.0.0.1:0"},
		{"--data_dir", dir},
	} {
		var stderr bytes.Buffer
		code := run(args, &stderr)
		if code == 0 {
			t.Fatalf("malachid %s: exit 0", strings.Join(args, " "))
		}
		last := strings.TrimSpace(stderr.String())
		if i := strings.LastIndex(last, "\n"); i >= 0 {
			last = last[i+1:]
		}
		if n := strings.Count(last, "malachid:"); n != 1 {
			t.Errorf("malachid %s: %d prefixes in %q", strings.Join(args, " "), n, last)
		}
	}
}
