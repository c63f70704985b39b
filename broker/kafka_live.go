package broker

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
)

// The Kafka listener's view of the living: Metadata lists, and a
// partition's leader names, only brokers this broker has heard answer
// within the dead delay, half the heal grace (heal counts a broker dead a
// grace after its last probe answer, so a dead broker leaves Metadata
// before heal replaces it, and a returning one reappears on its first
// answer). Each broker asks every other registered broker's admin API
// (alivePath, a constant answer) every probe interval.

// alivePath is the internal route answering a liveness probe.
const alivePath = "/v1/internal/kafka/alive"

// aliveResponse is alivePath's answer.
type aliveResponse struct {
	ID meta.BrokerID `json:"id"`
}

// internalAlive answers alivePath with this broker's id (no metadata
// read: it is asked by every broker several times a second).
func (b *Server) internalAlive(*http.Request, []byte) (any, error) {
	return aliveResponse{ID: b.self}, nil
}

// liveness tracks when each broker last answered a probe.
//
// INVARIANT: a broker is live when it is this one, or when it answered
// within the dead delay of now, or when this tracker started less than the
// dead delay ago and has not yet heard it (a broker is not counted dead
// before it could have been probed). Protected by mu.
type liveness struct {
	self     meta.BrokerID
	dead     time.Duration // no answer for this long: dead
	interval time.Duration // between probe rounds
	now      func() time.Time
	log      zerolog.Logger

	mu      sync.Mutex
	started time.Time
	seen    map[meta.BrokerID]time.Time
	down    map[meta.BrokerID]bool // counted dead (logged once per transition)
}

// newLiveness is a tracker counting a broker dead after half of grace
// without an answer, probing every eighth of it (100 ms to 1 s).
func newLiveness(self meta.BrokerID, grace time.Duration, now func() time.Time, log zerolog.Logger) *liveness {
	dead := grace / 2
	interval := min(max(grace/8, 100*time.Millisecond), time.Second)
	return &liveness{self: self, dead: dead, interval: interval, now: now, log: log,
		started: now(), seen: map[meta.BrokerID]time.Time{}, down: map[meta.BrokerID]bool{}}
}

// ok says whether broker id counts as live now; a nil tracker counts
// every broker live.
func (l *liveness) ok(id meta.BrokerID) bool {
	if l == nil || id == l.self {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.seen[id]
	if last.Before(l.started) {
		last = l.started
	}
	return l.now().Sub(last) <= l.dead
}

// answered records an answer of broker id, logging its return.
func (l *liveness) answered(id meta.BrokerID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[id] = l.now()
	if l.down[id] {
		delete(l.down, id)
		l.log.Info().Uint32("peer_broker", uint32(id)).Msg("kafka: broker answers again: listed in Metadata")
	}
}

// mark logs, once per transition, each broker of ids now counted dead.
func (l *liveness) mark(ids []meta.BrokerID) {
	for _, id := range ids {
		if l.ok(id) {
			continue
		}
		l.mu.Lock()
		if !l.down[id] {
			l.down[id] = true
			l.log.Warn().Uint32("peer_broker", uint32(id)).Time("last_answer", l.seen[id]).Dur("dead_after", l.dead).
				Msg("kafka: broker counted dead: left out of Metadata and partition leaders")
		}
		l.mu.Unlock()
	}
}

// startLive starts counting the brokers live or dead, until the broker
// closes.
func (kc *kafkaCluster) startLive() {
	b := kc.b
	kc.live = newLiveness(b.self, b.cfg.Heal.Grace, time.Now, b.log.With().Str("component", "kafka").Logger())
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		kc.probe(b.bgCtx)
	}()
}

// probe runs until ctx ends: every interval it asks each registered
// broker but this one, concurrently, each at most one probe in flight.
func (kc *kafkaCluster) probe(ctx context.Context) {
	l := kc.live
	var mu sync.Mutex
	busy := map[meta.BrokerID]bool{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		v := kc.b.node.View()
		var ids []meta.BrokerID
		for _, br := range v.Brokers() {
			if br.ID == l.self || br.AdminAddr == "" {
				continue
			}
			ids = append(ids, br.ID)
			mu.Lock()
			if busy[br.ID] {
				mu.Unlock()
				continue
			}
			busy[br.ID] = true
			mu.Unlock()
			wg.Add(1)
			go func(id meta.BrokerID, addr string) {
				defer wg.Done()
				pctx, cancel := context.WithTimeout(ctx, l.dead)
				defer cancel()
				var a aliveResponse
				if kc.b.call(pctx, http.MethodGet, addr, alivePath, nil, &a) == nil && a.ID == id {
					l.answered(id)
				}
				mu.Lock()
				delete(busy, id)
				mu.Unlock()
			}(br.ID, br.AdminAddr)
		}
		l.mark(ids)
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.interval):
		}
	}
}
