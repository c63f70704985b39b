package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupServer is a test server with topic "t" of 2 partitions holding 3
// and 0 records, and a raw connection to it.
func groupServer(t *testing.T) (*testCluster, *rawConn, string) {
	t.Helper()
	tc := newTestCluster(t)
	if err := tc.CreateTopic(context.Background(), "t", 2); err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, tc, DefaultConfig())
	rc := dialRaw(t, addr)
	p := producePartition(t, rc.do(produceRequest("t", 0, makeBatch(-1, -1, -1, "a", "b", "c"))))
	wantCode(t, "produce", p.ErrorCode, nil)
	return tc, rc, addr
}

// rawJoin joins "g" as one member over rc and syncs: Stable at gen 1.
func rawJoin(t *testing.T, rc *rawConn) (string, int32) {
	t.Helper()
	jr := joinReq("g", "")
	first := rc.do(jr).(*kmsg.JoinGroupResponse)
	wantCode(t, "join", first.ErrorCode, kerr.MemberIDRequired)
	jr.MemberID = first.MemberID
	j := rc.do(jr).(*kmsg.JoinGroupResponse)
	wantCode(t, "join", j.ErrorCode, nil)
	s := rc.do(syncReq("g", j.MemberID, j.Generation, map[string]string{j.MemberID: "x"})).(*kmsg.SyncGroupResponse)
	wantCode(t, "sync", s.ErrorCode, nil)
	return j.MemberID, j.Generation
}

func commitReq(member string, gen int32, offsets map[int32]int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.SetVersion(8)
	req.Group, req.MemberID, req.Generation = "g", member, gen
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "t"
	for p := range int32(2) {
		if o, ok := offsets[p]; ok {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.Metadata = p, o, kmsg.StringPtr("m")
			rt.Partitions = append(rt.Partitions, rp)
		}
	}
	req.Topics = append(req.Topics, rt)
	return req
}

func commitCodes(resp kmsg.Response) []int16 {
	var out []int16
	for _, t := range resp.(*kmsg.OffsetCommitResponse).Topics {
		for _, p := range t.Partitions {
			out = append(out, p.ErrorCode)
		}
	}
	return out
}

// fetchCommitted is group g's committed offsets of t/0 and t/1 read with
// OffsetFetch at version.
func fetchCommitted(t *testing.T, rc *rawConn, version int16) [2]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.SetVersion(version)
	var out [2]int64
	if version >= 8 {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = "g"
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.Partitions = "t", []int32{0, 1}
		rg.Topics = append(rg.Topics, rt)
		req.Groups = append(req.Groups, rg)
		resp := rc.do(req).(*kmsg.OffsetFetchResponse)
		wantCode(t, "offset fetch", resp.Groups[0].ErrorCode, nil)
		for i, p := range resp.Groups[0].Topics[0].Partitions {
			out[i] = p.Offset
		}
		return out
	}
	req.Group = "g"
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "t", []int32{0, 1}
	req.Topics = append(req.Topics, rt)
	resp := rc.do(req).(*kmsg.OffsetFetchResponse)
	wantCode(t, "offset fetch", resp.ErrorCode, nil)
	for i, p := range resp.Topics[0].Partitions {
		out[i] = p.Offset
	}
	return out
}

// TestOffsetCommitChecks: a commit is stored in one CommitOffsets call for
// all its partitions; a commit past a partition's end, from an old
// generation or from an unknown member changes nothing.
func TestOffsetCommitChecks(t *testing.T) {
	tc, rc, _ := groupServer(t)
	if got := fetchCommitted(t, rc, 8); got != [2]int64{-1, -1} {
		t.Fatalf("committed before any commit: %v, want -1 -1", got)
	}
	id, gen := rawJoin(t, rc)
	if got := commitCodes(rc.do(commitReq(id, gen, map[int32]int64{0: 2, 1: 0}))); got[0] != 0 || got[1] != 0 {
		t.Fatalf("commit: codes %v", got)
	}
	for _, tt := range []struct {
		what    string
		member  string
		gen     int32
		offsets map[int32]int64
		want    *kerr.Error
	}{
		{"past the end", id, gen, map[int32]int64{0: 4}, kerr.OffsetOutOfRange},
		{"negative", id, gen, map[int32]int64{1: -5}, kerr.OffsetOutOfRange},
		{"old generation", id, gen - 1, map[int32]int64{0: 3}, kerr.IllegalGeneration},
		{"unknown member", "nobody", gen, map[int32]int64{0: 3}, kerr.UnknownMemberID},
	} {
		for _, c := range commitCodes(rc.do(commitReq(tt.member, tt.gen, tt.offsets))) {
			wantCode(t, tt.what, c, tt.want)
		}
	}
	tc.mu.Lock()
	commits := len(tc.commits)
	tc.mu.Unlock()
	if commits != 1 {
		t.Fatalf("%d CommitOffsets calls, want 1 (one per accepted request)", commits)
	}
	for _, v := range []int16{1, 5, 8} {
		if got := fetchCommitted(t, rc, v); got != [2]int64{2, 0} {
			t.Fatalf("OffsetFetch v%d: %v, want 2 0", v, got)
		}
	}
	// one partition refused, one accepted: only the accepted one changes
	if got := commitCodes(rc.do(commitReq(id, gen, map[int32]int64{0: 3, 1: 9}))); got[0] != 0 || got[1] != kerr.OffsetOutOfRange.Code {
		t.Fatalf("mixed commit: codes %v", got)
	}
	if got := fetchCommitted(t, rc, 8); got != [2]int64{3, 0} {
		t.Fatalf("after the mixed commit: %v, want 3 0", got)
	}
}

// TestNotCoordinator: a broker that does not coordinate a group answers
// its requests NOT_COORDINATOR and FindCoordinator names the one that
// does.
func TestNotCoordinator(t *testing.T) {
	tc, rc, _ := groupServer(t)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.SetVersion(4)
	fc.CoordinatorKeys = []string{"g"}
	if r := rc.do(fc).(*kmsg.FindCoordinatorResponse).Coordinators[0]; r.ErrorCode != 0 || r.NodeID != 1 || r.Port != tc.addr.Port {
		t.Fatalf("FindCoordinator: %+v, want broker 1 at port %d", r, tc.addr.Port)
	}
	tc.mu.Lock()
	tc.coordinator = 7
	tc.mu.Unlock()
	if r := rc.do(fc).(*kmsg.FindCoordinatorResponse).Coordinators[0]; r.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("FindCoordinator of a broker without a listener: %+v, want COORDINATOR_NOT_AVAILABLE", r)
	}
	wantCode(t, "join", rc.do(joinReq("g", "")).(*kmsg.JoinGroupResponse).ErrorCode, kerr.NotCoordinator)
	for _, c := range commitCodes(rc.do(commitReq("", -1, map[int32]int64{0: 1}))) {
		wantCode(t, "commit", c, kerr.NotCoordinator)
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group = "g"
	wantCode(t, "heartbeat", rc.do(hb).(*kmsg.HeartbeatResponse).ErrorCode, kerr.NotCoordinator)
	tc.mu.Lock()
	n := len(tc.commits)
	tc.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d commits stored through a broker that is not the coordinator", n)
	}
}

// TestGroupAdmin: DescribeGroups and ListGroups show a group's members;
// DeleteGroups refuses a group with members and deletes an empty one's
// offsets.
func TestGroupAdmin(t *testing.T) {
	tc, rc, _ := groupServer(t)
	id, gen := rawJoin(t, rc)
	rc.do(commitReq(id, gen, map[int32]int64{0: 1}))
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.SetVersion(5)
	dg.Groups = []string{"g", "none"}
	d := rc.do(dg).(*kmsg.DescribeGroupsResponse)
	if g := d.Groups[0]; g.State != "Stable" || len(g.Members) != 1 || g.Members[0].MemberID != id || string(g.Members[0].MemberAssignment) != "x" {
		t.Fatalf("describe g: %+v", g)
	}
	if g := d.Groups[1]; g.State != "Dead" || g.ErrorCode != 0 {
		t.Fatalf("describe an unknown group: %+v, want Dead", g)
	}
	lg := kmsg.NewPtrListGroupsRequest()
	lg.SetVersion(4)
	if l := rc.do(lg).(*kmsg.ListGroupsResponse); len(l.Groups) != 1 || l.Groups[0].Group != "g" || l.Groups[0].GroupState != "Stable" {
		t.Fatalf("list: %+v", l.Groups)
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.SetVersion(2)
	del.Groups = []string{"g", "none"}
	r := rc.do(del).(*kmsg.DeleteGroupsResponse)
	wantCode(t, "delete a group with members", r.Groups[0].ErrorCode, kerr.NonEmptyGroup)
	wantCode(t, "delete an unknown group", r.Groups[1].ErrorCode, kerr.GroupIDNotFound)
	lv := kmsg.NewPtrLeaveGroupRequest()
	lv.SetVersion(3)
	lv.Group = "g"
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = id
	lv.Members = append(lv.Members, lm)
	wantCode(t, "leave", rc.do(lv).(*kmsg.LeaveGroupResponse).Members[0].ErrorCode, nil)
	del.Groups = []string{"g"}
	wantCode(t, "delete an empty group", rc.do(del).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode, nil)
	if o := tc.committed("g"); len(o) != 0 {
		t.Fatalf("offsets after DeleteGroups: %+v", o)
	}
}

// TestGroupRoles: a viewer finds a group's coordinator and reads its
// offsets but may not join it or commit (GROUP_AUTHORIZATION_FAILED).
func TestGroupRoles(t *testing.T) {
	l := testPKI(t)
	tc := newTestCluster(t)
	addr := startServer(t, tc, tlsConfig(t, l))
	cl := newClient(t, addr, kgo.DialTLSConfig(clientTLS(t, l.ClientDir(), "viewer")))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = "g"
	r, err := fc.RequestWith(ctx, cl)
	if err != nil || r.ErrorCode != 0 || r.NodeID != 1 {
		t.Fatalf("viewer's FindCoordinator: %v %+v", err, r)
	}
	jr, err := joinReq("g", "").RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "viewer's JoinGroup", jr.ErrorCode, kerr.GroupAuthorizationFailed)
	cr, err := commitReq("", -1, map[int32]int64{0: 0}).RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "viewer's OffsetCommit", commitCodes(cr)[0], kerr.GroupAuthorizationFailed)
}

// TestKgoConsumerGroup: two kgo group consumers (committing, kgo's
// defaults) share a topic's partitions and read every record, commit and
// leave; 30 more records are produced, and a third member of the group
// resumes every partition exactly at its committed offset and reads them.
func TestKgoConsumerGroup(t *testing.T) {
	const n = 300
	tc := newTestCluster(t)
	addr := startServer(t, tc, DefaultConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod := newClient(t, addr, kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("events"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	for i := range n {
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ends := map[int32]int64{}
	for p := range tc.Topics()[0].Partitions {
		_, ends[int32(p)] = mustLog(t, tc, "events", int32(p)).stats()
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	pollCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var members []*kgo.Client
	for range 2 {
		cl := groupMember(t, addr)
		members = append(members, cl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pollCtx.Err() == nil {
				fs := cl.PollFetches(pollCtx)
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
				if len(seen) == n {
					stop()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("the group read %d distinct records of %d: %v", len(seen), n, ctx.Err())
	}
	for _, cl := range members {
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
		cl.Close() // leaves the group
	}
	committed := map[int32]int64{}
	for _, o := range tc.committed("g") {
		committed[o.Partition] = o.Offset
	}
	if len(committed) == 0 {
		t.Fatal("nothing committed")
	}
	for i := range 30 { // what the third member must read from the committed offsets on
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "more %d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for p := range ends {
		_, ends[p] = mustLog(t, tc, "events", p).stats()
	}
	third := groupMember(t, addr)
	first, next := map[int32]int64{}, map[int32]int64{}
	for p, end := range ends {
		if committed[p] > end {
			t.Fatalf("partition %d: committed %d past its end %d", p, committed[p], end)
		}
		if committed[p] == end {
			first[p], next[p] = end, end
		}
	}
	for len(first) < len(ends) || !reached(next, ends) {
		fs := third.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("the third member read up to %v of %v: %v", next, ends, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := first[r.Partition]; !ok {
				first[r.Partition] = r.Offset
			}
			next[r.Partition] = r.Offset + 1
		})
	}
	for p := range ends {
		if first[p] != committed[p] {
			t.Errorf("partition %d: the third member started at %d, the group had committed %d", p, first[p], committed[p])
		}
	}
}

// groupMember is a kgo consumer of "events" in group "g".
func groupMember(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("events"),
		kgo.HeartbeatInterval(100*time.Millisecond), kgo.SessionTimeout(6*time.Second), kgo.AutoCommitInterval(100*time.Millisecond),
		kgo.AutoCommitCallback(func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			for _, tp := range resp.Topics {
				for _, p := range tp.Partitions {
					if p.ErrorCode != 0 {
						t.Errorf("commit of member %s gen %d: %s/%d: %v", req.MemberID, req.Generation, tp.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
					}
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// reached says whether next holds every partition of ends at its end.
func reached(next, ends map[int32]int64) bool {
	for p, end := range ends {
		if next[p] < end {
			return false
		}
	}
	return true
}

func mustLog(t *testing.T, tc *testCluster, topic string, p int32) *fileLog {
	t.Helper()
	l, err := tc.fileLog(topic, p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
