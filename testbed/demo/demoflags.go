package demo

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/nemesis"
	"github.com/malachi-log/malachi/testbed/stage"
)

// Options are the flags of malachi-demo (testbed/cmd/malachi-demo); the stages read the
// embedded stage.Options.
type Options struct {
	stage.Options
	JSON        bool
	Keep        bool
	Malachid    string
	Dir         string
	Stages      []string
	sizeSet     bool // --segments or --segment-size given explicitly
	RaftTimeout time.Duration
	SettleBatch int
	ScrubRate   int64
	// Compare (--backfill-rate compare) runs, instead of the stages, the
	// kill once per mode of the frontier (healrun.Modes: fixed rates from
	// 8 MiB/s to unthrottled, and auto) under the --clients load,
	// CompareRounds times, and reports what each cost the clients, each
	// round's R* and auto against it (testbed/healrun).
	Compare       bool
	CompareRounds int
	Seed          uint64
	// Insecure runs the cluster in plaintext without certificates
	// (insecure = true in every broker's config).
	Insecure bool
	// Nemesis is "" (the stages) or "random": the randomized nemesis
	// (testbed/nemesis) for NemesisDuration, its schedule drawn from Seed.
	Nemesis         string
	NemesisDuration time.Duration
	// NemesisNoDisk leaves the disk faults out (no loop-mounted disk);
	// NemesisNoNet the network faults (the brokers on loopback, not on
	// hosts of their own).
	NemesisNoDisk bool
	NemesisNoNet  bool
	// NemesisKinds, when set, are the only fault kinds the nemesis draws
	// (each must be one this cluster can take); nemesisKindList is the
	// flag's text.
	NemesisKinds    []harness.Kind
	nemesisKindList string
	// Clients is the number of Kafka producers (testbed/kafkaload) run
	// through the brokers' Kafka listeners during the stages or the
	// nemesis, with a group consumer beside them, checked at the end (2
	// by default; 0: no clients).
	Clients int
}

// ErrUsage marks a bad command line: malachi-demo exits with status 2.
var ErrUsage = errors.New("malachi-demo: usage")

// ErrHelp: -h was asked for; the flag package printed the usage.
var ErrHelp = errors.New("malachi-demo: help")

// parseFlags parses a command's flags with usage errors wrapped.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ErrHelp
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

func ParseFlags(args []string, stderr io.Writer) (Options, error) {
	o := Options{Options: stage.Options{SegmentSize: 1 << 20}}
	fs := flag.NewFlagSet("malachi-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.Brokers, "brokers", 5, "number of malachid processes")
	fs.IntVar(&o.RF, "rf", 3, "replication factor")
	fs.IntVar(&o.Segments, "segments", 300, "sealed segments to load")
	size := bytesize.Size(o.SegmentSize)
	fs.Var(&size, "segment-size", "bytes of records per segment (4096, 64KiB, 1MiB)")
	fs.BoolVar(&o.JSON, "json", false, "print the report as JSON on stdout (progress goes to stderr)")
	fs.BoolVar(&o.Keep, "keep", false, "leave the cluster running and its directory in place on exit")
	fs.StringVar(&o.Malachid, "malachid", "", "malachid binary to run (default: go build ./cmd/malachid from the module root)")
	fs.StringVar(&o.CLI, "malachi", "", "malachi CLI binary through which the lifecycle stages give the operator's commands (default: go build ./cmd/malachi from the module root)")
	fs.StringVar(&o.Dir, "dir", "", "directory for configs, data and logs (default: a new temporary directory)")
	faults := fs.String("faults", strings.Join(stage.Names, ","), "stages to run, comma-separated, from "+strings.Join(stage.Names, ","))
	fs.IntVar(&o.Copies, "copies", 3, "copies hit by each disk fault and by the latch stage")
	fs.DurationVar(&o.Tick, "tick", 200*time.Millisecond, "heal pass period (heal.tick)")
	fs.DurationVar(&o.Grace, "grace", time.Second, "grace delay before a silent broker counts as dead (heal.grace)")
	fs.DurationVar(&o.RaftTimeout, "raft-timeout", time.Second, "control plane heartbeat and election timeout (raft.heartbeat_timeout, raft.election_timeout; the lease is half)")
	fs.IntVar(&o.SettleBatch, "settle-batch", plugin.DefaultConfig().SettleBatch, "overrun copies settled and confirmed per pass (heal.settle_batch, whose default this is)")
	fs.DurationVar(&o.ScrubEvery, "scrub-interval", time.Second, "pause between two scrub cycles (heal.scrub_interval; 0 turns the scrubber off, and the bit-flip stage with it)")
	scrubRate := bytesize.Size(32 << 20)
	fs.Var(&scrubRate, "scrub-rate", "bytes per second each broker's scrubber may read (heal.scrub_bytes_per_second)")
	o.BackfillRate = -1
	fs.Func("backfill-rate", "bytes per second each broker's catch-up may move (heal.backfill_bytes_per_second); -1 (the default): eight segments a second, so that the backfill-kill stage can strike a transfer in flight; 0: no cap (that stage then fails when it misses its window); \"compare\": instead of the stages, the frontier: the kill on a fresh cluster of --brokers (at least 4) per rate, fixed at 8, 32, 64, 128 and 256 MiB/s, unthrottled and \"auto\", under the load of --clients producers, --compare-rounds times; each reported with its heal rate against the heal's limit measured in the same run and the clients' latency idle and while healing, each round's R* (the fastest fixed heal whose clients' p99 stayed within 1.5x idle) and auto against it", func(v string) error {
		if v == "compare" {
			o.Compare = true
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("want bytes per second, -1, 0 or compare")
		}
		o.BackfillRate = n
		return nil
	})
	fs.IntVar(&o.CompareRounds, "compare-rounds", 1, "with --backfill-rate compare: rounds of every rate (each round rotates their order; the goal is judged on medians of at least 3)")
	fs.DurationVar(&o.Poll, "poll", 100*time.Millisecond, "how often the demo polls the brokers while a stage heals (the precision of the timings)")
	fs.DurationVar(&o.StageTimeout, "stage-timeout", 90*time.Second, "how long a stage may take to heal before the demo gives up on it")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed for the choice of victims and fault positions (0: from the clock)")
	fs.BoolVar(&o.Insecure, "insecure", false, "run the brokers in plaintext without certificates (insecure = true); by default the demo makes a CA, broker and client certificates under --dir/certs and every connection is mutual TLS")
	fs.StringVar(&o.Nemesis, "nemesis", "", "\"random\": instead of the stages, a randomized nemesis: overlapping process, file and disk faults drawn from --seed while a writer loads segments, checked at quiescent points (testbed/nemesis)")
	fs.DurationVar(&o.NemesisDuration, "duration", 3*time.Minute, "with --nemesis: how long the schedule runs (one epoch of faults and a check per minute)")
	fs.BoolVar(&o.NemesisNoDisk, "nemesis-no-disk", false, "with --nemesis: no disk faults (no loop-mounted copies disk)")
	fs.StringVar(&o.nemesisKindList, "nemesis-kinds", "", "with --nemesis: draw only these fault kinds, comma-separated (default: every kind the cluster can take): "+strings.Join(nemesis.KindNames(harness.AllKinds()), ","))
	fs.BoolVar(&o.NemesisNoNet, "nemesis-no-net", false, "with --nemesis: no network faults (brokers on loopback; by default, as root with ip, nft and tc, each broker runs on a host of its own: a network namespace)")
	fs.IntVar(&o.Clients, "clients", 2, "Kafka producers (franz-go kgo: idempotent, acks=all, mutual TLS) writing through the brokers' Kafka listeners during every stage or the nemesis, with a consumer group's member (kgo.ConsumerGroup) reading and committing; at the end every partition is read back and any acknowledged record lost, duplicated, out of order or skipped by the group, or a committed offset lost, fails the run (0: no clients)")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	o.SegmentSize = int64(size)
	o.ScrubRate = int64(scrubRate)
	if o.BackfillRate < 0 {
		o.BackfillRate = max(8*o.SegmentSize, 4096)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.Chosen, o.sizeSet = set["faults"], set["segments"] || set["segment-size"]
	// The stages run in the fixed order of stage.Names, whatever the order given.
	given, err := names("--faults", "stage", *faults, stage.Names)
	if err != nil {
		return o, err
	}
	o.Stages = slices.DeleteFunc(slices.Clone(stage.Names), func(st string) bool { return !slices.Contains(given, st) })
	if o.Nemesis != "" {
		if err := o.validateNemesis(); err != nil {
			return o, err
		}
	}
	if o.Compare {
		return o, o.validateCompare()
	}
	return o, o.validate()
}

// names parses flag's comma-separated list of names from known, what
// naming one: an unknown or repeated name is a usage error.
func names(flag, what, list string, known []string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		switch p = strings.TrimSpace(p); {
		case p == "":
		case !slices.Contains(known, p):
			return nil, usageErr("%s: unknown %s %q: want some of %s", flag, what, p, strings.Join(known, ","))
		case slices.Contains(out, p):
			return nil, usageErr("%s: %s %q given twice", flag, what, p)
		default:
			out = append(out, p)
		}
	}
	return out, nil
}

func (o *Options) validate() error {
	switch {
	case o.Brokers < 1 || o.Brokers > 32:
		return usageErr("--brokers %d: want 1 to 32", o.Brokers)
	case o.RF < 1:
		return usageErr("--rf %d: want at least 1", o.RF)
	case o.RF > o.Brokers:
		return usageErr("--rf %d is more than --brokers %d", o.RF, o.Brokers)
	case o.Segments < 1 || o.Segments > 100000:
		return usageErr("--segments %d: want 1 to 100000", o.Segments)
	case o.SegmentSize < 64 || o.SegmentSize > 1<<30:
		return usageErr("--segment-size %d: want 64 B to 1 GiB", o.SegmentSize)
	case o.Copies < 1:
		return usageErr("--copies %d: want at least 1", o.Copies)
	case o.Tick <= 0:
		return usageErr("--tick %v: want more than zero", o.Tick)
	case o.Grace < 0:
		return usageErr("--grace %v: want zero or more", o.Grace)
	case o.RaftTimeout < 10*time.Millisecond:
		return usageErr("--raft-timeout %v: want at least 10ms", o.RaftTimeout)
	case o.ScrubEvery < 0:
		return usageErr("--scrub-interval %v: want 0 (off) or more", o.ScrubEvery)
	case o.BackfillRate > 0 && o.BackfillRate < 4096:
		return usageErr("--backfill-rate %d: want 0 (no cap), -1 (eight segments a second) or at least 4096 bytes per second", o.BackfillRate)
	case o.ScrubRate < 4096:
		return usageErr("--scrub-rate %s: want at least 4 KiB per second", bytesize.Format(o.ScrubRate))
	case o.SettleBatch < 1:
		return usageErr("--settle-batch %d: want at least 1", o.SettleBatch)
	case o.Poll < time.Millisecond || o.Poll > 10*time.Second:
		return usageErr("--poll %v: want 1ms to 10s", o.Poll)
	case o.StageTimeout <= 0:
		return usageErr("--stage-timeout %v: want more than zero", o.StageTimeout)
	case o.Clients < 0 || o.Clients > 64:
		return usageErr("--clients %d: want 0 (none) to 64", o.Clients)
	}
	if int64(o.Segments)*o.SegmentSize*int64(o.RF) > 64<<30 {
		return usageErr("--segments %d × --segment-size %s × --rf %d is more than 64 GiB on disk", o.Segments, bytesize.Format(o.SegmentSize), o.RF)
	}
	kept := o.Stages[:0:0]
	for _, st := range o.Stages {
		if why := o.Infeasible(st, kept); why != "" {
			if o.Chosen {
				return usageErr("--faults %s: %s", st, why)
			}
			continue // dropped from the default list; Run notes it
		}
		kept = append(kept, st)
	}
	o.Stages = kept
	return nil
}

// skippedStages lists the default stages validate dropped, with why.
func (o *Options) skippedStages() map[string]string {
	out := map[string]string{}
	if o.Chosen || o.Nemesis != "" {
		return out
	}
	var before []string
	for _, st := range stage.Names {
		if !slices.Contains(o.Stages, st) {
			out[st] = o.Infeasible(st, before)
			continue
		}
		before = append(before, st)
	}
	return out
}

// clusterConfig is the harness's configuration of the demo's cluster.
func (o *Options) clusterConfig(bin string) harness.Config {
	var extra strings.Builder
	if o.SettleBatch > 0 {
		fmt.Fprintf(&extra, "settle_batch = %d\n", o.SettleBatch)
	}
	fmt.Fprintf(&extra, "scrub_interval = %q\n", o.ScrubEvery.String())
	if o.ScrubRate > 0 {
		fmt.Fprintf(&extra, "scrub_bytes_per_second = %d\n", o.ScrubRate)
	}
	if o.BackfillRate > 0 {
		fmt.Fprintf(&extra, "backfill_bytes_per_second = %d\n", o.BackfillRate)
	}
	// Off but for the rebalance stage: moves after each heal would keep the
	// cluster from the quiescence every other stage waits for.
	extra.WriteString("rebalance = false\n")
	cfg := harness.Config{Bin: bin, Root: o.Dir, Brokers: o.Brokers, RF: o.RF, Tick: o.Tick, Grace: o.Grace,
		Raft: harness.DemoRaft(o.RaftTimeout), HealExtra: extra.String(), Keep: o.Keep, Insecure: o.Insecure,
		Hosts: o.Nemesis != "" && !o.NemesisNoNet && o.draws(harness.NetKinds),
		// A Kafka listener on every broker for the clients, and for
		// producing by hand to a kept cluster.
		Kafka: o.Clients > 0 || o.Keep}
	if o.Nemesis != "" && !o.NemesisNoDisk && o.draws(harness.DiskKinds) {
		// Room for every segment the baseline and the writer may put on it.
		segs := int64(o.Segments) + int64(o.NemesisDuration/nemesis.WriteEvery) + 4*int64(o.Brokers)
		cfg.LoopBroker, cfg.LoopBytes = nemesisDiskBroker, stage.LoopDiskSize(segs, o.SegmentSize+store.FooterSize)
	}
	return cfg
}

// draws says whether the nemesis may draw one of kinds
// (nemesis.Options.Draws): without a disk or network kind drawn, the
// cluster gets no loop disk and no hosts of their own.
func (o *Options) draws(kinds []harness.Kind) bool {
	return nemesis.Options{Kinds: o.NemesisKinds}.Draws(kinds)
}

// nemesisDiskBroker is the broker whose copies the nemesis puts on the
// loop-mounted disk (the disk faults' target).
const nemesisDiskBroker meta.BrokerID = 1

// validateNemesis checks the nemesis flags; the nemesis replaces the
// stages, so --faults may not be given with it.
func (o *Options) validateNemesis() error {
	switch {
	case o.Nemesis != "random":
		return usageErr("--nemesis %q: want random", o.Nemesis)
	case o.Chosen:
		return usageErr("--nemesis and --faults: the nemesis replaces the stages; give one")
	case o.NemesisDuration < 10*time.Second || o.NemesisDuration > 24*time.Hour:
		return usageErr("--duration %v: want 10s to 24h", o.NemesisDuration)
	case o.RF < 2:
		return usageErr("--nemesis with --rf %d: every fault destroys or hides a copy; want --rf 2 or more", o.RF)
	case o.Brokers < 3:
		return usageErr("--nemesis with --brokers %d: want 3 or more (a broker down must leave a quorum)", o.Brokers)
	}
	kinds, err := names("--nemesis-kinds", "fault kind", o.nemesisKindList, nemesis.KindNames(harness.AllKinds()))
	o.NemesisKinds = nil
	for _, k := range kinds {
		o.NemesisKinds = append(o.NemesisKinds, harness.Kind(k))
	}
	o.Stages = nil
	return err
}
