package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/nemesis"
)

// nemesisFixedSeed is the seed `make test` replays every run. As root
// (brokers on hosts of their own, a loop-mounted copies disk on broker 1)
// its two epochs draw an isolation of 9.7 s, readonly and diskfull on the
// copies disk, a latch, a restart, a bitflip, then a quorum-loss window.
const nemesisFixedSeed = 424

// lineLog writes what it is given to t.Log, line by line.
type lineLog struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}

// The seeds drawn from the process faults alone (--nemesis-kinds
// kill,pause,restart,swap: the same schedule on every machine), for one
// minute each. pauseSwapSeed pauses brokers 3 and 4 together past the
// grace delay, then swaps each (empty data directory) in turn: the shape
// of seed 424's first violation. killWriteSeed kills brokers 2 and 5
// together, then 5, then swaps 5 and kills 4; every kill strikes while a
// write is in flight.
const (
	pauseSwapSeed = 4
	killWriteSeed = 27
)

const processKinds = "kill,pause,restart,swap"

// TestNemesisShort runs the randomized nemesis on 5 real brokers: the
// fixed seed for two minutes, the two process-fault seeds for one each,
// then a seed drawn from the clock (printed) for one. Each must end with
// every acknowledged segment at its replication factor and verified, no
// violation, and no segment lost; the process seeds must strike their
// shape (every pause and swap injected; a kill mid-write).
func TestNemesisShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 5 real brokers for three minutes")
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "malachid")
	if err := harness.Build(context.Background(), root, "./cmd/malachid", bin); err != nil {
		t.Fatal(err)
	}
	random := uint64(time.Now().UnixNano())%1_000_000 + 1
	for _, run := range []struct {
		seed     uint64
		duration string
		kinds    string
		clients  int // Kafka producers through the run (--clients)
		// strikes fails the run if the schedule's shape did not happen.
		strikes func(n *nemesis.Report) string
	}{
		{seed: nemesisFixedSeed, duration: "2m", clients: 2},
		{seed: pauseSwapSeed, duration: "1m", kinds: processKinds, strikes: func(n *nemesis.Report) string {
			if n.FaultsInjected[harness.KindPause] < 1 || n.FaultsInjected[harness.KindSwap] < 2 {
				return fmt.Sprintf("pause then swap: injected %v, want a pause and two swaps", n.FaultsInjected)
			}
			return ""
		}},
		{seed: killWriteSeed, duration: "1m", kinds: processKinds, strikes: func(n *nemesis.Report) string {
			if n.KillsDuringWrite < 1 {
				return fmt.Sprintf("kill during write: %d of %d kills struck while a write was in flight", n.KillsDuringWrite, n.FaultsInjected[harness.KindKill])
			}
			return ""
		}},
		{seed: random, duration: "1m"},
	} {
		t.Run(fmt.Sprintf("seed=%d", run.seed), func(t *testing.T) {
			args := []string{"--brokers", "5", "--rf", "3", "--segments", "30", "--segment-size", "64KiB",
				"--nemesis", "random", "--seed", fmt.Sprint(run.seed), "--duration", run.duration}
			if run.kinds != "" {
				args = append(args, "--nemesis-kinds", run.kinds)
			}
			args = append(args, "--clients", fmt.Sprint(run.clients)) // 0 too: the default is 2
			t.Logf("nemesis seed %d for %s (replay: malachi-demo %s)", run.seed, run.duration, strings.Join(args, " "))
			dir := t.TempDir()
			rep, code := runJSON(t, append(args, "--malachid", bin, "--json", "--dir", dir))
			defer func() {
				// What the brokers logged of the segments the failure names.
				if t.Failed() && rep.Nemesis != nil {
					named := harness.SegmentsNamed(rep.Error, fmt.Sprint(rep.Nemesis.Violations))
					t.Logf("broker log lines naming %v:\n%s", named, harness.LogExcerpt(dir, named, 150))
				}
			}()
			n := rep.Nemesis
			if n == nil {
				t.Fatalf("no nemesis in the report (exit %d): %s", code, rep.Error)
			}
			var text strings.Builder
			n.WriteText(&text)
			t.Log(text.String())
			injected := 0
			for _, k := range n.FaultsInjected {
				injected += k
			}
			switch {
			case code != 0 || !rep.OK:
				t.Fatalf("exit %d, ok %v: %s\n%s", code, rep.OK, rep.Error, n.Schedule)
			case len(n.UndoFailed) > 0:
				t.Fatalf("faults not undone: %v\n%s", n.UndoFailed, n.Schedule)
			case len(n.Violations) > 0:
				t.Fatalf("violations: %v\n%s", n.Violations, n.Schedule)
			case n.SegmentsLost != 0:
				t.Fatalf("%d acknowledged segments lost\n%s", n.SegmentsLost, n.Schedule)
			case n.ChecksRun == 0 || n.ChecksPassed != n.ChecksRun:
				t.Fatalf("quiescent checks passed %d of %d\n%s", n.ChecksPassed, n.ChecksRun, n.Schedule)
			case n.SegmentsAcknowledged == 0 || n.CopiesVerified < 3*n.SegmentsAcknowledged:
				t.Fatalf("%d segments acknowledged, %d copies verified: the writer or the checker did nothing", n.SegmentsAcknowledged, n.CopiesVerified)
			case injected == 0 && len(n.FaultsScheduled) > 0:
				t.Fatalf("no fault injected of %v: %v", n.FaultsScheduled, n.NotInjected)
			case n.FaultsInjected[harness.KindReadOnly] != n.FaultsScheduled[harness.KindReadOnly]:
				// Drawn with brokers on hosts too (nsenter: no private mount
				// namespace holds the copies disk); its undo is the remedy.
				t.Fatalf("readonly injected %d of %d: %v", n.FaultsInjected[harness.KindReadOnly], n.FaultsScheduled[harness.KindReadOnly], n.NotInjected)
			}
			if c := rep.Clients; run.clients > 0 && (c == nil || c.Acknowledged == 0 || c.ReadBack != c.Acknowledged) {
				t.Fatalf("clients through the nemesis: %+v; want records acknowledged and every one read back", c)
			}
			if run.strikes != nil {
				if why := run.strikes(n); why != "" {
					t.Fatalf("%s\n%s", why, n.Schedule)
				}
			}
			if n.FaultsScheduled[harness.KindIsolate]+n.FaultsScheduled[harness.KindPartition] > 0 && n.FaultsScheduled[harness.KindReadOnly] > 0 {
				t.Logf("readonly injected %d times with brokers on hosts of their own, each undone by the remedy", n.FaultsInjected[harness.KindReadOnly])
			}
		})
	}
}

// runJSON runs the demo with args (which include --json) and returns its
// decoded report and exit code, failing t when the flags or the report do
// not parse.
func runJSON(t *testing.T, args []string) (Report, int) {
	t.Helper()
	o, err := ParseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code := Run(context.Background(), o, &out, &lineLog{t: t})
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	return rep, code
}
