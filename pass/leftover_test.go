package pass

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

func (f *fakeBrokers) DeleteLeftover(ctx context.Context, b meta.BrokerID, s meta.SegmentID, index uint64) error {
	f.log("delete_leftover %s@%d at %d", s, b, index)
	return nil
}

// refusingLeftovers is a broker whose leftover deletes fail.
type refusingLeftovers struct{ *fakeBrokers }

func (f refusingLeftovers) DeleteLeftover(ctx context.Context, b meta.BrokerID, s meta.SegmentID, index uint64) error {
	f.log("delete_leftover %s@%d at %d", s, b, index)
	return errors.New("remove s.seg: operation not permitted")
}

// The Coordinator runs DeleteLeftoverCopy through the LeftoverDeleter with
// the plan's index, after the delay on its own clock, and reports what it
// did or why it failed.
func TestCoordinatorDeletesLeftover(t *testing.T) {
	for _, fail := range []bool{false, true} {
		w := newWorld(4, 3, seg("s", 1, 2, 3)).leftover(4, "s", 1048, true, "")
		f := newFake(w)
		var d Deleter = f
		if fail {
			d = refusingLeftovers{f}
		}
		now := t0
		c, err := New(Config{Metadata: f, Prober: f, Backfiller: f, Settler: f, Deleter: d,
			Policy: heal.Policy{Grace: 10 * time.Second, SettleBatch: 8, HoldShare: -1}, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := c.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(f.calls) != 0 || rep.LeftoverCopies != 1 {
			t.Fatalf("first pass: calls %v, leftovers %d", f.calls, rep.LeftoverCopies)
		}
		now = now.Add(2 * time.Minute)
		if rep, err = c.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(f.calls, []string{"delete_leftover s@4 at 7"}) {
			t.Fatalf("fail=%v: calls %v", fail, f.calls)
		}
		switch {
		case !fail && !slices.Equal(rep.LeftoversDeleted, []heal.CopyRef{{Segment: "s", Broker: 4}}):
			t.Fatalf("deleted %v", rep.LeftoversDeleted)
		case fail && (len(rep.LeftoverErrors) != 1 || !strings.Contains(rep.LeftoverErrors[0].Err, "operation not permitted")):
			t.Fatalf("leftover errors %+v", rep.LeftoverErrors)
		}
	}
}
