package pass

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// batchBrokers counts the Settler requests per broker and fails the settle
// of the copies in fail.
type batchBrokers struct {
	*fakeBrokers
	mu       sync.Mutex
	settles  map[meta.BrokerID]int
	confirms map[meta.BrokerID]int
	fail     map[heal.CopyRef]bool
}

func (b *batchBrokers) Settle(ctx context.Context, id meta.BrokerID, segs []meta.Segment, errs []error) error {
	b.mu.Lock()
	b.settles[id]++
	b.mu.Unlock()
	if err := b.fakeBrokers.Settle(ctx, id, segs, errs); err != nil {
		return err
	}
	for i, s := range segs {
		if b.fail[heal.CopyRef{Segment: s.ID, Broker: id}] {
			errs[i] = errors.New("injected: settle failed")
		}
	}
	return nil
}

func (b *batchBrokers) Confirm(ctx context.Context, id meta.BrokerID, segs []meta.Segment, errs []error) error {
	b.mu.Lock()
	b.confirms[id]++
	b.mu.Unlock()
	return b.fakeBrokers.Confirm(ctx, id, segs, errs)
}

// A pass settles each broker's overrun copies with one request and
// confirms them with one more; a copy whose settle failed within the
// batch is not confirmed, the others are.
func TestCoordinatorSettlesABrokersCopiesInOneRequest(t *testing.T) {
	w := newWorld(3, 3, seg("a", 1, 2, 3), seg("b", 1, 2, 3), seg("c", 1, 2, 3)).
		anomaly(1, "a", heal.Overrun, 1040, false).anomaly(1, "b", heal.Overrun, 1040, false).anomaly(1, "c", heal.Overrun, 1040, false).
		anomaly(2, "a", heal.Overrun, 1040, false).anomaly(2, "c", heal.Overrun, 1040, false)
	f := &batchBrokers{fakeBrokers: newFake(w), settles: map[meta.BrokerID]int{}, confirms: map[meta.BrokerID]int{},
		fail: map[heal.CopyRef]bool{{Segment: "b", Broker: 1}: true}}
	now := w.in.Now
	c, err := New(Config{Metadata: f, Prober: f, Backfiller: f, Settler: f, Deleter: f,
		Policy: heal.Policy{Grace: 10 * time.Second, SettleBatch: 8, HoldShare: -1}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.settles[1] != 1 || f.settles[2] != 1 || f.confirms[1] != 1 || f.confirms[2] != 1 {
		t.Fatalf("settle requests %v, confirm requests %v: want one of each per broker", f.settles, f.confirms)
	}
	got := calls(f.fakeBrokers)
	for _, want := range []string{"confirm a@1", "confirm c@1", "confirm a@2", "confirm c@2"} {
		if !strings.Contains(got, want) {
			t.Errorf("calls lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "confirm b@1") {
		t.Errorf("confirmed b@1, whose settle failed:\n%s", got)
	}
	if len(rep.Settled) != 4 || len(rep.Confirmed) != 4 {
		t.Errorf("settled %v, confirmed %v: want 4 of each", rep.Settled, rep.Confirmed)
	}
}
