package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// contactTransport is raft's network transport (mutual TLS or plain
// TCP, see openTransport), recording the time of every AppendEntries RPC
// (heartbeat or replication) that got a response from a peer. The leader sends a heartbeat to every follower every
// HeartbeatTimeout/10, so on the leader this is each voter's last
// contact to within that interval plus one round trip. Vote and pre-vote
// answers are recorded apart (votes): a candidate without a quorum learns
// from them which voters it can reach (Node.Quorum).
//
// Embedding *raft.NetworkTransport keeps its optional interfaces
// (WithClose, WithPreVote) visible to raft's type assertions.
type contactTransport struct {
	*raft.NetworkTransport
	now func() time.Time

	mu      sync.Mutex
	contact map[raft.ServerID]time.Time // protected by mu
	votes   map[raft.ServerID]time.Time // protected by mu
}

func newContactTransport(t *raft.NetworkTransport, now func() time.Time) *contactTransport {
	return &contactTransport{NetworkTransport: t, now: now, contact: map[raft.ServerID]time.Time{}, votes: map[raft.ServerID]time.Time{}}
}

// AppendEntries implements raft.Transport.
func (t *contactTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		now := t.now()
		t.mu.Lock()
		t.contact[id] = now
		t.mu.Unlock()
	}
	return err
}

// RequestVote implements raft.Transport.
func (t *contactTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	err := t.NetworkTransport.RequestVote(id, target, args, resp)
	t.voted(id, err)
	return err
}

// RequestPreVote implements raft.WithPreVote.
func (t *contactTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	err := t.NetworkTransport.RequestPreVote(id, target, args, resp)
	t.voted(id, err)
	return err
}

func (t *contactTransport) voted(id raft.ServerID, err error) {
	if err != nil {
		return
	}
	now := t.now()
	t.mu.Lock()
	t.votes[id] = now
	t.mu.Unlock()
}

// lastAnswer returns the last successful RPC of any kind with id, or zero.
func (t *contactTransport) lastAnswer(id raft.ServerID) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, v := t.contact[id], t.votes[id]
	if v.After(a) {
		return v
	}
	return a
}

// lastContact returns the last successful AppendEntries with id, or zero.
func (t *contactTransport) lastContact(id raft.ServerID) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.contact[id]
}
