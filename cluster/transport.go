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
// contact to within that interval plus one round trip.
//
// Embedding *raft.NetworkTransport keeps its optional interfaces
// (WithClose, WithPreVote) visible to raft's type assertions.
type contactTransport struct {
	*raft.NetworkTransport
	now func() time.Time

	mu      sync.Mutex
	contact map[raft.ServerID]time.Time // protected by mu
}

func newContactTransport(t *raft.NetworkTransport, now func() time.Time) *contactTransport {
	return &contactTransport{NetworkTransport: t, now: now, contact: map[raft.ServerID]time.Time{}}
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

// lastContact returns the last successful AppendEntries with id, or zero.
func (t *contactTransport) lastContact(id raft.ServerID) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.contact[id]
}
