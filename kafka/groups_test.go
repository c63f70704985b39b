package kafka

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// manualClock is a Clock that moves only by Advance, which runs the
// functions that fall due, in time order, on the caller's goroutine.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves the clock by d, running every function due by then.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		slices.SortStableFunc(c.timers, func(a, b *manualTimer) int { return a.at.Compare(b.at) })
		var due *manualTimer
		for i, t := range c.timers {
			if t.stopped {
				continue
			}
			if !t.at.After(end) {
				due = t
				c.timers = slices.Delete(c.timers, i, i+1)
			}
			break
		}
		if due == nil {
			c.now = end
			c.timers = slices.DeleteFunc(c.timers, func(t *manualTimer) bool { return t.stopped })
			c.mu.Unlock()
			return
		}
		c.now = due.at
		due.stopped = true
		c.mu.Unlock()
		due.f()
	}
}

// The Groups side of testCluster.

func (c *testCluster) Coordinator(string) (int32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.coordinator == 0 {
		return 1, nil
	}
	return c.coordinator, nil
}

func (c *testCluster) CommitOffsets(_ context.Context, group string, offsets []Offset) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.offsets == nil {
		c.offsets = map[string][]Offset{}
	}
	c.commits = append(c.commits, slices.Clone(offsets))
	have := c.offsets[group]
	for _, o := range offsets {
		have = slices.DeleteFunc(have, func(x Offset) bool { return x.Topic == o.Topic && x.Partition == o.Partition })
		have = append(have, o)
	}
	slices.SortFunc(have, func(a, b Offset) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	c.offsets[group] = have
	return nil
}

func (c *testCluster) FetchOffsets(_ context.Context, group string) ([]Offset, error) {
	return c.committed(group), nil
}

func (c *testCluster) committed(group string) []Offset {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.offsets[group])
}

func (c *testCluster) DeleteOffsets(_ context.Context, group string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.offsets, group)
	return nil
}

func (c *testCluster) PartitionEnd(_ context.Context, topic string, index int32) (int64, error) {
	l, err := c.fileLog(topic, index)
	if err != nil {
		return 0, err
	}
	_, hw := l.stats()
	return hw, nil
}

var _ Groups = (*testCluster)(nil)

// A group test drives the coordinator directly: each call returns at
// once, with its answer or the channel it will come on.

const (
	testSession   = 10 * time.Second
	testRebalance = 30 * time.Second
)

func joinReq(group, member string, protocols ...string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.SetVersion(5)
	req.Group, req.MemberID, req.ProtocolType = group, member, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = int32(testSession/time.Millisecond), int32(testRebalance/time.Millisecond)
	if len(protocols) == 0 {
		protocols = []string{"range"}
	}
	for _, p := range protocols {
		rp := kmsg.NewJoinGroupRequestProtocol()
		rp.Name, rp.Metadata = p, []byte("meta of "+member)
		req.Protocols = append(req.Protocols, rp)
	}
	return req
}

// ready is what ch holds now; it fails the test when it holds nothing.
func ready[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	default:
		t.Fatalf("%s: no answer yet", what)
	}
	var zero T
	return zero
}

// waiting fails the test when ch holds an answer.
func waiting[T any](t *testing.T, what string, ch <-chan T) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: answered %+v, want it to wait", what, v)
	default:
	}
}

func wantCode(t *testing.T, what string, got int16, want *kerr.Error) {
	t.Helper()
	if w := code(want); got != w {
		t.Fatalf("%s: error %v, want %v", what, kerr.ErrorForCode(got), want)
	}
}

// newMember joins a new member at v5 (MEMBER_ID_REQUIRED, then the
// join) and returns its id and the channel of its join's answer.
func newMember(t *testing.T, co *coordinator, group string) (string, <-chan *kmsg.JoinGroupResponse) {
	t.Helper()
	first := ready(t, "first join", co.join(joinReq(group, ""), "cli", "h"))
	wantCode(t, "first join", first.ErrorCode, kerr.MemberIDRequired)
	if first.MemberID == "" {
		t.Fatal("MEMBER_ID_REQUIRED without a member id")
	}
	return first.MemberID, co.join(joinReq(group, first.MemberID), "cli", "h")
}

func syncReq(group, member string, gen int32, assign map[string]string) *kmsg.SyncGroupRequest {
	req := kmsg.NewPtrSyncGroupRequest()
	req.SetVersion(5)
	req.Group, req.MemberID, req.Generation = group, member, gen
	for id, a := range assign {
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID, ga.MemberAssignment = id, []byte(a)
		req.GroupAssignment = append(req.GroupAssignment, ga)
	}
	return req
}

// stableOne is a group "g" with one member, Stable at generation 1.
func stableOne(t *testing.T, co *coordinator) string {
	t.Helper()
	id, ch := newMember(t, co, "g")
	j := ready(t, "join", ch)
	wantCode(t, "join", j.ErrorCode, nil)
	if j.Generation != 1 || j.LeaderID != id || len(j.Members) != 1 || *j.Protocol != "range" {
		t.Fatalf("join: %+v, want generation 1 led by %s with itself", j, id)
	}
	s := ready(t, "sync", co.sync(syncReq("g", id, 1, map[string]string{id: "all"})))
	wantCode(t, "sync", s.ErrorCode, nil)
	if string(s.MemberAssignment) != "all" {
		t.Fatalf("sync: assignment %q, want %q", s.MemberAssignment, "all")
	}
	return id
}

// TestGroupOneMember: a new member gets its id, joins a generation it
// leads, syncs its own assignment and heartbeats.
func TestGroupOneMember(t *testing.T) {
	co := newCoordinator(newManualClock())
	id := stableOne(t, co)
	wantCode(t, "heartbeat", code(co.heartbeat("g", id, 1)), nil)
	if v := co.describe("g"); v.state != groupStable || len(v.members) != 1 || string(v.members[0].MemberAssignment) != "all" {
		t.Fatalf("describe: %+v", v)
	}
}

// TestGroupJoinRebalances: a second member's join waits until the first
// rejoins (told by its heartbeat); the leader's sync completes the new
// generation and the follower's waiting sync gets its assignment.
func TestGroupJoinRebalances(t *testing.T) {
	co := newCoordinator(newManualClock())
	a := stableOne(t, co)
	b, bj := newMember(t, co, "g")
	waiting(t, "second join", bj)
	wantCode(t, "heartbeat during the rebalance", code(co.heartbeat("g", a, 1)), kerr.RebalanceInProgress)
	wantCode(t, "commit during PreparingRebalance", code(co.checkCommit("g", a, 1)), nil)
	aj := ready(t, "first's rejoin", co.join(joinReq("g", a), "cli", "h"))
	bresp := ready(t, "second join", bj)
	if aj.Generation != 2 || bresp.Generation != 2 || aj.LeaderID != a || bresp.LeaderID != a {
		t.Fatalf("joins: %+v / %+v, want generation 2 led by %s", aj, bresp, a)
	}
	if len(aj.Members) != 2 || len(bresp.Members) != 0 {
		t.Fatalf("the leader got %d members, the follower %d: want 2 and 0", len(aj.Members), len(bresp.Members))
	}
	wantCode(t, "commit during CompletingRebalance", code(co.checkCommit("g", a, 2)), kerr.RebalanceInProgress)
	bs := co.sync(syncReq("g", b, 2, nil))
	waiting(t, "follower's sync", bs)
	as := ready(t, "leader's sync", co.sync(syncReq("g", a, 2, map[string]string{a: "p0", b: "p1"})))
	if got := string(ready(t, "follower's sync", bs).MemberAssignment); got != "p1" || string(as.MemberAssignment) != "p0" {
		t.Fatalf("assignments %q and %q, want p0 and p1", as.MemberAssignment, got)
	}
	wantCode(t, "heartbeat of the old generation", code(co.heartbeat("g", b, 1)), kerr.IllegalGeneration)
	wantCode(t, "commit of the old generation", code(co.checkCommit("g", a, 1)), kerr.IllegalGeneration)
	wantCode(t, "commit of the generation", code(co.checkCommit("g", a, 2)), nil)
}

// TestGroupRebalanceTimeout: a member that does not rejoin within the
// rebalance timeout is removed and the generation completes without it.
func TestGroupRebalanceTimeout(t *testing.T) {
	clk := newManualClock()
	co := newCoordinator(clk)
	a := stableOne(t, co)
	_, bj := newMember(t, co, "g")
	// a's heartbeats keep its session through the rebalance, but are no rejoin
	for range 3 {
		clk.Advance(testRebalance/3 - time.Second)
		wantCode(t, "heartbeat", code(co.heartbeat("g", a, 1)), kerr.RebalanceInProgress)
	}
	clk.Advance(3*time.Second - time.Millisecond)
	waiting(t, "join before the rebalance timeout", bj)
	clk.Advance(time.Millisecond)
	j := ready(t, "join at the rebalance timeout", bj)
	if j.Generation != 2 || j.LeaderID != j.MemberID || len(j.Members) != 1 {
		t.Fatalf("join: %+v, want generation 2 of the new member alone", j)
	}
	wantCode(t, "heartbeat of the removed member", code(co.heartbeat("g", a, 1)), kerr.UnknownMemberID)
}

// TestGroupSessionExpiry: a member silent for its session timeout is
// removed; the other learns by heartbeat and rejoins alone.
func TestGroupSessionExpiry(t *testing.T) {
	clk := newManualClock()
	co := newCoordinator(clk)
	a := stableOne(t, co)
	b, bj := newMember(t, co, "g")
	aj := ready(t, "rejoin", co.join(joinReq("g", a), "cli", "h"))
	ready(t, "join", bj)
	ready(t, "sync", co.sync(syncReq("g", a, aj.Generation, nil)))
	ready(t, "sync", co.sync(syncReq("g", b, aj.Generation, nil)))
	clk.Advance(testSession / 2)
	wantCode(t, "a's heartbeat", code(co.heartbeat("g", a, 2)), nil)
	clk.Advance(testSession / 2)
	if v := co.describe("g"); v.state != groupPreparing || len(v.members) != 1 {
		t.Fatalf("after b's session: %s with %d members, want PreparingRebalance with 1", v.state, len(v.members))
	}
	wantCode(t, "a's heartbeat", code(co.heartbeat("g", a, 2)), kerr.RebalanceInProgress)
	wantCode(t, "b's heartbeat", code(co.heartbeat("g", b, 2)), kerr.UnknownMemberID)
	if j := ready(t, "a's rejoin", co.join(joinReq("g", a), "cli", "h")); j.Generation != 3 || len(j.Members) != 1 {
		t.Fatalf("rejoin: %+v, want generation 3 alone", j)
	}
	// a waiting sync does not expire: the leader never syncs, its session ends
	clk.Advance(testSession)
	if v := co.describe("g"); v.state != groupEmpty || len(v.members) != 0 {
		t.Fatalf("after a's session: %s with %d members, want Empty", v.state, len(v.members))
	}
}

// TestGroupRefusals: each bad request gets the protocol's error and
// changes nothing.
func TestGroupRefusals(t *testing.T) {
	co := newCoordinator(newManualClock())
	a := stableOne(t, co)
	bad := joinReq("g", a)
	bad.SessionTimeoutMillis = 10
	wantCode(t, "session timeout 10ms", ready(t, "join", co.join(bad, "cli", "h")).ErrorCode, kerr.InvalidSessionTimeout)
	other := joinReq("g", "")
	other.ProtocolType = "connect"
	wantCode(t, "protocol type", ready(t, "join", co.join(other, "cli", "h")).ErrorCode, kerr.InconsistentGroupProtocol)
	wantCode(t, "no common protocol", ready(t, "join", co.join(joinReq("g", "", "sticky"), "cli", "h")).ErrorCode, kerr.InconsistentGroupProtocol)
	wantCode(t, "unknown member id", ready(t, "join", co.join(joinReq("g", "nobody"), "cli", "h")).ErrorCode, kerr.UnknownMemberID)
	wantCode(t, "sync of an unknown member", ready(t, "sync", co.sync(syncReq("g", "nobody", 1, nil))).ErrorCode, kerr.UnknownMemberID)
	wantCode(t, "sync of an old generation", ready(t, "sync", co.sync(syncReq("g", a, 0, nil))).ErrorCode, kerr.IllegalGeneration)
	wantCode(t, "sync of another group", ready(t, "sync", co.sync(syncReq("h", a, 1, nil))).ErrorCode, kerr.UnknownMemberID)
	wantCode(t, "commit without a member", code(co.checkCommit("g", "", -1)), kerr.UnknownMemberID)
	wantCode(t, "leave of an unknown member", code(co.leave("g", []string{"nobody"})[0]), kerr.UnknownMemberID)
	if v := co.describe("g"); v.state != groupStable || len(v.members) != 1 {
		t.Fatalf("after refusals: %s with %d members, want Stable with 1", v.state, len(v.members))
	}
	wantCode(t, "heartbeat", code(co.heartbeat("g", a, 1)), nil)
	wantCode(t, "commit without a member to an unknown group", code(co.checkCommit("new", "", -1)), nil)
}

// TestGroupLeave: the leader leaves; the remaining member rejoins and
// leads the next generation; the last to leave empties the group.
func TestGroupLeave(t *testing.T) {
	co := newCoordinator(newManualClock())
	a := stableOne(t, co)
	b, bj := newMember(t, co, "g")
	ready(t, "rejoin", co.join(joinReq("g", a), "cli", "h"))
	ready(t, "join", bj)
	wantCode(t, "leave", code(co.leave("g", []string{a})[0]), nil)
	j := ready(t, "b's rejoin", co.join(joinReq("g", b), "cli", "h"))
	if j.LeaderID != b || j.Generation != 3 {
		t.Fatalf("after the leader left: %+v, want generation 3 led by %s", j, b)
	}
	wantCode(t, "leave", code(co.leave("g", []string{b})[0]), nil)
	if v := co.describe("g"); v.state != groupEmpty {
		t.Fatalf("after every member left: %s, want Empty", v.state)
	}
}

// TestGroupForget: a group this broker stops coordinating answers its
// waiting joins NOT_COORDINATOR and is gone.
func TestGroupForget(t *testing.T) {
	co := newCoordinator(newManualClock())
	stableOne(t, co)
	_, bj := newMember(t, co, "g")
	co.forget("g")
	wantCode(t, "waiting join", ready(t, "join", bj).ErrorCode, kerr.NotCoordinator)
	if v := co.describe("g"); v.known {
		t.Fatalf("forgotten group still held: %+v", v)
	}
}

func TestGroupStateNames(t *testing.T) {
	for s, want := range map[groupState]string{groupEmpty: "Empty", groupPreparing: "PreparingRebalance", groupCompleting: "CompletingRebalance", groupStable: "Stable"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s.String(), want)
		}
	}
}
