package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestEveryCommandHelpExitsZero: -h and --help print the usage and exit 0
// on every command and subcommand.
func TestEveryCommandHelpExitsZero(t *testing.T) {
	cmds := [][]string{{"status"}, {"plan"}, {"load"}, {"release"}, {"cert"},
		{"cert", "create-ca"}, {"cert", "create-broker"}, {"cert", "create-client"}, {"cert", "list"}}
	for _, cmd := range cmds {
		for _, h := range []string{"-h", "--help"} {
			var out, errb bytes.Buffer
			args := append(append([]string{}, cmd...), h)
			if code := run(args, &out, &errb); code != 0 || out.Len()+errb.Len() == 0 {
				t.Errorf("malachi %s: exit %d, printed %d bytes", strings.Join(args, " "), code, out.Len()+errb.Len())
			}
		}
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage:") {
			t.Errorf("malachi %s: exit %d, %q", strings.Join(args, " "), code, out.String())
		}
	}
}

// TestOnePrefixPerError: an error names the command once, also when the
// broker's answer is an error of its own (a refused load: the
// unavailable sentinel once repeated "malachi:").
func TestOnePrefixPerError(t *testing.T) {
	addr := fakeBroker(t, nil)
	for _, args := range [][]string{
		{"load", "--admin", addr, "--insecure", "--segments", "1", "--records", "1", "--size", "1"},
		{"status", "--admin", "127.0.0.1:1", "--insecure"},
		{"status", "--admin", "127.0.0.1:1", "--certs-dir", "/nonexistent"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 1 {
			t.Fatalf("malachi %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
		}
		if n := strings.Count(errb.String(), "malachi:"); n != 1 {
			t.Errorf("malachi %s: %d prefixes in %q", strings.Join(args, " "), n, errb.String())
		}
	}
}
