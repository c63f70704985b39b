package broker

import (
	"fmt"
	"net/http"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/cluster"
	"github.com/malachi-log/malachi/plugin"
)

// The read-only routes: health, this broker's copies, the plugin's status
// and pass history.

func quorumHealth(q cluster.Quorum) admin.Quorum {
	h := admin.Quorum{Voters: q.Voters, Reachable: q.Reachable}
	if err := q.Err(); err != nil {
		h.Error = err.Error()
	}
	return h
}

func (b *Server) health(*http.Request, []byte) (any, error) {
	id, _ := b.node.Leader()
	return admin.Health{ID: b.self, Leader: id, IsLeader: b.node.IsLeader(), Heal: b.heal != nil, Index: b.node.Snapshot().Index, Quorum: quorumHealth(b.node.Quorum())}, nil
}

func (b *Server) copies(r *http.Request, _ []byte) (any, error) {
	out := []admin.Copy{}
	for _, id := range b.db.List() {
		c := admin.Copy{ID: id}
		if err := b.db.LatchErr(id); err != nil {
			c.Latched, c.LatchError = true, err.Error()
		}
		if t, err := b.db.Tail(id); err == nil {
			c.Size, c.Sealed = t.Size, t.Footer
		}
		out = append(out, c)
	}
	return out, nil
}

func (b *Server) status(r *http.Request, _ []byte) (any, error) {
	if b.heal == nil {
		return map[string]string{"heal": "disabled"}, nil
	}
	return b.heal.Status(), nil
}

// passes answers this broker's pass history (plugin.PassHistory): the
// heal passes it ran as the coordinator after ?since=N, at most ?limit.
// Every broker answers its own; the leader's is the current one.
func (b *Server) passes(r *http.Request, _ []byte) (any, error) {
	if b.heal == nil {
		return nil, fmt.Errorf("%w: heal is disabled on broker %d", errNotFound, b.self)
	}
	since, limit, err := plugin.ParsePassQuery(r.URL.Query())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return b.heal.Passes(since, limit), nil
}
