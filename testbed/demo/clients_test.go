package demo

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/testbed/stage"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/kafkaload"
)

// TestClientsFlag: clients run by default (--clients 2) and give the
// cluster Kafka listeners, as --keep does (for producing by hand);
// --clients 0 without --keep leaves them off.
func TestClientsFlag(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		kafka bool
	}{
		{nil, true},
		{[]string{"--clients", "0"}, false},
		{[]string{"--clients", "0", "--keep"}, true},
		{[]string{"--clients", "2"}, true},
		{[]string{"--keep"}, true},
		{[]string{"--clients", "3", "--nemesis", "random"}, true},
	} {
		o, err := ParseFlags(tc.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if tc.args == nil && o.Clients != 2 {
			t.Errorf("the default --clients is %d, want 2", o.Clients)
		}
		if got := o.clusterConfig("malachid").Kafka; got != tc.kafka {
			t.Errorf("%q: Kafka listeners %v, want %v", tc.args, got, tc.kafka)
		}
	}
	for _, bad := range []string{"-1", "65"} {
		if _, err := ParseFlags([]string{"--clients", bad}, io.Discard); err == nil || !strings.Contains(err.Error(), "--clients "+bad) {
			t.Errorf("--clients %s: %v, want a usage error naming it", bad, err)
		}
	}
}

// TestClientsViolationFailsRun: a clients check with a lost record, or
// one that could not read everything back, makes the run NOT HEALED and
// says so in the text; a clean one changes nothing.
func TestClientsViolationFailsRun(t *testing.T) {
	healthy := harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}}
	k := kafkaload.Key(0, 1)
	acked := []kafkaload.Record{kafkaload.NewRecord(clientsTopic, 0, 0, k, kafkaload.Value(k, 32))}
	for _, tc := range []struct {
		name string
		rep  kafkaload.Report
		ok   bool
		text string
	}{
		{"clean", kafkaload.Report{Producers: 2, Topic: clientsTopic, Result: kafkaload.Check(acked, acked)}, true,
			"clients            ok: 2 producers on topic demo-clients: 1 acknowledged, 1 read back, 0 lost"},
		{"lost", kafkaload.Report{Producers: 2, Topic: clientsTopic, Result: kafkaload.Check(acked, nil)}, false,
			"VIOLATION lost: demo-clients/0@0"},
		{"check incomplete", kafkaload.Report{Producers: 2, Topic: clientsTopic, Error: "context deadline exceeded"}, false,
			"check incomplete: context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{Brokers: 3, ReplicationFactor: 3, Segments: 2, Clients: &tc.rep}
			r.finish(healthy, 0, nil)
			var text bytes.Buffer
			r.writeText(&text)
			if r.OK != tc.ok || !strings.Contains(text.String(), tc.text) {
				t.Fatalf("OK %v, want %v; text lacks %q:\n%s", r.OK, tc.ok, tc.text, text.String())
			}
			doc, js := reportJSON(t, r)
			c, ok := doc["clients"].(map[string]any)
			if !ok || c["acknowledged"] != float64(tc.rep.Acknowledged) || c["lost"] != float64(tc.rep.Lost) {
				t.Fatalf("JSON clients section: %s", js)
			}
		})
	}
}

// TestClientsShort runs the demo on 4 real brokers with two Kafka
// producers and a group consumer through a broker kill and its restart:
// every acknowledged record is read back, nothing lost, duplicated or out
// of order; the group consumed every one, committed, and lost no
// committed offset.
func TestClientsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 real brokers")
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "malachid")
	if err := harness.Build(context.Background(), root, "./cmd/malachid", bin); err != nil {
		t.Fatal(err)
	}
	args := []string{"--brokers", "4", "--rf", "3", "--segments", "10", "--segment-size", "16KiB", "--faults", "kill,restart",
		"--clients", "2", "--malachid", bin, "--json", "--dir", t.TempDir()}
	rep, code := runJSON(t, args)
	c := rep.Clients
	if c == nil {
		t.Fatalf("no clients section (exit %d): %s", code, rep.Error)
	}
	var text strings.Builder
	c.WriteText(&text)
	t.Log(text.String())
	switch {
	case code != 0 || !rep.OK:
		t.Fatalf("exit %d, ok %v: %s", code, rep.OK, rep.Error)
	case c.Error != "":
		t.Fatalf("the check could not read everything back: %s", c.Error)
	case c.Acknowledged == 0 || c.ReadBack != c.Acknowledged:
		t.Fatalf("%d acknowledged, %d read back", c.Acknowledged, c.ReadBack)
	case c.Lost+c.Duplicated+c.OutOfOrder != 0:
		t.Fatalf("lost %d, duplicated %d, out of order %d: %s", c.Lost, c.Duplicated, c.OutOfOrder, strings.Join(c.Violations, "; "))
	case c.Read < c.Acknowledged:
		t.Fatalf("%d read, fewer than the %d acknowledged", c.Read, c.Acknowledged)
	case c.Group == nil:
		t.Fatal("no group consumer in the clients section")
	case c.Group.Consumed != c.Acknowledged || c.Group.Skipped != 0 || c.Group.CommitsLost != 0 || c.Group.Commits == 0:
		t.Fatalf("group %+v: want every one of the %d acknowledged consumed, commits made, none lost", *c.Group, c.Acknowledged)
	case c.Group.Committed[0] != c.HighWatermarks[0]:
		t.Fatalf("group %s committed %v at the end, want the high watermark %v", c.Group.Group, c.Group.Committed, c.HighWatermarks)
	}
}

// TestClientsLongestGapNamesItsStage: the clients section names the stage
// during which the longest time without an acknowledgement began, and
// none when it began outside every stage.
func TestClientsLongestGapNamesItsStage(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	healthy := harness.Evaluation{Sealed: 2, Healthy: 2, Unhealthy: map[meta.SegmentID]string{}}
	for _, tc := range []struct {
		from time.Time
		want string
	}{
		{t0.Add(90 * time.Second), "began during stage pause"},
		{t0.Add(10 * time.Second), "began during stage kill"},
		{t0.Add(-time.Second), ""},
	} {
		r := &Report{Brokers: 3, ReplicationFactor: 3, Segments: 2, Clients: &kafkaload.Report{Producers: 1, Topic: clientsTopic, LongestStallFrom: tc.from},
			Faults: []stage.Report{{Stage: "kill", Began: t0, Ended: t0.Add(time.Minute)}, {Stage: "pause", Began: t0.Add(time.Minute), Ended: t0.Add(2 * time.Minute)}}}
		r.finish(healthy, 0, nil)
		var text bytes.Buffer
		r.writeText(&text)
		got := text.String()
		if tc.want != "" && !strings.Contains(got, tc.want) || tc.want == "" && strings.Contains(got, "began during stage") {
			t.Errorf("gap from %v: text should say %q:\n%s", tc.from, tc.want, got)
		}
	}
}
