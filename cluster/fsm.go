package cluster

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// fsm is the raft state machine: a meta.Table, and the last meta.View of
// it while no command applied since (so that readers between two changes
// share one View). It keeps no copy of any of the table's state (the
// factor, the segments): the table's own accessors answer.
//
// INVARIANT: cur is nil or table.View() at the current applied state;
// every change sets it to nil. Protected by mu (table.View marks the
// table's memory shared, so it is taken with mu held for writing).
type fsm struct {
	log zerolog.Logger

	mu      sync.RWMutex
	table   *meta.Table
	cur     *meta.View
	applied uint64 // last raft index of a command entry applied, or of the restored snapshot's table
	// changed is closed (and replaced) after every batch applied or
	// restore, to wake Barrier waiters on followers.
	changed chan struct{}
}

func newFSM(log zerolog.Logger) *fsm {
	return &fsm{log: log, table: meta.NewTable(0), changed: make(chan struct{})}
}

var _ raft.BatchingFSM = (*fsm)(nil)

// applyResult is what ApplyBatch returns for each command entry: the
// future's Response on the node that proposed it.
type applyResult struct{ err error }

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch implements raft.BatchingFSM. Every command entry, refused or
// not, yields an applyResult; other entry types yield nil.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	f.mu.Lock()
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		f.applied = max(f.applied, l.Index)
		c, err := meta.DecodeCommand(l.Data)
		if err != nil {
			// Only a peer running different code can propose this.
			f.log.Error().Err(err).Uint64("index", l.Index).Msg("cluster: undecodable command in the log; skipped")
			out[i] = applyResult{err: fmt.Errorf("cluster: command at index %d: %w", l.Index, err)}
			continue
		}
		out[i] = applyResult{err: f.table.Apply(l.Index, c)}
	}
	f.cur = nil
	f.checkApplied()
	ch := f.changed
	f.changed = make(chan struct{})
	f.mu.Unlock()
	close(ch)
	return out
}

// snapshot returns a deep copy of the current state, sorted by id.
func (f *fsm) snapshot() meta.Snapshot { return f.view().Snapshot() }

// view returns the View of the current state: the same one while no
// command applies.
func (f *fsm) view() *meta.View {
	f.mu.RLock()
	v := f.cur
	f.mu.RUnlock()
	if v != nil {
		return v
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur == nil {
		f.cur = f.table.View()
	}
	return f.cur
}

// factor returns the table's replication factor.
func (f *fsm) factor() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.ReplicationFactor()
}

func (f *fsm) segment(id meta.SegmentID) (meta.Segment, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Segment(id)
}

// appliedIndex returns the last applied command index and a channel closed
// at the next change.
func (f *fsm) appliedIndex() (uint64, <-chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied, f.changed
}
