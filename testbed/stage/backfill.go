package stage

import (
	"context"
	"fmt"
	"time"

	"github.com/malachi-log/malachi/testbed/harness"
)

// backfillStageShare divides the run's catch-up rate for the backfill-kill
// stage, so that transfers last seconds and the strike lands on bytes
// moving.
const backfillStageShare = 4

// slowBackfills restarts the brokers one at a time at the stage's
// catch-up rate; restore writes the run's rate back for their next start.
// With no cap (--backfill-rate 0) it changes nothing and says so.
func (e *Env) slowBackfills(ctx context.Context, fr *Report) (restore func(), err error) {
	restore = func() {}
	if e.BackfillRate <= 0 {
		addNote(fr, "catch-up not throttled (--backfill-rate 0): the in-flight window may be missed, and the stage then fails")
		return restore, nil
	}
	old := e.C.Config().HealExtra
	restore = func() {
		e.C.SetHealExtra(old)
		for _, b := range e.C.Brokers() {
			_ = e.C.WriteConfig(b)
		}
	}
	rate := max(e.BackfillRate/backfillStageShare, 4096)
	key := func(r int64) string { return fmt.Sprintf("backfill_bytes_per_second = %d", r) }
	leftovers := 0
	err = e.restartWith(ctx, key(e.BackfillRate), key(rate), fmt.Sprintf("catch-up slowed to %d B/s per broker for this stage (a quarter of %d)", rate, e.BackfillRate), func(b *harness.Broker) error {
		n, err := b.DropLeftovers(&e.last.Snap)
		leftovers += n
		return err
	})
	if err != nil {
		return restore, err
	}
	if _, err := e.settle(ctx, "brokers back at the stage's catch-up rate", time.Now()); err != nil {
		return restore, err
	}
	addNote(fr, "catch-up throttled to %d B/s per broker for the stage (brokers restarted with it first; %d copies left outside their replica sets by earlier stages removed while their broker was down, so that the heal pass must move bytes instead of adopting one)", rate, leftovers)
	return restore, nil
}

// freshestFollower is the follower whose death needs the most real
// transfers (segments with no leftover copy to adopt); ties by the seed.
func (e *Env) freshestFollower() *harness.Broker {
	files := e.C.CopySizes()
	var best []*harness.Broker
	most := -1
	for _, b := range e.C.Running() {
		if b.ID == e.last.Leader {
			continue
		}
		sealed := e.sealedOn(b.ID)
		if len(sealed) == 0 {
			continue
		}
		fresh := 0
		for _, id := range sealed {
			seg, ok := e.last.Snap.Segment(id)
			if !ok {
				continue
			}
			left := false
			for holder, m := range files {
				if _, has := m[id]; has && !seg.HasReplica(holder) {
					left = true
				}
			}
			if !left {
				fresh++
			}
		}
		switch {
		case fresh > most:
			best, most = []*harness.Broker{b}, fresh
		case fresh == most:
			best = append(best, b)
		}
	}
	if len(best) == 0 {
		return nil
	}
	return best[e.Rand.IntN(len(best))]
}
