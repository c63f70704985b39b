package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// TestQuorumErrSaysHowManyAnswered: the message an operator sees.
func TestQuorumErrSaysHowManyAnswered(t *testing.T) {
	q := Quorum{Voters: 5, Reachable: []meta.BrokerID{1, 2}, Window: time.Second}
	err := q.Err()
	if !errors.Is(err, ErrNoQuorum) || !strings.Contains(err.Error(), "no quorum: 2 of 5 voters reachable") {
		t.Fatalf("Err() = %v", err)
	}
	q.Reachable = append(q.Reachable, 3)
	if !q.Has() || q.Err() != nil {
		t.Fatalf("3 of 5: %v", q.Err())
	}
	if (Quorum{Voters: 5, Leader: 4}).Err() != nil {
		t.Fatal("a follower of a live leader has a quorum through it")
	}
}

// TestQuorumLostWhenMajorityCloses: every node of a healthy cluster has a
// quorum; with two of three closed, the last one says it has not, and how
// many voters it reaches.
func TestQuorumLostWhenMajorityCloses(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	// A look is judged only if every node still agrees on the leader
	// afterwards (during an election a follower rightly has no quorum), and
	// the leader's count of reachable voters is a look at answers within
	// its window: at load a heartbeat's answer can be a window late. The
	// property is that a healthy cluster gets there: every node with a
	// quorum and the leader reaching all three, within 20 s.
	var li int
	var last string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no look in 20 s found a healthy cluster whole: last %s", last)
		}
		li = c.leader()
		qs := make([]Quorum, len(c.nodes))
		for i, n := range c.nodes {
			qs[i] = n.Quorum()
		}
		if !agreeOnLeader(c, li) {
			last = "leadership moved during the look"
			continue
		}
		last = ""
		for i, q := range qs {
			if err := q.Err(); err != nil {
				last = fmt.Sprintf("node %d of a healthy cluster: %v", i+1, err)
			}
		}
		if q := qs[li]; last == "" && (len(q.Reachable) != 3 || q.Voters != 3) {
			last = fmt.Sprintf("leader's quorum %+v, want 3 of 3 reachable", q)
		}
		if last == "" {
			break
		}
	}
	survivor := (li + 1) % 3
	c.close(li)
	c.close((li + 2) % 3)
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := c.nodes[survivor].Quorum().Err()
		if err != nil {
			if !errors.Is(err, ErrNoQuorum) || !strings.Contains(err.Error(), "no quorum: 1 of 3 voters reachable") {
				t.Fatalf("survivor: %v", err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivor of three still claims a quorum: %+v", c.nodes[survivor].Quorum())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agreeOnLeader says node li still leads and every open node follows it.
func agreeOnLeader(c *testCluster, li int) bool {
	if !c.nodes[li].IsLeader() {
		return false
	}
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		if id, _ := n.Leader(); id != c.cfgs[li].ID {
			return false
		}
	}
	return true
}
