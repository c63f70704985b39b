package main

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseDemoFlagsDefaults(t *testing.T) {
	o, err := parseDemoFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Brokers != 5 || o.RF != 3 || o.Segments != 300 || o.SegmentSize != 1<<20 || o.JSON || o.Keep {
		t.Fatalf("defaults: %+v", o)
	}
	if !slices.Equal(o.Stages, allStages) {
		t.Fatalf("5 brokers at RF 3 run every stage, got %v", o.Stages)
	}
	if o.Insecure {
		t.Fatal("the demo runs in insecure mode by default")
	}
	o, err = parseDemoFlags([]string{"--brokers", "4", "--segments", "20", "--segment-size", "64KiB", "--json", "--keep", "--grace", "500ms", "--insecure"}, io.Discard)
	if err != nil || o.Brokers != 4 || o.SegmentSize != 64<<10 || !o.JSON || !o.Keep || o.Grace != 500*time.Millisecond || !o.Insecure {
		t.Fatalf("%+v, %v", o, err)
	}
	if want := slices.DeleteFunc(slices.Clone(allStages), func(s string) bool { return s == "backfill-kill" }); !slices.Equal(o.Stages, want) {
		t.Fatalf("4 brokers at RF 3 (the kill is restarted) run every stage but backfill-kill (two brokers down), got %v", o.Stages)
	}
}

func TestParseDemoFlagsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--brokers", "0"}, "--brokers 0"},
		{[]string{"--brokers", "x"}, `invalid value "x" for flag -brokers`},
		{[]string{"--rf", "6"}, "--rf 6 is more than --brokers 5"},
		{[]string{"--rf", "0"}, "--rf 0"},
		{[]string{"--segments", "0"}, "--segments 0"},
		{[]string{"--segment-size", "12"}, "--segment-size 12"},
		{[]string{"--segment-size", "1 furlong"}, `size "1 furlong"`},
		{[]string{"--faults", "kill,meteor"}, `unknown stage "meteor"`},
		{[]string{"--faults", "kill,kill"}, `stage "kill" given twice`},
		{[]string{"--brokers", "3", "--faults", "kill"}, "--faults kill: killing one of 3 brokers leaves 2 for replication factor 3"},
		{[]string{"--faults", "restart"}, "restarts the broker the kill stage killed"},
		{[]string{"--brokers", "4", "--faults", "kill,latch"}, "--faults latch: a latched copy is replaced on a spare broker: 3 live brokers"},
		{[]string{"--brokers", "4", "--faults", "kill,bitflip"}, "--faults bitflip: a copy the scrubber finds corrupt is replaced on a spare broker"},
		{[]string{"--brokers", "3", "--faults", "bitflip"}, "3 live brokers for replication factor 3 leave none"},
		{[]string{"--tick", "0s"}, "--tick 0s"},
		{[]string{"--copies", "0"}, "--copies 0"},
		{[]string{"--stage-timeout", "-1s"}, "--stage-timeout -1s"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--segments", "100000", "--segment-size", "1GiB"}, "more than 64 GiB"},
	} {
		_, err := parseDemoFlags(tc.args, io.Discard)
		if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseDemoFlags(%q) = %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestDefaultStagesDroppedWhenInfeasible(t *testing.T) {
	o, err := parseDemoFlags([]string{"--brokers", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Stages, []string{"delete", "truncate", "extend", "swap", "nospare", "lost"}) {
		t.Fatalf("3 brokers at RF 3: stages %v", o.Stages)
	}
	skipped := o.skippedStages()
	for _, st := range []string{"kill", "restart", "bitflip", "latch", "leader", "pause", "diskfull", "readonly", "backfill-kill"} {
		if skipped[st] == "" {
			t.Errorf("stage %s dropped without a reason: %v", st, skipped)
		}
	}
	// Explicit stages are run in the fixed order whatever the order given.
	o, err = parseDemoFlags([]string{"--faults", "leader,delete,restart,kill"}, io.Discard)
	if err != nil || !slices.Equal(o.Stages, []string{"kill", "restart", "delete", "leader"}) {
		t.Fatalf("%v, %v", o.Stages, err)
	}
	// Without a restart, the leader kill comes on top of the first kill.
	if _, err := parseDemoFlags([]string{"--brokers", "4", "--faults", "kill,leader"}, io.Discard); err == nil || !strings.Contains(err.Error(), "killing the leader leaves 2 live brokers") {
		t.Fatalf("4 brokers, kill then leader without restart: %v", err)
	}
}

func TestCommandFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status"}, 2, "--admin is required"},
		{[]string{"status", "--admin", "localhost"}, 2, `--admin "localhost": want host:port`},
		{[]string{"plan", "--admin", ":"}, 2, "want host:port with both parts"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "0", "--records", "1", "--size", "1"}, 2, "--segments 0"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "1", "--records", "1"}, 2, "--size is required"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "1", "--records", "1", "--size", "1", "--prefix", "a/b"}, 2, `--prefix "a/b"`},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{nil, 2, "usage:"},
		{[]string{"status", "--admin", "127.0.0.1:1", "--insecure"}, 1, "broker unreachable: broker 127.0.0.1:1: GET /v1/health"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "1", "--records", "1", "--size", "4KiB", "--insecure"}, 1, "broker unreachable: broker 127.0.0.1:1: POST /v1/load"},
		{[]string{"status", "--admin", "127.0.0.1:1", "--certs-dir", "/nonexistent"}, 1, "--certs-dir /nonexistent: pki: certs directory"},
		{[]string{"demo", "--brokers", "-1"}, 2, "--brokers -1"},
		{[]string{"demo", "--poll", "0s"}, 2, "--poll 0s"},
		{[]string{"demo", "--malachid", "/nonexistent/malachid", "--json"}, 1, ""},
		{[]string{"demo", "--dir", "/", "--json"}, 1, "not empty"},
	} {
		var out, errb strings.Builder
		code := run(tc.args, &out, &errb)
		if tc.args != nil && tc.args[0] == "demo" && tc.code == 1 {
			// The demo's own failures are in its report, on stdout.
			want := tc.want
			if want == "" {
				want = `"error": "--malachid /nonexistent/malachid: stat /nonexistent/malachid: no such file or directory"`
			}
			if code != tc.code || !strings.Contains(out.String(), want) {
				t.Errorf("malachi %q: exit %d, stdout %s", tc.args, code, out.String())
			}
			continue
		}
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("malachi %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}

// TestDemoHelpExitsZero: `malachi demo -h` prints its flags and exits 0,
// as every other command's -h does.
func TestDemoHelpExitsZero(t *testing.T) {
	for _, cmd := range [][]string{{"demo", "-h"}, {"status", "-h"}, {"cert", "-h"}} {
		var out, errb bytes.Buffer
		if code := run(cmd, &out, &errb); code != 0 || out.Len()+errb.Len() == 0 {
			t.Errorf("malachi %s: exit %d, printed %d bytes", strings.Join(cmd, " "), code, out.Len()+errb.Len())
		}
	}
}
