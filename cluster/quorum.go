package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
)

// ErrNoQuorum is wrapped by Quorum.Err when fewer than a majority of the
// voters can be reached: no command can commit until enough return.
var ErrNoQuorum = errors.New("cluster: no quorum")

// Quorum is what this node knows of the voters it can reach, from raft's
// own traffic (no probe is sent): the leader's heartbeat answers, a
// follower's heartbeats from its leader, a candidate's vote answers.
type Quorum struct {
	// Voters is the number of voters in the configuration.
	Voters int
	// Reachable are the voters heard from within Window, this node
	// included (when it is a voter).
	Reachable []meta.BrokerID
	// Leader is the leader this node heard from within Window (itself when
	// it leads), 0 when none: a follower of a live leader has a quorum
	// through it, whichever voters it hears from itself.
	Leader meta.BrokerID
	// Window is how recent an answer must be to count.
	Window time.Duration
}

// Has reports whether a command can commit: a leader is known and live,
// or a majority of the voters answered within the window.
func (q Quorum) Has() bool { return q.Leader != 0 || 2*len(q.Reachable) > q.Voters }

// Err is nil when q has a quorum, else an error wrapping ErrNoQuorum that
// says how many voters answered: "cluster: no quorum: 2 of 5 voters
// reachable (1, 2) within 1.2s".
func (q Quorum) Err() error {
	if q.Has() {
		return nil
	}
	return fmt.Errorf("%w: %d of %d voters reachable %v within %v, %d needed", ErrNoQuorum, len(q.Reachable), q.Voters, q.Reachable, q.Window, q.Voters/2+1)
}

// quorumWindow is how recent an answer must be to count a voter
// reachable: three election timeouts, the longest a live candidate waits
// between two vote requests (raft randomizes each between one and two).
func (n *Node) quorumWindow() time.Duration {
	return 3 * max(n.cfg.ElectionTimeout, n.cfg.HeartbeatTimeout)
}

// Quorum returns which voters this node reached recently. It costs a
// configuration read and a lock, no network.
func (n *Node) Quorum() Quorum {
	q := Quorum{Window: n.quorumWindow()}
	if n.closed() {
		return q
	}
	now := n.now()
	leading := n.IsLeader()
	_, leaderID := n.r.LeaderWithID()
	if leading {
		q.Leader = n.cfg.ID
	} else if leaderID != "" && now.Sub(n.r.LastContact()) <= q.Window {
		if id, err := meta.ParseBrokerID(string(leaderID)); err == nil {
			q.Leader = id
		}
	}
	for _, s := range n.r.GetConfiguration().Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		q.Voters++
		id, err := meta.ParseBrokerID(string(s.ID))
		if err != nil {
			continue
		}
		heard := n.trans.lastAnswer(s.ID)
		if id == q.Leader && !leading {
			heard = n.r.LastContact()
		}
		if id == n.cfg.ID || now.Sub(heard) <= q.Window {
			q.Reachable = append(q.Reachable, id)
		}
	}
	return q
}
