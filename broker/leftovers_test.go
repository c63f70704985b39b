package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
)

// TestConcurrentCreatesLeaveNoLeftoverCopy races creates of one segment id
// on a three-broker cluster of rf 2, as the Kafka keeper races a topic's
// creation and a partition leader's roll: one create on the set [1 2]
// from broker 1, one on [2 3] from broker 3, and two placed by the
// control plane's leader. Exactly one set is recorded, every placed
// create answers that segment, and afterwards no broker outside the
// recorded set holds a copy of it (an empty active copy there would keep
// that broker from receiving the segment when heal wants it as a
// replacement).
func TestConcurrentCreatesLeaveNoLeftoverCopy(t *testing.T) {
	c := newTestCluster(t, 3, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := range 12 {
		id := meta.SegmentID(fmt.Sprintf("race-%02d", round))
		leader := c.leader()
		type result struct {
			who string
			seg meta.Segment
			err error
		}
		calls := []struct {
			who string
			b   *Server
			req admin.CreateRequest
		}{
			{"broker 1 on [1 2]", c.b(1), admin.CreateRequest{ID: id, Replicas: []meta.BrokerID{1, 2}}},
			{"broker 3 on [2 3]", c.b(3), admin.CreateRequest{ID: id, Replicas: []meta.BrokerID{2, 3}}},
			{"leader placed (a)", leader, admin.CreateRequest{ID: id}},
			{"leader placed (b)", leader, admin.CreateRequest{ID: id}},
		}
		res := make([]result, len(calls))
		var wg sync.WaitGroup
		for i, call := range calls {
			wg.Go(func() {
				seg, err := call.b.create(ctx, call.req)
				res[i] = result{call.who, seg, err}
			})
		}
		wg.Wait()
		rec, ok := leader.node.Segment(id)
		if !ok {
			t.Fatalf("round %d: %s not recorded: %+v", round, id, res)
		}
		for _, r := range res {
			switch {
			case r.err == nil && !meta.SameReplicas(r.seg.Replicas, rec.Replicas):
				t.Errorf("round %d: %s answered %v, recorded %v", round, r.who, r.seg.Replicas, rec.Replicas)
			case r.err != nil && !errors.Is(r.err, meta.ErrSegmentExists):
				t.Errorf("round %d: %s: %v, want success or a segment-exists refusal", round, r.who, r.err)
			case r.err != nil && r.who[:6] == "leader":
				t.Errorf("round %d: %s: %v: a placed create answers the recorded segment", round, r.who, r.err)
			}
		}
		held := c.holders(id)
		slices.Sort(held)
		want := slices.Clone(rec.Replicas)
		slices.Sort(want)
		if !slices.Equal(held, want) {
			t.Fatalf("round %d: %s recorded on %v, copies on %v (%+v)", round, id, rec.Replicas, held, res)
		}
	}
}

// TestFailedCreateDropsItsCopiesOnceRecorded: the empty active copy a
// failed create made (here made directly in the maker's store, as a create
// that failed on another replica leaves it) is dropped once another create
// records the segment on a set without that broker, as a roll whose create
// failed on a read-only replica must not keep spare brokers from receiving
// the segment until heal.leftover_delay.
func TestFailedCreateDropsItsCopiesOnceRecorded(t *testing.T) {
	c := newTestCluster(t, 3, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.leader()
	var others []meta.BrokerID
	for id := meta.BrokerID(1); id <= 3; id++ {
		if id != leader.self {
			others = append(others, id)
		}
	}
	maker := others[0]
	recorded := []meta.BrokerID{leader.self, others[1]}
	const id = meta.SegmentID("failed-00001")
	if err := c.b(maker).db.Create(id, 0); err != nil {
		t.Fatal(err)
	}
	c.b(maker).dropLeftoversOnceRecorded(id, []meta.BrokerID{maker})
	if _, err := leader.create(ctx, admin.CreateRequest{ID: id, Replicas: recorded}); err != nil {
		t.Fatalf("create on %v: %v", recorded, err)
	}
	want := slices.Clone(recorded)
	slices.Sort(want)
	c.waitFor(30*time.Second, fmt.Sprintf("the failed create's copy on broker %d dropped, copies only on %v", maker, want), func() bool {
		held := c.holders(id)
		slices.Sort(held)
		return slices.Equal(held, want)
	})
}

// TestDropRefusesRecordedOrWrittenCopies: the internal drop route deletes
// only an empty active copy of a segment whose recorded set does not name
// the broker.
func TestDropRefusesRecordedOrWrittenCopies(t *testing.T) {
	c := newTestCluster(t, 3, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b1 := c.b(1)
	seg, err := b1.create(ctx, admin.CreateRequest{ID: "kept", Replicas: []meta.BrokerID{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	drop := func(on meta.BrokerID, id meta.SegmentID) error {
		br, _ := b1.node.View().Broker(on)
		return b1.post(ctx, br.AdminAddr, "/v1/internal/copies/"+string(id)+"/drop", struct{}{}, nil)
	}
	if err := drop(2, seg.ID); err == nil || !errors.Is(err, errBadRequest) {
		t.Errorf("drop of a recorded replica's copy: %v, want a bad request", err)
	}
	// A copy on broker 3 outside the set, with a frame in it.
	if err := c.b(3).db.Create(seg.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.b(3).db.Append(seg.ID, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := drop(3, seg.ID); err == nil || !errors.Is(err, errBadRequest) {
		t.Errorf("drop of a written copy: %v, want a bad request", err)
	}
	if got := c.holders(seg.ID); !slices.Contains(got, 3) {
		t.Fatalf("a refused drop deleted the copy: holders %v", got)
	}
	// Empty and outside the set: dropped, and dropping again is no error.
	if err := c.b(3).db.Delete(seg.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.b(3).db.Create(seg.ID, 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := drop(3, seg.ID); err != nil {
			t.Fatalf("drop of an empty leftover copy: %v", err)
		}
	}
	if got := c.holders(seg.ID); slices.Contains(got, 3) {
		t.Fatalf("broker 3 still holds %s: holders %v", seg.ID, got)
	}
}
