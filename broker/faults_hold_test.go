package broker

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestProduceHoldHoldsAStoredBatch: armed for t/0, the next Append stores
// its batch on every replica, fires the hold (what GET
// /v1/faults/hold-produce waits on) and does not return until the broker
// closes; the batch before the arming was not held.
func TestProduceHoldHoldsAStoredBatch(t *testing.T) {
	c := kafkaLogCluster(t, 3, 1<<20, func(cfg *Config) { cfg.FaultInjection = true })
	l, lb := c.partitionLog(t)
	var a appended
	a.add(t, l, "before the arming")
	k := partKey{"t", 0}
	lb.holds.arm(k)
	h := lb.holds.get(k)
	type result struct {
		base int64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		base, err := l.Append(context.Background(), testBatch("held"), 1)
		done <- result{base, err}
	}()
	select {
	case <-h.held:
	case r := <-done:
		t.Fatalf("Append returned (%d, %v) without the armed hold firing", r.base, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the armed hold did not fire within 30s")
	}
	if h.at != (HeldBatch{Topic: "t", Partition: 0, BaseOffset: 1, Records: 1}) {
		t.Fatalf("held %+v, want t/0 at offset 1, one record", h.at)
	}
	act := lb.node.View().Chain("t", 0)[0]
	for _, r := range act.Replicas {
		end, err := c.b(r).db.DurableEnd(act.ID)
		if err != nil || end.Frames != 2 {
			t.Fatalf("broker %d's copy of %s while the answer is held: %+v %v, want 2 frames synced", r, act.ID, end, err)
		}
	}
	select {
	case r := <-done:
		t.Fatalf("Append answered (%d, %v) while held", r.base, r.err)
	default: // held: Append returns only once lb closes
	}
	lb.Close()
	if r := <-done; r.err != nil || r.base != 1 {
		t.Fatalf("the held Append after Close: (%d, %v), want offset 1", r.base, r.err)
	}
}

// TestProduceHoldRefusals: without fault_injection the hold's routes
// refuse, naming what is missing, and arm nothing; with it, an unknown
// topic or partition is refused.
func TestProduceHoldRefusals(t *testing.T) {
	f := newAdminFixture(t)
	holds := f.b.holds
	f.b.holds = nil
	for _, m := range []string{http.MethodPost, http.MethodGet} {
		status, ans := f.do(t, "operator", m, "/v1/faults/hold-produce/t/0", "")
		if status != http.StatusForbidden || ans.Code != "fault_injection_off" || !strings.Contains(ans.Message, "fault_injection = true") {
			t.Fatalf("%s hold-produce without fault_injection: HTTP %d %+v, want 403 fault_injection_off naming fault_injection = true", m, status, ans)
		}
	}
	f.b.holds = holds
	if len(holds.armed) != 0 {
		t.Fatalf("a refused arming armed %v", holds.armed)
	}
	if status, ans := f.do(t, "operator", http.MethodPost, "/v1/faults/hold-produce/nosuch/0", ""); status != http.StatusNotFound {
		t.Fatalf("arming a hold on an unknown topic: HTTP %d %+v, want 404", status, ans)
	}
	if status, ans := f.do(t, "viewer", http.MethodPost, "/v1/faults/hold-produce/nosuch/0", ""); status != http.StatusForbidden || ans.Code == "fault_injection_off" {
		t.Fatalf("a viewer arming a hold: HTTP %d %+v, want 403 for the role", status, ans)
	}
}
