package demo

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/stage"

	"github.com/malachi-log/malachi/testbed/harness"
)

func TestParseDemoFlagsDefaults(t *testing.T) {
	o, err := ParseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Brokers != 5 || o.RF != 3 || o.Segments != 300 || o.SegmentSize != 1<<20 || o.JSON || o.Keep {
		t.Fatalf("defaults: %+v", o)
	}
	if !slices.Equal(o.Stages, stage.Names) {
		t.Fatalf("5 brokers at RF 3 run every stage, got %v", o.Stages)
	}
	if o.Insecure {
		t.Fatal("the demo runs in insecure mode by default")
	}
	o, err = ParseFlags([]string{"--brokers", "4", "--segments", "20", "--segment-size", "64KiB", "--json", "--keep", "--grace", "500ms", "--insecure"}, io.Discard)
	if err != nil || o.Brokers != 4 || o.SegmentSize != 64<<10 || !o.JSON || !o.Keep || o.Grace != 500*time.Millisecond || !o.Insecure {
		t.Fatalf("%+v, %v", o, err)
	}
	if want := slices.DeleteFunc(slices.Clone(stage.Names), func(s string) bool { return s == "backfill-kill" }); !slices.Equal(o.Stages, want) {
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
		{[]string{"--brokers", "3", "--faults", "kill"}, "--faults kill: the killed broker's copies move to a spare broker: 3 live brokers for replication factor 3; want --brokers 4"},
		{[]string{"--faults", "restart"}, "restarts the broker the kill stage killed"},
		{[]string{"--brokers", "4", "--faults", "kill,latch"}, "--faults latch: a latched copy is replaced on a spare broker: 3 live brokers"},
		{[]string{"--brokers", "4", "--faults", "kill,bitflip"}, "--faults bitflip: a copy the scrubber finds corrupt is replaced on a spare broker"},
		{[]string{"--brokers", "3", "--faults", "bitflip"}, "3 live brokers for replication factor 3; want --brokers 4 or more"},
		{[]string{"--tick", "0s"}, "--tick 0s"},
		{[]string{"--copies", "0"}, "--copies 0"},
		{[]string{"--stage-timeout", "-1s"}, "--stage-timeout -1s"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--segments", "100000", "--segment-size", "1GiB"}, "more than 64 GiB"},
		{[]string{"--nemesis", "chaos"}, `--nemesis "chaos": want random`},
		{[]string{"--nemesis", "random", "--faults", "kill"}, "the nemesis replaces the stages"},
		{[]string{"--nemesis", "random", "--duration", "1s"}, "--duration 1s"},
		{[]string{"--nemesis", "random", "--rf", "1"}, "want --rf 2 or more"},
		{[]string{"--nemesis", "random", "--brokers", "2", "--rf", "2"}, "want 3 or more"},
		{[]string{"--nemesis", "random", "--nemesis-kinds", "kill,meteor"}, `--nemesis-kinds: unknown fault kind "meteor"`},
	} {
		_, err := ParseFlags(tc.args, io.Discard)
		if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFlags(%q) = %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestDefaultStagesDroppedWhenInfeasible(t *testing.T) {
	o, err := ParseFlags([]string{"--brokers", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Stages, []string{"delete", "truncate", "extend", "maintenance", "swap", "nospare", "lost"}) {
		t.Fatalf("3 brokers at RF 3: stages %v", o.Stages)
	}
	skipped := o.skippedStages()
	for _, st := range []string{"kill", "restart", "bitflip", "latch", "leader", "pause", "diskfull", "readonly", "backfill-kill", "decommission"} {
		if skipped[st] == "" {
			t.Errorf("stage %s dropped without a reason: %v", st, skipped)
		}
	}
	// Explicit stages are run in the fixed order whatever the order given.
	o, err = ParseFlags([]string{"--faults", "leader,delete,restart,kill"}, io.Discard)
	if err != nil || !slices.Equal(o.Stages, []string{"kill", "restart", "delete", "leader"}) {
		t.Fatalf("%v, %v", o.Stages, err)
	}
	// Without a restart, the leader kill comes on top of the first kill.
	if _, err := ParseFlags([]string{"--brokers", "4", "--faults", "kill,leader"}, io.Discard); err == nil || !strings.Contains(err.Error(), "the killed leader's copies move to a spare broker: 3 live brokers for replication factor 3; want --brokers 5") {
		t.Fatalf("4 brokers, kill then leader without restart: %v", err)
	}
}

func TestParseNemesisFlags(t *testing.T) {
	o, err := ParseFlags([]string{"--nemesis", "random", "--seed", "7", "--duration", "10m", "--segments", "30"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Nemesis != "random" || o.Seed != 7 || o.NemesisDuration != 10*time.Minute || len(o.Stages) != 0 || len(o.skippedStages()) != 0 {
		t.Fatalf("%+v", o)
	}
	cfg := o.clusterConfig("malachid")
	if !cfg.Hosts || cfg.LoopBroker != nemesisDiskBroker || cfg.LoopBytes < 64<<20 {
		t.Fatalf("the nemesis's cluster: hosts %v, loop broker %d of %d bytes", cfg.Hosts, cfg.LoopBroker, cfg.LoopBytes)
	}
	o, err = ParseFlags([]string{"--nemesis", "random", "--nemesis-no-net", "--nemesis-no-disk"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := o.clusterConfig("malachid"); cfg.Hosts || cfg.LoopBroker != 0 {
		t.Fatalf("--nemesis-no-net --nemesis-no-disk: hosts %v, loop broker %d", cfg.Hosts, cfg.LoopBroker)
	}
	// Process kinds alone: no loop disk, no hosts of their own.
	o, err = ParseFlags([]string{"--nemesis", "random", "--nemesis-kinds", " kill, swap"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := o.clusterConfig("malachid"); !slices.Equal(o.NemesisKinds, []harness.Kind{harness.KindKill, harness.KindSwap}) || cfg.Hosts || cfg.LoopBroker != 0 {
		t.Fatalf("--nemesis-kinds kill,swap: kinds %v, hosts %v, loop broker %d", o.NemesisKinds, cfg.Hosts, cfg.LoopBroker)
	}
	o, err = ParseFlags([]string{"--nemesis", "random", "--nemesis-kinds", "readonly"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := o.clusterConfig("malachid"); cfg.Hosts || cfg.LoopBroker != nemesisDiskBroker {
		t.Fatalf("--nemesis-kinds readonly: hosts %v, loop broker %d", cfg.Hosts, cfg.LoopBroker)
	}
	if cfg := (&Options{}).clusterConfig("malachid"); cfg.Hosts || cfg.LoopBroker != 0 {
		t.Fatal("the stages' cluster changed: hosts or a loop disk at start")
	}
}
