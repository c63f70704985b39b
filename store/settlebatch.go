package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/malachi-log/malachi/meta"
)

// settledMark is what the store remembers of a copy it sealed, received
// (a committed catch-up target) or settled in this process: the file
// (device, inode, size), its status change time (ctime) and the footer it
// ends with. While a stat finds the same file with the same size and
// change time, settling it again to the segment of that footer needs no
// read: nothing has written to it since. In-process writes clear the mark
// (every open for writing does); another process's write, truncate or
// attribute change moves the ctime, except one that lands within the same
// coarse timestamp tick (a few milliseconds) as the store's own last
// change. What a mark never says is that the bytes are still good under an
// unchanged inode (bit rot): that is the scrubber's to find, as for every
// confirmed copy.
type settledMark struct {
	ok     bool
	stamp  fileStamp
	footer Footer
}

// fileStamp is what a stat says of a file that a mark compares.
type fileStamp struct {
	dev, ino    uint64
	size, ctime int64
}

// stampOf reads a stamp from an FS's stat answer.
func stampOf(fi os.FileInfo) (fileStamp, bool) {
	dev, ino, ok := fileIDs(fi)
	ctime, ok2 := fileChanged(fi)
	return fileStamp{dev: dev, ino: ino, size: fi.Size(), ctime: ctime}, ok && ok2
}

// stamp stats the copy's file: straight into the stack on the operating
// system's file system, through the FS seam otherwise.
func (db *DB) stamp(path string) (fileStamp, bool) {
	if _, ok := db.fs.(osFS); ok {
		return osStamp(path)
	}
	fi, err := db.fs.Stat(path)
	if err != nil {
		return fileStamp{}, false
	}
	return stampOf(fi)
}

// mark records c's file, sealed with ft, as c's mark (no mark when the
// stat fails or the system gives no ctime). Caller holds c.mu.
func (db *DB) mark(c *copyState, ft Footer) {
	c.settled = settledMark{}
	st, ok := db.stamp(c.path)
	if !ok || st.size != ft.ByteSize+FooterSize {
		return
	}
	c.settled = settledMark{ok: true, stamp: st, footer: ft}
}

// footerEnd is the durable end of a copy sealed with ft.
func footerEnd(ft Footer) End {
	return End{NextOffset: ft.StartOffset + ft.Length, Bytes: ft.ByteSize, Frames: ft.Length, FileSize: ft.ByteSize + FooterSize, Footer: true}
}

// unchangedSince reports whether c carries a mark whose footer is seg's
// and a stat finds its file as marked. Caller holds c.mu.
func (db *DB) unchangedSince(c *copyState, seg meta.Segment) bool {
	m := &c.settled
	if !m.ok || !c.sealed || !footerAgrees(m.footer, seg) {
		return false
	}
	st, ok := db.stamp(c.path)
	return ok && st == m.stamp
}

// DirsSyncer is an optional capability of a DirSyncer: SyncDirs makes the
// entries of every directory in dirs durable at once, setting errs[i] for
// dirs[i] (the fsync package answers a batch of many directories of one
// file system with one syncfs). SettleBatch uses it when present.
type DirsSyncer interface {
	SyncDirs(ctx context.Context, dirs []string, errs []error) error
}

// SettleBatch settles the copies of segs (each as Settle does) and then
// makes their shard directories durable together: one SyncDirs for every
// distinct shard of the batch when Options.DirSyncer has it, else one
// SyncDir per shard. results[i] and errs[i] answer segs[i]; both must be
// as long as segs. A copy whose directory sync fails is latched, as in
// Settle. When the syncs were not answered (ctx ended first, or the syncer
// closed), SettleBatch returns that error and latches nothing: no sync
// failed, and the next settle of these copies syncs their directories
// again. The copies' own work runs on up to GOMAXPROCS goroutines.
func (db *DB) SettleBatch(ctx context.Context, segs []meta.Segment, results []SettleResult, errs []error) error {
	if len(results) != len(segs) || len(errs) != len(segs) {
		return fmt.Errorf("%w: settle batch: %d segments, %d results, %d errors", ErrInvalid, len(segs), len(results), len(errs))
	}
	db.eachParallel(len(segs), func(i int) {
		results[i], errs[i] = SettleResult{}, nil
		id := segs[i].ID
		if errs[i] = checkSegment("settle", id, segs[i]); errs[i] != nil {
			return
		}
		c, err := db.acquire("settle", id)
		if err != nil {
			errs[i] = err
			return
		}
		errs[i] = db.settle(c, segs[i], &results[i])
		c.mu.Unlock()
	})
	var need [Shards]bool
	for i := range segs {
		if errs[i] == nil {
			need[Shard(segs[i].ID)] = true
		}
	}
	failed, err := db.syncShards(ctx, &need)
	if err != nil {
		// The files are synced, their directory entries maybe not: the
		// copies are not durable as settle says (invariant 10).
		for i := range segs {
			if errs[i] == nil {
				db.unsync(segs[i].ID)
			}
		}
		return fmt.Errorf("settle batch of %d copies: %w", len(segs), err)
	}
	for i := range segs {
		if errs[i] != nil || failed[Shard(segs[i].ID)] == nil {
			continue
		}
		errs[i] = db.failCopy(segs[i].ID, "settle: directory sync", failed[Shard(segs[i].ID)])
	}
	return nil
}

// eachParallel runs fn(0..n-1) on up to GOMAXPROCS goroutines.
func (db *DB) eachParallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := int(next.Add(1) - 1); j < n; j = int(next.Add(1) - 1) {
				fn(j)
			}
		}()
	}
	wg.Wait()
}

// syncShards makes the shard directories flagged in need durable and
// returns, per shard, the error of its sync (nil: synced or not needed),
// or an error alone when the syncs went unanswered: ctx ended before they
// did, or the syncer refused the whole call (closed). That says nothing
// of the directories and must not latch a copy.
func (db *DB) syncShards(ctx context.Context, need *[Shards]bool) (*[Shards]error, error) {
	var out [Shards]error
	var dirs []string
	var idx []int
	for s, ok := range need {
		if ok {
			dirs = append(dirs, db.shards[s])
			idx = append(idx, s)
		}
	}
	if len(dirs) == 0 {
		return &out, nil
	}
	errs := make([]error, len(dirs))
	if ds, ok := db.syncer.(DirsSyncer); ok {
		if err := ds.SyncDirs(ctx, dirs, errs); err != nil {
			return nil, fmt.Errorf("directory syncs of %d shards unanswered: %w", len(dirs), err)
		}
	} else {
		for i, d := range dirs {
			if db.syncer != nil {
				errs[i] = db.syncer.SyncDir(ctx, d)
			} else {
				errs[i] = db.fs.SyncDir(d)
			}
			if errs[i] != nil && ctx.Err() != nil && errors.Is(errs[i], ctx.Err()) {
				return nil, fmt.Errorf("directory sync of %s unanswered: %w", d, errs[i])
			}
		}
	}
	for i, s := range idx {
		out[s] = errs[i]
	}
	return &out, nil
}

// unsync marks the copy of id not synced (copyState.synced).
func (db *DB) unsync(id meta.SegmentID) {
	c := db.copyOf(id)
	if c != nil {
		c.mu.Lock()
		c.synced = false
		c.mu.Unlock()
	}
}

// failCopy latches the copy of id with err (a directory sync of its
// shard failed after its settle) and returns the latch error.
func (db *DB) failCopy(id meta.SegmentID, op string, err error) error {
	c := db.copyOf(id)
	if c == nil {
		return fmt.Errorf("%s %s: %w", op, id, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return db.fail(c, op, err)
}

// ConfirmBatch confirms each ids[i] with fis[i] as Confirm does, with one
// durable write for the whole batch; errs[i] answers ids[i] (as long as
// ids, as is fis). A copy it cannot take (unknown, latched, busy) or a bad
// identity fails alone; when the write fails, every copy of the batch
// fails with it and nothing is confirmed.
func (db *DB) ConfirmBatch(ids []meta.SegmentID, fis []FileIdentity, errs []error) error {
	if len(fis) != len(ids) || len(errs) != len(ids) {
		return fmt.Errorf("%w: confirm batch: %d segments, %d identities, %d errors", ErrInvalid, len(ids), len(fis), len(errs))
	}
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
		errs[i] = nil
	}
	// Take the copies in id order: two batches never wait on each other.
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(ids[a], ids[b]) })
	var held []*copyState
	defer func() {
		for _, c := range held {
			c.mu.Unlock()
		}
	}()
	var took []int // the indexes of held
	for k, i := range order {
		if k > 0 && ids[order[k-1]] == ids[i] {
			errs[i] = fmt.Errorf("%w: confirm batch: %s twice", ErrInvalid, ids[i])
			continue
		}
		if fis[i].Size < 0 {
			errs[i] = fmt.Errorf("%w: confirm %s: negative size %d", ErrInvalid, ids[i], fis[i].Size)
			continue
		}
		c, err := db.acquire("confirm", ids[i])
		if err != nil {
			errs[i] = err
			continue
		}
		held, took = append(held, c), append(took, i)
	}
	// A confirmation names bytes on the disk, not in the page cache
	// (invariant 10).
	serrs := make([]error, len(held))
	db.syncCopies("confirm", held, serrs)
	var conf *pebble.DB
	var b *pebble.Batch
	var set []int
	for k, i := range took {
		if errs[i] = serrs[k]; errs[i] != nil {
			continue
		}
		if conf == nil {
			var err error
			if conf, err = db.confirmDB("confirm", ids[i], true); err != nil {
				errs[i] = err
				conf = nil
				continue
			}
			b = conf.NewBatch()
			defer b.Close()
		}
		old, had := db.confirmedOf(ids[i])
		if had && old == fis[i] {
			continue
		}
		if had {
			if err := b.Delete(confirmKey(ids[i], old), nil); err != nil {
				errs[i] = fmt.Errorf("store: confirm %s: %w", ids[i], err)
				continue
			}
		}
		if err := b.Set(confirmKey(ids[i], fis[i]), nil, nil); err != nil {
			errs[i] = fmt.Errorf("store: confirm %s: %w", ids[i], err)
			continue
		}
		set = append(set, i)
	}
	if len(set) == 0 {
		return nil
	}
	if err := b.Commit(pebble.Sync); err != nil {
		for _, i := range set {
			errs[i] = fmt.Errorf("store: confirm %s: %w", ids[i], err)
		}
		return nil
	}
	for _, i := range set {
		db.setConfirmed(ids[i], fis[i], true)
	}
	return nil
}
