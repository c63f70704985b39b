package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/fsync"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/benchenv"
)

// settleFix is a store of n sealed copies and the segments they settle to.
type settleFix struct {
	dir  string
	db   *store.DB
	segs []meta.Segment
	dirs []string // the shard directories the copies are in
}

// newSettleFix makes a store under root holding n sealed copies named by
// name(i), through syncer.
func newSettleFix(b *testing.B, root string, n int, name func(i int) meta.SegmentID, syncer store.DirSyncer) settleFix {
	dir, err := os.MkdirTemp(root, "settle-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	db, err := store.Open(dir, store.Options{DirSyncer: syncer})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	fx := settleFix{dir: dir, db: db}
	shards := map[string]bool{}
	for i := range n {
		id := name(i)
		if err := db.Create(id, 0); err != nil {
			b.Fatal(err)
		}
		for r := range 4 {
			if _, err := db.Append(id, []byte(strings.Repeat("x", 40+r))); err != nil {
				b.Fatal(err)
			}
		}
		s, err := db.Seal(id)
		if err != nil {
			b.Fatal(err)
		}
		fx.segs = append(fx.segs, meta.Segment{ID: id, StartOffset: s.StartOffset, Length: s.Length, ByteSize: s.ByteSize,
			Sealed: true, Checksum: s.Checksum, Replicas: []meta.BrokerID{1}})
		shards[filepath.Dir(db.Path(id))] = true
	}
	for d := range shards {
		fx.dirs = append(fx.dirs, d)
	}
	return fx
}

// dirty makes a new entry in every shard directory of the fixture (and
// removes the previous one), so that each directory has something to make
// durable, as after the creates and truncates of a heal pass.
func (fx settleFix) dirty(b *testing.B, gen int) {
	for _, d := range fx.dirs {
		_ = os.Remove(filepath.Join(d, "dirty-"+strconv.Itoa(gen-1)))
		f, err := os.Create(filepath.Join(d, "dirty-"+strconv.Itoa(gen)))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// settleAll settles every copy of the fixture at once, a goroutine each,
// as a heal pass's settles arrive together.
func (fx settleFix) settleAll() error {
	errs := make([]error, len(fx.segs))
	var wg sync.WaitGroup
	for i := range fx.segs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = fx.db.Settle(fx.segs[i].ID, fx.segs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("settle %s: %w", fx.segs[i].ID, err)
		}
	}
	return nil
}

// settleBatch settles every copy of the fixture with one store.SettleBatch
// call, the way a heal pass's batch arrives at a broker in one request.
func (fx settleFix) settleBatch() error {
	results := make([]store.SettleResult, len(fx.segs))
	errs := make([]error, len(fx.segs))
	if err := fx.db.SettleBatch(context.Background(), fx.segs, results, errs); err != nil {
		return err
	}
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("settle %s: %w", fx.segs[i].ID, err)
		}
	}
	return nil
}

// statSyncfs is the floor: a stat of each copy's file and one syncfs.
func (fx settleFix) statSyncfs() error {
	var st unix.Stat_t
	for _, s := range fx.segs {
		p := fx.db.Path(s.ID)
		if err := unix.Stat(p, &st); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		if st.Size != s.ByteSize+store.FooterSize {
			return fmt.Errorf("stat %s: %d bytes, want %d", p, st.Size, s.ByteSize+store.FooterSize)
		}
	}
	return syncFS(fx.dir)
}

// gateSyncer passes directory syncs to s (an *fsync.Syncer), or skips
// them while off.
type gateSyncer struct {
	s   *fsync.Syncer
	off atomic.Bool
}

func (g *gateSyncer) SyncDirs(ctx context.Context, dirs []string, errs []error) error {
	if g.off.Load() {
		return nil
	}
	return g.s.SyncDirs(ctx, dirs, errs)
}

func (g *gateSyncer) SyncDir(ctx context.Context, path string) error {
	if g.off.Load() {
		return nil
	}
	return g.s.SyncDir(ctx, path)
}

// BenchmarkSettleBatch settles a batch of n sealed copies at once through
// one real fsync.Syncer (fsync.DefaultConfig, as the plugin configures it):
// each Settle opens, scans and checks its copy and syncs its shard
// directory, and the Syncer coalesces the concurrent directory syncs
// (answering a batch of at least FilesystemSyncMin distinct directories
// with one syncfs). Each iteration times, in turn and after making every
// directory involved dirty (untimed):
//
//   - batch: the same n copies settled by one store.SettleBatch call (a
//     copy this process settled before and that a stat finds unchanged
//     costs that stat; one SyncDirs for the 256 shard directories);
//   - sharded: n copies spread over the 256 shard directories, one Settle
//     call each, all at once;
//   - floor: a stat of each of the same n files and one syncfs(2), the
//     least any batch that makes n entries durable can do;
//   - one-dir: n copies all in one shard directory, the single-directory
//     layout's batch (every settle syncs the same directory);
//   - no-dir-sync: the sharded batch with its directory syncs skipped, the
//     cost of the settles' own work (open, read and check each copy).
//
// Metrics: ns/copy of each, batch-vs-floor (the goal: >= 0.9), sharded-vs-floor (floor time / sharded time:
// the fraction of the floor's throughput the batch reaches; the target is
// >= 0.9), one-dir-vs-floor, the Syncer's syncfs and fsync calls per
// batch, and load1, the one-minute load average when the benchmark ends.
// Medians over the iterations.
func BenchmarkSettleBatch(b *testing.B) {
	for _, n := range []int{1024, 4096} {
		b.Run("copies="+strconv.Itoa(n), func(b *testing.B) { benchSettleBatch(b, n) })
	}
}

func benchSettleBatch(b *testing.B, n int) {
	root := benchRoot(b)
	if err := os.MkdirAll(root, 0o755); err != nil {
		b.Fatal(err)
	}
	syncer, err := fsync.New(fsync.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer syncer.Close()
	gate := &gateSyncer{s: syncer}
	sharded := newSettleFix(b, root, n, func(i int) meta.SegmentID { return meta.SegmentID(fmt.Sprintf("seg-%06d", i)) }, gate)
	var oneIDs []meta.SegmentID
	for i := 0; len(oneIDs) < n; i++ {
		if id := meta.SegmentID(fmt.Sprintf("one-%07d", i)); store.Shard(id) == 0 {
			oneIDs = append(oneIDs, id)
		}
	}
	oneDir := newSettleFix(b, root, n, func(i int) meta.SegmentID { return oneIDs[i] }, syncer)
	if len(sharded.dirs) != store.Shards || len(oneDir.dirs) != 1 {
		b.Fatalf("fixtures span %d and %d directories, want %d and 1", len(sharded.dirs), len(oneDir.dirs), store.Shards)
	}
	var tBatch, tSharded, tFloor, tOne, tNoSync, fsSyncs, syncs, batchFS []float64
	gen := 0
	timed := func(fx settleFix, fn func() error) float64 {
		b.StopTimer()
		gen++
		fx.dirty(b, gen)
		b.StartTimer()
		start := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n)
	}
	round := func() {
		b0 := syncer.Stats()
		tBatch = append(tBatch, timed(sharded, sharded.settleBatch))
		b1 := syncer.Stats()
		batchFS = append(batchFS, float64(b1.FilesystemSyncs-b0.FilesystemSyncs))
		s0 := syncer.Stats()
		tSharded = append(tSharded, timed(sharded, sharded.settleAll))
		s1 := syncer.Stats()
		fsSyncs = append(fsSyncs, float64(s1.FilesystemSyncs-s0.FilesystemSyncs))
		syncs = append(syncs, float64(s1.Syncs-s0.Syncs))
		tFloor = append(tFloor, timed(sharded, sharded.statSyncfs))
		tOne = append(tOne, timed(oneDir, oneDir.settleAll))
		gate.off.Store(true)
		tNoSync = append(tNoSync, timed(sharded, sharded.settleAll))
		gate.off.Store(false)
	}
	round() // warm the page cache and the Syncer
	tBatch, tSharded, tFloor, tOne, tNoSync, fsSyncs, syncs, batchFS = nil, nil, nil, nil, nil, nil, nil, nil
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	ratio := make([]float64, len(tSharded))
	oneRatio := make([]float64, len(tSharded))
	batchRatio := make([]float64, len(tSharded))
	for i := range tSharded {
		batchRatio[i] = tFloor[i] / tBatch[i]
		ratio[i] = tFloor[i] / tSharded[i]
		oneRatio[i] = tFloor[i] / tOne[i]
	}
	b.ReportMetric(median(tBatch), "batch-ns/copy")
	b.ReportMetric(median(batchRatio), "batch-vs-floor")
	b.ReportMetric(median(batchFS), "batch-syncfs/batch")
	b.ReportMetric(median(tSharded), "sharded-ns/copy")
	b.ReportMetric(median(tFloor), "floor-ns/copy")
	b.ReportMetric(median(tOne), "one-dir-ns/copy")
	b.ReportMetric(median(tNoSync), "no-dir-sync-ns/copy")
	b.ReportMetric(median(ratio), "sharded-vs-floor")
	b.ReportMetric(median(oneRatio), "one-dir-vs-floor")
	b.ReportMetric(median(fsSyncs), "syncfs/batch")
	b.ReportMetric(median(syncs), "fsyncs/batch")
	benchenv.ReportLoad(b)
}
