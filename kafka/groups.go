package kafka

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The group coordinator: the classic consumer group protocol's state
// machine, one per broker, holding the groups this broker coordinates in
// memory (their committed offsets are the broker's, through Groups). The
// assignors run in the clients: the coordinator elects a leader, hands it
// the members' metadata, and hands each member what the leader assigned.
//
// A group moves Empty → PreparingRebalance (a join, a leave, a session
// expiry) → CompletingRebalance (every member rejoined, or the rebalance
// timeout removed those that did not: a new generation, answered to every
// pending join) → Stable (the leader's SyncGroup, answered to every
// pending sync), and back to PreparingRebalance on the next join, leave or
// expiry.
//
// INVARIANT: every field of every group is protected by coordinator.mu; a
// waiting JoinGroup or SyncGroup holds a channel of capacity 1 that gets
// exactly one answer (answered, then deleted from the map, under mu).

type groupState int8

const (
	groupEmpty groupState = iota
	groupPreparing
	groupCompleting
	groupStable
)

func (s groupState) String() string {
	switch s {
	case groupPreparing:
		return "PreparingRebalance"
	case groupCompleting:
		return "CompletingRebalance"
	case groupStable:
		return "Stable"
	}
	return "Empty"
}

// The session timeout bounds (Kafka's group.min/max.session.timeout.ms).
const (
	minSessionTimeout = 6 * time.Second
	maxSessionTimeout = 30 * time.Minute
)

// maxPending bounds a group's member ids handed out and not yet joined
// with; past it they are forgotten (a client that returns with one
// gets UNKNOWN_MEMBER_ID and joins anew).
const maxPending = 1000

// member is one member of a group.
type member struct {
	id, instanceID, clientID, host string
	protocols                      []kmsg.JoinGroupRequestProtocol
	session, rebalance             time.Duration
	assignment                     []byte
	expires                        time.Time // the session's end, unless a join or sync waits
	stop                           func() bool
}

// group is one consumer group's membership.
type group struct {
	id           string
	state        groupState
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	order        []string        // member ids in join order: the leader is the first when it leaves
	pending      map[string]bool // ids handed out with MEMBER_ID_REQUIRED, not yet joined
	joins        map[string]chan *kmsg.JoinGroupResponse
	syncs        map[string]chan *kmsg.SyncGroupResponse
	rebalanceAt  time.Time // the PreparingRebalance's deadline
	stopRebal    func() bool
}

// coordinator holds the groups of one broker.
type coordinator struct {
	clock Clock

	mu     sync.Mutex
	groups map[string]*group // protected by mu
}

func newCoordinator(clock Clock) *coordinator {
	if clock == nil {
		clock = systemClock{}
	}
	return &coordinator{clock: clock, groups: map[string]*group{}}
}

// newMemberID is clientID, a dash and 16 random hex digits (Kafka's form).
func newMemberID(clientID string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return clientID + "-" + hex.EncodeToString(b[:])
}

// answered is a channel holding v.
func answered[T any](v T) chan T {
	ch := make(chan T, 1)
	ch <- v
	return ch
}

// join registers req's member in its group and returns the channel its
// answer comes on: at once for a refusal or a new member's id
// (MEMBER_ID_REQUIRED), when the rebalance completes otherwise.
func (co *coordinator) join(req *kmsg.JoinGroupRequest, clientID, host string) <-chan *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Generation, resp.MemberID = -1, req.MemberID
	refuse := func(e *kerr.Error) <-chan *kmsg.JoinGroupResponse {
		resp.ErrorCode = e.Code
		return answered(resp)
	}
	session := time.Duration(req.SessionTimeoutMillis) * time.Millisecond
	rebalance := session
	if req.Version >= 1 && req.RebalanceTimeoutMillis > 0 {
		rebalance = time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	}
	switch {
	case req.Group == "" || len(req.Group) > MaxGroupLen:
		return refuse(kerr.InvalidGroupID)
	case session < minSessionTimeout || session > maxSessionTimeout:
		return refuse(kerr.InvalidSessionTimeout)
	case req.ProtocolType == "" || len(req.Protocols) == 0:
		return refuse(kerr.InconsistentGroupProtocol)
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.groups[req.Group]
	if g == nil {
		g = &group{id: req.Group, members: map[string]*member{}, pending: map[string]bool{},
			joins: map[string]chan *kmsg.JoinGroupResponse{}, syncs: map[string]chan *kmsg.SyncGroupResponse{}}
		co.groups[req.Group] = g
	}
	m := g.members[req.MemberID]
	switch {
	case len(g.members) > 0 && req.ProtocolType != g.protocolType:
		return refuse(kerr.InconsistentGroupProtocol)
	case len(g.members) > 0 && !g.supports(req.Protocols, req.MemberID):
		return refuse(kerr.InconsistentGroupProtocol)
	case m == nil && req.MemberID == "" && req.Version >= 4:
		id := newMemberID(clientID)
		if len(g.pending) >= maxPending { // ids never used: their clients left
			clear(g.pending)
		}
		g.pending[id] = true
		resp.MemberID = id
		return refuse(kerr.MemberIDRequired)
	case m == nil && req.MemberID != "" && !g.pending[req.MemberID]:
		return refuse(kerr.UnknownMemberID)
	}
	if m == nil {
		id := req.MemberID
		if id == "" {
			id = newMemberID(clientID)
		}
		delete(g.pending, id)
		m = &member{id: id}
		g.members[id] = m
		g.order = append(g.order, id)
		if len(g.members) == 1 {
			g.protocolType = req.ProtocolType
		}
	}
	m.clientID, m.host, m.session, m.rebalance = clientID, host, session, rebalance
	m.protocols = slices.Clone(req.Protocols)
	if req.InstanceID != nil {
		m.instanceID = *req.InstanceID
	}
	ch := make(chan *kmsg.JoinGroupResponse, 1)
	if old := g.joins[m.id]; old != nil { // a retry: the earlier wait is answered as superseded
		old <- joinRefusal(m.id, kerr.UnknownMemberID)
	}
	g.joins[m.id] = ch
	if g.state != groupPreparing {
		co.prepare(g)
	}
	co.tryComplete(g)
	return ch
}

// supports says whether protocols shares a name with every other member
// of g (all but self).
func (g *group) supports(protocols []kmsg.JoinGroupRequestProtocol, self string) bool {
	for _, p := range protocols {
		all := true
		for id, m := range g.members {
			if id != self && !slices.ContainsFunc(m.protocols, func(q kmsg.JoinGroupRequestProtocol) bool { return q.Name == p.Name }) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func joinRefusal(memberID string, e *kerr.Error) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Generation, resp.MemberID, resp.ErrorCode = -1, memberID, e.Code
	return resp
}

// prepare starts a rebalance of g: pending syncs are answered
// REBALANCE_IN_PROGRESS, and the rebalance timeout (the longest of the
// members') starts.
func (co *coordinator) prepare(g *group) {
	g.state = groupPreparing
	for id, ch := range g.syncs {
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		ch <- resp
		delete(g.syncs, id)
	}
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalance)
	}
	if g.stopRebal != nil {
		g.stopRebal()
	}
	at := co.clock.Now().Add(d)
	g.rebalanceAt = at
	g.stopRebal = co.clock.AfterFunc(d, func() { co.rebalanceTimeout(g.id, at) })
}

// rebalanceTimeout ends the rebalance of group that started with deadline
// at, if it still runs: the members that did not rejoin are removed.
func (co *coordinator) rebalanceTimeout(id string, at time.Time) {
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.groups[id]
	if g == nil || g.state != groupPreparing || !g.rebalanceAt.Equal(at) {
		return
	}
	for _, mid := range slices.Clone(g.order) {
		if g.joins[mid] == nil {
			co.remove(g, mid)
		}
	}
	co.complete(g)
}

// tryComplete completes g's rebalance once every member waits in a join.
func (co *coordinator) tryComplete(g *group) {
	if g.state != groupPreparing {
		return
	}
	for id := range g.members {
		if g.joins[id] == nil {
			return
		}
	}
	co.complete(g)
}

// complete ends g's rebalance with the members that rejoined: a new
// generation, its protocol and leader, answered to every waiting join.
func (co *coordinator) complete(g *group) {
	if g.stopRebal != nil {
		g.stopRebal()
		g.stopRebal = nil
	}
	g.generation++
	if len(g.members) == 0 {
		g.state, g.protocol, g.protocolType, g.leader = groupEmpty, "", "", ""
		return
	}
	g.state = groupCompleting
	if g.members[g.leader] == nil {
		g.leader = g.order[0]
	}
	g.protocol = g.choose()
	for _, id := range g.order {
		m := g.members[id]
		m.assignment = nil
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.Generation, resp.ProtocolType, resp.Protocol = g.generation, kmsg.StringPtr(g.protocolType), kmsg.StringPtr(g.protocol)
		resp.LeaderID, resp.MemberID = g.leader, id
		if id == g.leader {
			for _, oid := range g.order {
				rm := kmsg.NewJoinGroupResponseMember()
				rm.MemberID, rm.ProtocolMetadata = oid, g.members[oid].metadata(g.protocol)
				if iid := g.members[oid].instanceID; iid != "" {
					rm.InstanceID = kmsg.StringPtr(iid)
				}
				resp.Members = append(resp.Members, rm)
			}
		}
		g.joins[id] <- resp
		delete(g.joins, id)
		co.touch(g, m)
	}
}

// choose is the protocol every member supports that the leader prefers
// most (the members' protocols share one: join checks).
func (g *group) choose() string {
	for _, p := range g.members[g.leader].protocols {
		if g.supports([]kmsg.JoinGroupRequestProtocol{p}, "") {
			return p.Name
		}
	}
	return g.members[g.leader].protocols[0].Name
}

// metadata is m's metadata for protocol.
func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// touch starts m's session anew: it ends session timeout from now unless
// m calls again (a heartbeat, a join, a sync, a commit).
func (co *coordinator) touch(g *group, m *member) {
	if m.stop != nil {
		m.stop()
	}
	at := co.clock.Now().Add(m.session)
	m.expires = at
	gid, mid := g.id, m.id
	m.stop = co.clock.AfterFunc(m.session, func() { co.expire(gid, mid, at) })
}

// expire removes a member whose session ended at at, unless it called
// since or waits in a join or sync, and rebalances its group.
func (co *coordinator) expire(gid, mid string, at time.Time) {
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.groups[gid]
	if g == nil {
		return
	}
	m := g.members[mid]
	if m == nil || !m.expires.Equal(at) || g.joins[mid] != nil || g.syncs[mid] != nil {
		return
	}
	co.remove(g, mid)
	co.rebalance(g)
}

// rebalance follows a member's departure: a Stable or CompletingRebalance
// group prepares a new one; a preparing one may now be complete.
func (co *coordinator) rebalance(g *group) {
	switch g.state {
	case groupStable, groupCompleting:
		co.prepare(g)
		co.tryComplete(g)
	case groupPreparing:
		co.tryComplete(g)
	}
}

// remove drops member id from g, answering its waiting join or sync with
// UNKNOWN_MEMBER_ID.
func (co *coordinator) remove(g *group, id string) {
	m := g.members[id]
	if m == nil {
		return
	}
	if m.stop != nil {
		m.stop()
	}
	delete(g.members, id)
	g.order = slices.DeleteFunc(g.order, func(x string) bool { return x == id })
	if ch := g.joins[id]; ch != nil {
		ch <- joinRefusal(id, kerr.UnknownMemberID)
		delete(g.joins, id)
	}
	if ch := g.syncs[id]; ch != nil {
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode = kerr.UnknownMemberID.Code
		ch <- resp
		delete(g.syncs, id)
	}
	if g.leader == id {
		g.leader = ""
	}
}

// check finds member mid of group gid at generation gen:
// UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, or nil with the member.
func (co *coordinator) check(gid, mid string, gen int32) (*group, *member, *kerr.Error) {
	g := co.groups[gid]
	if g == nil || g.members[mid] == nil {
		return g, nil, kerr.UnknownMemberID
	}
	if gen != g.generation {
		return g, g.members[mid], kerr.IllegalGeneration
	}
	return g, g.members[mid], nil
}

// sync answers SyncGroup: the leader's assignment completes the
// rebalance; the others wait for it, or get theirs when Stable.
func (co *coordinator) sync(req *kmsg.SyncGroupRequest) <-chan *kmsg.SyncGroupResponse {
	resp := kmsg.NewPtrSyncGroupResponse()
	co.mu.Lock()
	defer co.mu.Unlock()
	g, m, e := co.check(req.Group, req.MemberID, req.Generation)
	switch {
	case e != nil:
	case req.ProtocolType != nil && *req.ProtocolType != g.protocolType,
		req.Protocol != nil && *req.Protocol != g.protocol:
		e = kerr.InconsistentGroupProtocol
	case g.state == groupPreparing:
		e = kerr.RebalanceInProgress
	}
	if e != nil {
		resp.ErrorCode = e.Code
		return answered(resp)
	}
	co.touch(g, m)
	if g.state == groupStable {
		return answered(g.syncAnswer(m))
	}
	ch := make(chan *kmsg.SyncGroupResponse, 1)
	if old := g.syncs[m.id]; old != nil {
		r := kmsg.NewPtrSyncGroupResponse()
		r.ErrorCode = kerr.UnknownMemberID.Code
		old <- r
	}
	g.syncs[m.id] = ch
	if m.id != g.leader {
		return ch
	}
	for _, a := range req.GroupAssignment {
		if am := g.members[a.MemberID]; am != nil {
			am.assignment = a.MemberAssignment
		}
	}
	g.state = groupStable
	for id, c := range g.syncs {
		c <- g.syncAnswer(g.members[id])
		delete(g.syncs, id)
		co.touch(g, g.members[id])
	}
	return ch
}

func (g *group) syncAnswer(m *member) *kmsg.SyncGroupResponse {
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.ProtocolType, resp.Protocol = kmsg.StringPtr(g.protocolType), kmsg.StringPtr(g.protocol)
	resp.MemberAssignment = m.assignment
	if resp.MemberAssignment == nil {
		resp.MemberAssignment = []byte{}
	}
	return resp
}

// heartbeat answers Heartbeat: the member's session starts anew, and
// REBALANCE_IN_PROGRESS tells it to rejoin.
func (co *coordinator) heartbeat(gid, mid string, gen int32) *kerr.Error {
	co.mu.Lock()
	defer co.mu.Unlock()
	g, m, e := co.check(gid, mid, gen)
	if e != nil {
		return e
	}
	co.touch(g, m)
	if g.state == groupPreparing {
		return kerr.RebalanceInProgress
	}
	return nil
}

// leave removes members of gid and rebalances; each unknown one is
// UNKNOWN_MEMBER_ID.
func (co *coordinator) leave(gid string, ids []string) []*kerr.Error {
	co.mu.Lock()
	defer co.mu.Unlock()
	out := make([]*kerr.Error, len(ids))
	g := co.groups[gid]
	left := false
	for i, id := range ids {
		if g == nil || g.members[id] == nil {
			out[i] = kerr.UnknownMemberID
			continue
		}
		co.remove(g, id)
		left = true
	}
	if left {
		co.rebalance(g)
	}
	return out
}

// checkCommit says whether member mid may commit offsets for gid at
// generation gen (Kafka's rule): a commit with no member and a negative
// generation only to a group without members; otherwise the member must
// be of the current generation and the group not completing a rebalance.
// A member's commit starts its session anew.
func (co *coordinator) checkCommit(gid, mid string, gen int32) *kerr.Error {
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.groups[gid]
	if gen < 0 && mid == "" && (g == nil || len(g.members) == 0) {
		return nil
	}
	g, m, e := co.check(gid, mid, gen)
	switch {
	case e != nil:
		return e
	case g.state == groupCompleting:
		return kerr.RebalanceInProgress
	}
	co.touch(g, m)
	return nil
}

// forget drops gid (this broker no longer coordinates it, or it was
// deleted): waiting joins and syncs are answered NOT_COORDINATOR, timers
// stopped.
func (co *coordinator) forget(gid string) {
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.groups[gid]
	if g == nil {
		return
	}
	for id, ch := range g.joins {
		ch <- joinRefusal(id, kerr.NotCoordinator)
	}
	for _, ch := range g.syncs {
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode = kerr.NotCoordinator.Code
		ch <- resp
	}
	for _, m := range g.members {
		if m.stop != nil {
			m.stop()
		}
	}
	if g.stopRebal != nil {
		g.stopRebal()
	}
	delete(co.groups, gid)
}

// groupView is a group as DescribeGroups and ListGroups show it.
type groupView struct {
	state                  groupState
	protocolType, protocol string
	members                []kmsg.DescribeGroupsResponseGroupMember
	known                  bool
}

// describe is gid's state and members.
func (co *coordinator) describe(gid string) groupView {
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.groups[gid]
	if g == nil {
		return groupView{}
	}
	v := groupView{state: g.state, protocolType: g.protocolType, known: true}
	if g.state == groupStable || g.state == groupCompleting {
		v.protocol = g.protocol
	}
	for _, id := range g.order {
		m := g.members[id]
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.ClientID, dm.ClientHost = m.id, m.clientID, m.host
		if m.instanceID != "" {
			dm.InstanceID = kmsg.StringPtr(m.instanceID)
		}
		dm.ProtocolMetadata, dm.MemberAssignment = m.metadata(g.protocol), m.assignment
		v.members = append(v.members, dm)
	}
	return v
}

// list is every group held here, by id.
func (co *coordinator) list() map[string]groupView {
	co.mu.Lock()
	defer co.mu.Unlock()
	out := make(map[string]groupView, len(co.groups))
	for id, g := range co.groups {
		out[id] = groupView{state: g.state, protocolType: g.protocolType, known: true}
	}
	return out
}
