package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/kafka"
	"github.com/malachi-log/malachi/meta"
)

// TestLiveness: a broker counts live until half the grace passes without
// an answer (from the tracker's start for one never heard), dead after,
// live again at its next answer; this broker always.
func TestLiveness(t *testing.T) {
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	l := newLiveness(1, 10*time.Second, func() time.Time { return now }, zerolog.Nop())
	if l.dead != 5*time.Second || l.interval != time.Second {
		t.Fatalf("dead after %v, probing every %v: want 5s and 1s", l.dead, l.interval)
	}
	now = now.Add(5 * time.Second)
	if !l.ok(2) {
		t.Fatal("a broker not yet probed counts dead before the dead delay from the start")
	}
	l.answered(2)
	now = now.Add(5*time.Second + 1)
	if l.ok(2) || l.ok(3) {
		t.Fatalf("silent for more than 5s: 2 live %v, 3 live %v; want both dead", l.ok(2), l.ok(3))
	}
	l.mark([]meta.BrokerID{2, 3})
	if !l.down[2] || !l.down[3] {
		t.Fatalf("dead brokers not marked: %v", l.down)
	}
	if !l.ok(1) {
		t.Fatal("this broker counts dead")
	}
	l.answered(3)
	if !l.ok(3) || l.down[3] {
		t.Fatal("a broker that answered again still counts dead")
	}
	var nilTracker *liveness
	if !nilTracker.ok(9) {
		t.Fatal("a nil tracker counts a broker dead")
	}
}

// TestCoordinatorOf: the coordinator is a function of the group and the
// live set, the same whatever their order; when a broker leaves, only
// the groups it coordinated move; no broker, an error.
func TestCoordinatorOf(t *testing.T) {
	all := []kafka.BrokerAddr{{NodeID: 1}, {NodeID: 2}, {NodeID: 3}, {NodeID: 4}}
	rev := []kafka.BrokerAddr{all[3], all[2], all[1], all[0]}
	without2 := []kafka.BrokerAddr{all[0], all[2], all[3]}
	count := map[int32]int{}
	for i := range 400 {
		g := fmt.Sprintf("group-%d", i)
		a, err := coordinatorOf(g, all)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := coordinatorOf(g, rev); a != b {
			t.Fatalf("%s: %d over 1..4, %d over 4..1", g, a, b)
		}
		c, _ := coordinatorOf(g, without2)
		if a != 2 && c != a {
			t.Fatalf("%s moved from %d to %d when broker 2 left", g, a, c)
		}
		if c == 2 {
			t.Fatalf("%s coordinated by broker 2, which left", g)
		}
		count[a]++
	}
	for id := int32(1); id <= 4; id++ {
		if count[id] < 50 {
			t.Errorf("broker %d coordinates %d of 400 groups: %v", id, count[id], count)
		}
	}
	if _, err := coordinatorOf("g", nil); err == nil {
		t.Fatal("a coordinator among no brokers")
	}
}
