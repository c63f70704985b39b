package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/internal/hclogzero"
	"github.com/malachi-log/malachi/internal/retry"
	"github.com/malachi-log/malachi/meta"
	"github.com/rs/zerolog"
)

// Errors returned by Node. Match them with errors.Is / errors.As.
var (
	// ErrNotLeader is wrapped (through *NotLeaderError) by Apply on a node
	// that is not the leader.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrLeadershipLost is wrapped by Apply when leadership was lost
	// while the command was in flight: it may or may not be committed.
	// Re-read the state (a compare-and-set makes a retry safe).
	ErrLeadershipLost = errors.New("cluster: leadership lost, outcome unknown")
	// ErrClosed is returned by methods of a closed Node.
	ErrClosed = errors.New("cluster: node closed")
)

// NotLeaderError says which node is the leader, as far as this one knows.
// LeaderID is zero and LeaderAddr empty when no leader is known.
type NotLeaderError struct {
	LeaderID   meta.BrokerID
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == 0 {
		return "cluster: not the leader (no leader known)"
	}
	return fmt.Sprintf("cluster: not the leader (leader is broker %d at %s)", e.LeaderID, e.LeaderAddr)
}

// Unwrap makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// Member is one voter as seen from this node.
type Member struct {
	ID   meta.BrokerID
	Addr string
	// LastContact: see Node.Members.
	LastContact time.Time
	// Self marks this node.
	Self bool
}

// Node is one member of the control plane: a raft server whose state
// machine is a meta.Table. Its methods are safe for concurrent use.
type Node struct {
	cfg   Config
	log   zerolog.Logger
	now   func() time.Time
	fsm   *fsm
	store *logStore
	logs  raft.LogStore // LogCache over store
	trans *contactTransport
	r     *raft.Raft

	leaderCh chan bool // capacity 1, latest value wins
	notify   chan bool // raft's NotifyCh
	obsCh    chan raft.Observation
	observer *raft.Observer

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	leaderSince time.Time                   // zero when not leader; protected by mu
	baseline    map[raft.ServerID]time.Time // contact assumed at leadership gain; protected by mu
	failing     map[raft.ServerID]time.Time // FailedHeartbeatObservation.LastContact; protected by mu
	prevLeader  raft.ServerID               // last other leader observed; protected by mu
	otherLed    bool                        // another node led since our last term; protected by mu
	termCancel  context.CancelFunc          // ends this leadership's goroutines; protected by mu
	closeOnce   sync.Once
	closeErr    error
}

// Open starts the node: it opens (or creates) the raft state under
// cfg.Dir, binds cfg.Addr, bootstraps the cluster with cfg.Peers if the
// log is empty, and returns without waiting for an election.
func Open(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := cfg.Logger // the host names the broker; cluster adds only its component
	log := base.With().Str("component", "cluster").Logger()
	n := &Node{
		cfg:      cfg,
		log:      log,
		now:      time.Now,
		fsm:      newFSM(log),
		leaderCh: make(chan bool, 1),
		notify:   make(chan bool, 16),
		obsCh:    make(chan raft.Observation, 64),
		baseline: map[raft.ServerID]time.Time{},
		failing:  map[raft.ServerID]time.Time{},
	}
	ok := false
	defer func() {
		if !ok {
			n.closeParts()
		}
	}()
	logDir, snapDir := filepath.Join(cfg.Dir, "raft-log"), filepath.Join(cfg.Dir, "raft-snap")
	for _, d := range []string{logDir, snapDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	var err error
	if n.store, err = openLogStore(logDir, base); err != nil {
		return nil, err
	}
	if n.logs, err = raft.NewLogCache(512, n.store); err != nil {
		return nil, fmt.Errorf("cluster: log cache: %w", err)
	}
	hlog := hclogzero.New(base, "raft")
	snaps, err := raft.NewFileSnapshotStoreWithLogger(snapDir, 2, hlog)
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot store %s: %w", snapDir, err)
	}
	gate := newGate(cfg, log, n.now)
	nt, err := openTransport(cfg, gate, hlog)
	if err != nil {
		return nil, err
	}
	n.trans = newContactTransport(nt, n.now)

	existing, err := raft.HasExistingState(n.logs, n.store, snaps)
	if err != nil {
		return nil, fmt.Errorf("cluster: read raft state in %s: %w", cfg.Dir, err)
	}
	rc := cfg.raftConfig(n.notify, base)
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	n.r, err = raft.NewRaft(rc, n.fsm, n.logs, n.store, snaps, n.trans)
	if err != nil {
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	gate.raft.Store(n.r)
	n.observer = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	n.r.RegisterObserver(n.observer)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(2)
	go n.leadershipLoop()
	go n.observeLoop()

	if !existing {
		var servers []raft.Server
		for _, p := range cfg.Peers {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: serverID(p.ID), Address: raft.ServerAddress(p.Addr)})
		}
		if err := n.r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return nil, fmt.Errorf("cluster: bootstrap with %d peers: %w", len(servers), err)
		}
		log.Info().Int("peers", len(servers)).Msg("cluster: bootstrapped")
	}
	ok = true
	log.Info().Str("addr", cfg.Addr).Bool("existing_state", existing).Msg("cluster: node open")
	return n, nil
}

// openTransport binds cfg.Addr: raft's NetworkTransport over mutual TLS
// (tlsStream) with cfg.TLS, its plain TCP transport with cfg.Insecure.
//
// Both replicate without pipelining (MaxRPCsInFlight 1): with hashicorp/raft
// 1.8's default of 2, both of the pipeline's channels are unbuffered, and a
// follower's Success=false ends the leader's decoder while its sender can
// still issue one more send, which then waits on the decoder forever; the
// pipeline is closed only by that sender, so replication to that follower
// stops for good (heartbeats go on, so no election heals it) and
// Raft.Shutdown waits for it forever. Seen here as a cluster test that hung
// in Node.Close for 11 minutes (goroutine dump: netPipeline.AppendEntries
// blocked on inprogressCh, decodeResponses on doneCh). Synchronous
// AppendEntries cost nothing measurable at our command rates.
func openTransport(cfg Config, g *gate, hlog hclog.Logger) (*raft.NetworkTransport, error) {
	if cfg.Insecure {
		adv, err := net.ResolveTCPAddr("tcp", cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("cluster: Addr %q: %w", cfg.Addr, err)
		}
		nt, err := raft.NewTCPTransportWithConfig(cfg.Addr, adv, &raft.NetworkTransportConfig{
			MaxPool: 3, Timeout: 10 * time.Second, Logger: hlog, MaxRPCsInFlight: 1,
		})
		if err != nil {
			return nil, fmt.Errorf("cluster: listen on Addr %q: %w", cfg.Addr, err)
		}
		return nt, nil
	}
	st, err := newTLSStream(cfg.Addr, cfg.TLS, g)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen on Addr %q: %w", cfg.Addr, err)
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: st, MaxPool: 3, Timeout: 10 * time.Second, Logger: hlog, MaxRPCsInFlight: 1,
	}), nil
}

// Close stops the node: raft shuts down (this node stops voting and
// leading), the transport and the raft log close. It is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.closeParts() })
	return n.closeErr
}

func (n *Node) closeParts() error {
	var errs []error
	if n.r != nil {
		n.r.DeregisterObserver(n.observer)
		if err := n.r.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: raft shutdown: %w", err))
		}
	}
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
	if n.trans != nil {
		if err := n.trans.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: transport close: %w", err))
		}
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: raft log close: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (n *Node) closed() bool { return n.ctx.Err() != nil }

// leadershipLoop drains raft's NotifyCh promptly (raft blocks on it) and
// republishes on leaderCh without ever blocking.
func (n *Node) leadershipLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			n.endTerm()
			return
		case v := <-n.notify:
			if v {
				n.beginTerm()
			} else {
				n.endTerm()
			}
			select {
			case <-n.leaderCh: // drop a value not yet received: latest wins
			default:
			}
			select {
			case n.leaderCh <- v:
			default:
			}
		}
	}
}

func (n *Node) beginTerm() {
	now := n.now()
	lc := n.r.LastContact() // as a follower, our last contact with the old leader
	ctx, cancel := context.WithCancel(n.ctx)
	n.mu.Lock()
	if n.termCancel != nil {
		n.termCancel()
	}
	n.termCancel = cancel
	n.leaderSince = now
	n.baseline = map[raft.ServerID]time.Time{}
	n.failing = map[raft.ServerID]time.Time{}
	// Without a leader in between (a lease step-down and re-election of
	// this node, typically), nobody heard from a voter since this node's
	// own last contact with it: carry that over rather than restart the
	// voter's clock.
	carry := !n.otherLed
	for _, s := range n.r.GetConfiguration().Configuration().Servers {
		n.baseline[s.ID] = now
		if t := n.trans.lastContact(s.ID); carry && !t.IsZero() {
			n.baseline[s.ID] = t
		}
	}
	if n.otherLed && n.prevLeader != "" && !lc.IsZero() {
		n.baseline[n.prevLeader] = lc
	}
	n.otherLed = false
	n.mu.Unlock()
	n.log.Info().Msg("cluster: became leader")
	n.wg.Add(1)
	go n.ensureFactor(ctx)
}

func (n *Node) endTerm() {
	n.mu.Lock()
	was := !n.leaderSince.IsZero()
	if n.termCancel != nil {
		n.termCancel()
		n.termCancel = nil
	}
	n.leaderSince = time.Time{}
	n.mu.Unlock()
	if was {
		n.log.Info().Msg("cluster: lost leadership")
	}
}

// ensureFactor applies cfg.ReplicationFactor once, when the metadata has
// none: after a Barrier, so that a factor set in an earlier term is seen.
func (n *Node) ensureFactor(ctx context.Context) {
	defer n.wg.Done()
	bo := retry.Backoff{Initial: n.cfg.HeartbeatTimeout, Max: n.cfg.HeartbeatTimeout}
	for ctx.Err() == nil {
		err := n.Barrier(ctx)
		if err == nil {
			if n.fsm.factor() != 0 {
				return
			}
			_, err = n.Apply(ctx, meta.SetReplicationFactor{Factor: n.cfg.ReplicationFactor})
			if err == nil {
				n.log.Info().Int("factor", n.cfg.ReplicationFactor).Msg("cluster: replication factor set")
				return
			}
		}
		if ctx.Err() != nil || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrClosed) {
			return
		}
		n.log.Warn().Err(err).Msg("cluster: setting the replication factor; retrying")
		_ = bo.Wait(ctx) // a done ctx ends the loop
	}
}

func (n *Node) observeLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case o := <-n.obsCh:
			switch d := o.Data.(type) {
			case raft.LeaderObservation:
				if d.LeaderID != "" && d.LeaderID != serverID(n.cfg.ID) {
					n.mu.Lock()
					n.prevLeader, n.otherLed = d.LeaderID, true
					n.mu.Unlock()
				}
			case raft.FailedHeartbeatObservation:
				n.mu.Lock()
				first := n.failing[d.PeerID].IsZero()
				n.failing[d.PeerID] = d.LastContact
				n.mu.Unlock()
				if first {
					n.log.Warn().Str("peer", string(d.PeerID)).Time("last_contact", d.LastContact).Msg("cluster: heartbeats to a voter failing")
				}
			case raft.ResumedHeartbeatObservation:
				n.mu.Lock()
				delete(n.failing, d.PeerID)
				n.mu.Unlock()
				n.log.Info().Str("peer", string(d.PeerID)).Msg("cluster: heartbeats to a voter resumed")
			}
		}
	}
}

// IsLeader reports whether this node is the raft leader now.
func (n *Node) IsLeader() bool { return n.r.State() == raft.Leader }

// Leader returns the leader's id and raft address as this node knows
// them; zero and "" when none is known.
func (n *Node) Leader() (meta.BrokerID, string) {
	addr, id := n.r.LeaderWithID()
	if id == "" {
		return 0, ""
	}
	b, err := meta.ParseBrokerID(string(id))
	if err != nil {
		return 0, string(addr)
	}
	return b, string(addr)
}

// LeaderCh delivers true when this node becomes leader and false when it
// stops being leader, with hashicorp/raft's LeaderCh semantics: the
// channel holds one value and a newer transition replaces one not yet
// received, so a receiver that sees true twice knows leadership was lost
// and regained in between. Every call returns the same channel: it has
// one consumer (the coordinator). Raft is never blocked by it.
func (n *Node) LeaderCh() <-chan bool { return n.leaderCh }

func (n *Node) notLeader() error {
	id, addr := n.Leader()
	return &NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

// Apply proposes c and waits until it is committed and applied by this
// node's FSM. It returns c's log index.
//
// Errors: c invalid → wraps meta.ErrInvalid, nothing proposed; not the
// leader → wraps ErrNotLeader (errors.As gives *NotLeaderError);
// the FSM refused c → wraps meta's error (meta.ErrStaleReplicas,
// meta.ErrUnknownSegment, meta.ErrSegmentExists, meta.ErrSealed, ...),
// with the index it occupies, and the state is unchanged; leadership lost
// in flight → wraps ErrLeadershipLost; ctx done before the outcome is
// known → wraps ctx.Err() (the command may still apply); closed →
// ErrClosed.
func (n *Node) Apply(ctx context.Context, c meta.Command) (uint64, error) {
	if n.closed() {
		return 0, ErrClosed
	}
	if err := c.Validate(); err != nil {
		return 0, fmt.Errorf("cluster: apply %s: %w", c.Op(), err)
	}
	data, err := meta.EncodeCommand(c)
	if err != nil {
		return 0, err
	}
	if n.r.State() != raft.Leader {
		return 0, fmt.Errorf("cluster: apply %s: %w", c.Op(), n.notLeader())
	}
	timeout, err := enqueueTimeout(ctx)
	if err != nil {
		return 0, fmt.Errorf("cluster: apply %s: %w", c.Op(), err)
	}
	f := n.r.Apply(data, timeout)
	if err := wait(ctx, f); err != nil {
		return 0, fmt.Errorf("cluster: apply %s: %w", c.Op(), n.mapErr(err))
	}
	idx := f.Index()
	if res, ok := f.Response().(applyResult); ok && res.err != nil {
		return idx, fmt.Errorf("cluster: apply %s at index %d: %w", c.Op(), idx, res.err)
	}
	return idx, nil
}

func enqueueTimeout(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d, ok := ctx.Deadline()
	if !ok {
		return 0, nil
	}
	t := time.Until(d)
	if t <= 0 {
		return 0, context.DeadlineExceeded
	}
	return t, nil
}

// wait waits for f, or for ctx; without a ctx deadline or cancellation it
// waits inline.
func wait(ctx context.Context, f raft.Future) error {
	if ctx.Done() == nil {
		return f.Error()
	}
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("outcome unknown: %w", ctx.Err())
	}
}

func (n *Node) mapErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return n.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %v", ErrLeadershipLost, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	}
	return err
}

// Barrier returns once this node's FSM has applied every command
// committed before the call. On the leader that is raft's Barrier (every
// command committed cluster-wide). On a follower it is every command this
// node knows to be committed (raft's CommitIndex, which trails the
// leader's by at most one heartbeat). Errors: ctx.Err() wrapped, ErrClosed.
func (n *Node) Barrier(ctx context.Context) error {
	if n.closed() {
		return ErrClosed
	}
	if n.r.State() == raft.Leader {
		timeout, err := enqueueTimeout(ctx)
		if err != nil {
			return fmt.Errorf("cluster: barrier: %w", err)
		}
		err = wait(ctx, n.r.Barrier(timeout))
		if err == nil {
			return nil
		}
		if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
			return fmt.Errorf("cluster: barrier: %w", n.mapErr(err))
		}
	}
	return n.followerBarrier(ctx)
}

// followerBarrier waits until the FSM has applied the last command entry
// at or below the commit index. Raft's AppliedIndex runs ahead of the FSM
// and non-command entries (no-ops, configurations, barriers) never reach
// it, so the wait is for the last command entry, found in the log.
func (n *Node) followerBarrier(ctx context.Context) error {
	target := n.r.CommitIndex()
	applied, changed := n.fsm.appliedIndex()
	need := applied
	var l raft.Log
	for i := target; i > applied; i-- {
		err := n.logs.GetLog(i, &l)
		if errors.Is(err, raft.ErrLogNotFound) {
			break // compacted: covered by a snapshot already restored
		}
		if err != nil {
			return fmt.Errorf("cluster: barrier: %w", err)
		}
		if l.Type == raft.LogCommand {
			need = i
			break
		}
	}
	for applied < need {
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: barrier at index %d, applied %d: %w", need, applied, ctx.Err())
		case <-n.ctx.Done():
			return ErrClosed
		case <-changed:
		}
		applied, changed = n.fsm.appliedIndex()
	}
	return nil
}

// Snapshot returns a deep copy of this node's metadata, sorted by id:
// consistent (one applied index, in Index) and possibly behind the
// leader's. It costs a copy of every segment (O(segments), three
// allocations); the caller owns the result. For the admin API and tests:
// a pass that reads the metadata every tick uses View.
func (n *Node) Snapshot() meta.Snapshot { return n.fsm.snapshot() }

// View returns this node's metadata at one applied index, immutable and
// shared (meta.View): calls with no command applied in between return the
// same *View; otherwise it costs O(chunks + brokers), never a copy of the
// segments. Later commands copy only the chunks they change, so a View
// never changes under its holder. The caller must not modify anything it
// reaches through the result. View.HeldBy finds a broker's copies without
// a scan.
func (n *Node) View() *meta.View { return n.fsm.view() }

// AwaitView waits until this node's metadata satisfies ok, checked at
// once and again after each command it applies (never by polling), or
// until ctx ends. ok gets the same immutable View as View.
func (n *Node) AwaitView(ctx context.Context, ok func(*meta.View) bool) error {
	for {
		_, changed := n.fsm.appliedIndex()
		v := n.View()
		if ok(v) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: awaiting the metadata at index %d: %w", v.Index(), ctx.Err())
		case <-n.ctx.Done():
			return ErrClosed
		case <-changed:
		}
	}
}

// Segment returns a copy of one segment of this node's metadata.
func (n *Node) Segment(id meta.SegmentID) (meta.Segment, bool) { return n.fsm.segment(id) }

// Members returns the voters of the current raft configuration, sorted
// as raft lists them.
//
// On the leader, LastContact is the last time that voter answered an
// AppendEntries RPC from this leader (heartbeats go out every
// HeartbeatTimeout/10, so a live voter's LastContact is that recent, plus
// one round trip). Raft's FailedHeartbeatObservation refines it with
// raft's own record while heartbeats fail. A voter not heard from since
// this node became leader gets the moment leadership was gained, except
// the previous leader, which gets this node's last contact with it as a
// follower, and except when no other node led since this node's previous
// term (a lease step-down and re-election), when each voter keeps its
// contact from that term: a new leader never declares a voter dead sooner
// than it could know, and neither a failover nor a flap resets the clock
// of a voter that is down. Self is always now.
//
// On a follower, only the leader's LastContact is known (raft's
// LastContact: the last AppendEntries from it); the others are zero.
func (n *Node) Members() []Member {
	if n.closed() {
		return nil
	}
	servers := n.r.GetConfiguration().Configuration().Servers
	now := n.now()
	leader := n.IsLeader()
	_, leaderID := n.r.LeaderWithID()
	var followerContact time.Time
	if !leader {
		followerContact = n.r.LastContact()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Member, 0, len(servers))
	for _, s := range servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		id, err := meta.ParseBrokerID(string(s.ID))
		if err != nil {
			continue
		}
		m := Member{ID: id, Addr: string(s.Address), Self: id == n.cfg.ID}
		switch {
		case m.Self:
			m.LastContact = now
		case leader:
			m.LastContact = n.baseline[s.ID]
			if n.leaderSince.IsZero() { // raft says leader, notification not yet seen
				m.LastContact = now
			}
			if t := n.trans.lastContact(s.ID); t.After(m.LastContact) {
				m.LastContact = t
			}
			if t := n.failing[s.ID]; t.After(m.LastContact) {
				m.LastContact = t
			}
		case s.ID == leaderID:
			m.LastContact = followerContact
		}
		out = append(out, m)
	}
	return out
}
