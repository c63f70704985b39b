package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/harness"
)

// TestLoadFailsFastWithoutQuorum: with two of three brokers killed,
// `malachi load` fails with "no quorum: 1 of 3 voters reachable" well
// before its --timeout (it hung for its 10-minute default, printing only
// "context canceled"), and `malachi status` says NO QUORUM with the last
// pass marked stale.
func TestLoadFailsFastWithoutQuorum(t *testing.T) {
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
	if _, err := c.WaitReady(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRegistered(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	cli := func(cmd string, args ...string) []string {
		return append(append([]string{cmd}, c.CLIFlags()...), args...)
	}
	survivor := c.Brokers()[0]
	for _, b := range c.Brokers()[1:] {
		if err := c.Kill(b); err != nil {
			t.Fatal(err)
		}
	}
	// The timeout only bounds a failure of the fix: the command must fail
	// on its own, naming the quorum, not on this deadline.
	var out, errb strings.Builder
	code := run(cli("load", "--admin", survivor.Admin, "--segments", "2", "--records", "2", "--size", "1KiB", "--timeout", "3m"), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "no quorum: 1 of 3 voters reachable") {
		t.Fatalf("load without quorum: exit %d, stderr %q, want 1 and the quorum named", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(cli("status", "--admin", survivor.Admin), &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"NO QUORUM", "no quorum: 1 of 3 voters reachable"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status without quorum lacks %q:\n%s", want, out.String())
		}
	}
	// The survivor shows its own last pass only if it led once; then the
	// pass is stale.
	if strings.Contains(out.String(), "last pass at") && !strings.Contains(out.String(), "STALE") {
		t.Errorf("status without quorum shows a last pass not marked stale:\n%s", out.String())
	}
}
