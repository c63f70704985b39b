package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

func TestReplicaCopiesLeavesLeftoversOut(t *testing.T) {
	snap := meta.Snapshot{Segments: []meta.Segment{{ID: "a", Replicas: []meta.BrokerID{1, 2}}, {ID: "b", Replicas: []meta.BrokerID{2, 3}}}}
	cs := []admin.Copy{{ID: "a"}, {ID: "b"}, {ID: "gone"}}
	if n := replicaCopies(&snap, 1, cs); n != 1 {
		t.Fatalf("broker 1: %d replicas, want 1 (b and gone are leftovers)", n)
	}
	if n := replicaCopies(&snap, 2, cs[:2]); n != 2 {
		t.Fatalf("broker 2: %d replicas, want 2", n)
	}
}

func TestWriteLeftovers(t *testing.T) {
	var b bytes.Buffer
	writeLeftovers(&b, &heal.Report{})
	if b.Len() != 0 {
		t.Fatalf("printed %q with no leftovers", b.String())
	}
	writeLeftovers(&b, &heal.Report{LeftoverCopies: 3, LeftoverBytes: 3072, Leftovers: []heal.LeftoverGroup{
		{Broker: 4, Cause: heal.ReturnedBroker, Copies: 2, Bytes: 2048, Segments: []meta.SegmentID{"s1", "s2"}},
		{Broker: 5, Cause: heal.FailedDelete, Copies: 1, Bytes: 1024, Segments: []meta.SegmentID{"s3"}, Err: "remove x: operation not permitted"},
	}})
	out := b.String()
	for _, want := range []string{"leftover copies", "broker 4 returned_broker: 2 copies", "broker 5 failed_delete: 1 copies", "operation not permitted"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
