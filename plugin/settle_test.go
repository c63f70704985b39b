package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pass"
	"github.com/malachi-log/malachi/store"
)

// dirSyncCounter is a store.DirSyncer that syncs each directory and
// counts the syncs of each.
type dirSyncCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *dirSyncCounter) SyncDir(ctx context.Context, dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	d.mu.Lock()
	d.n[dir]++
	d.mu.Unlock()
	return f.Sync()
}

func (d *dirSyncCounter) count(dir string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[dir]
}

// failingConfirms is the plugin's client as a pass.Settler whose first
// fail confirmation requests fail without reaching the broker.
type failingConfirms struct {
	*Client
	fail atomic.Int32
}

func (f *failingConfirms) Confirm(ctx context.Context, b meta.BrokerID, segs []meta.Segment, errs []error) error {
	if f.fail.Add(-1) >= 0 {
		return errors.New("injected: confirm request lost")
	}
	return f.Client.Confirm(ctx, b, segs, errs)
}

// TestSettleSyncsDirectoryEveryPassUntilConfirmed: the seed's P6.8,
// "Settling such a copy costs a directory fsync per pass that selects it
// until it is confirmed", over a real store and the settle RPC, driven by
// heal passes. The copy is sealed (it measures its byte_size plus the
// footer: overrun until confirmed); the first two passes' confirmations
// are lost, so it stays settled but unconfirmed and is selected again.
// Each of the three passes that select it syncs its shard directory once,
// though the store has nothing left to cut (the copy is unchanged since
// its seal); once confirmed it is not selected and costs none. It catches
// SettleBatch dropping its directory sync, or skipping it for a copy it
// did not change.
func TestSettleSyncsDirectoryEveryPassUntilConfirmed(t *testing.T) {
	cp := &memCP{t: meta.NewTable(1), ch: make(chan bool, 1)}
	syncs := &dirSyncCounter{n: map[string]int{}}
	in := startInstanceWith(t, cp, 1, store.Options{DirSyncer: syncs}, nil)
	addSegment(t, cp, sealedCopy(t, in.db, "a", 5, 1))
	cl := in.p.Client()
	settler := &failingConfirms{Client: cl}
	settler.fail.Store(2)
	var barriered atomic.Bool
	var applied atomic.Uint64
	c, err := pass.New(pass.Config{
		Metadata: passMetadata{cp: cp, m: newMetrics(prometheus.NewRegistry()), barriered: &barriered, applied: &applied},
		Prober:   cl, Backfiller: cl, Settler: settler, Deleter: cl,
		Policy: heal.Policy{Grace: time.Hour, SettleBatch: 8, HoldShare: -1}})
	if err != nil {
		t.Fatal(err)
	}
	shard := filepath.Dir(in.db.Path("a"))
	copyA := []heal.CopyRef{{Segment: "a", Broker: 1}}
	for pass, want := range []struct {
		syncs     int
		confirmed bool
	}{{1, false}, {1, false}, {1, true}, {0, false}, {0, false}} {
		before := syncs.count(shard)
		rep, err := c.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got := syncs.count(shard) - before
		selected := slices.Equal(rep.Settling, copyA)
		if got != want.syncs || selected != (want.syncs > 0) || slices.Equal(rep.Confirmed, copyA) != want.confirmed {
			t.Errorf("pass %d: %d directory syncs of the copy's shard, settling %v, confirmed %v; want %d syncs, selected %v, confirmed %v",
				pass+1, got, rep.Settling, rep.Confirmed, want.syncs, want.syncs > 0, want.confirmed)
		}
	}
}
