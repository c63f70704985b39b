// Package fsync makes many paths durable at once: it fsyncs directories
// (after a create, rename or truncate in them) and files (optionally data
// only, fdatasync semantics) in batches, syncing each distinct path once per
// batch, and coalesces concurrent callers into the next batch (group
// commit), with an error per caller. It decides nothing about what to sync.
//
// Engines: KindURing opens each distinct path and submits one
// IORING_OP_FSYNC per descriptor, all in flight at once (up to RingEntries),
// with the ring's io-wq worker cap raised to MaxWorkers so the disk sees
// the flushes together; KindSyscall calls fsync(2) per path in order.
// KindAuto uses io_uring where the kernel allows it, says which and why in
// Choice and in a log event ("fsync: engine chosen").
//
// Filesystem sync: a batch holding at least Config.FilesystemSyncMin
// distinct directories on one XFS filesystem or one ext4 with a journal
// (listed in /proc/fs/jbd2; ext2 and journal-less ext4 share ext4's magic
// and are synced directory by directory) (Linux 5.8 or later,
// where syncfs reports writeback errors) answers them with one syncfs(2) of
// that filesystem, while the machine's dirty page cache is at most
// Config.FilesystemSyncMaxDirty: one journal commit carries every entry,
// where a late fsync of the batch would also send the device its own cache
// flush. Stats counts both kinds.
//
// Usage:
//
//	s, err := fsync.New(fsync.DefaultConfig())
//	defer s.Close()
//	err = s.SyncDir(ctx, dir)               // store.DirSyncer
//	err = s.SyncFile(ctx, path, true)       // data only
//	err = s.Sync(ctx, reqs, errs)           // many at once, errs[i] per request
//
// Invariants:
//
//  1. A caller is answered only by an fsync that started after its request
//     was queued: the committer takes the queue, then opens and syncs, so
//     every write the caller made before calling is covered.
//  2. Within one batch each distinct (path, directory) is opened and synced
//     once; a full sync covers data-only requests for the same path; every
//     request of the batch gets that sync's result.
//     A filesystem sync covers every directory of its group the same way:
//     it starts after they were queued, and each gets its result wrapped
//     with its own path.
//  3. Every request is answered exactly once: nil, the open or fsync errno
//     (wrapped with the path), or ErrClosed.
//  4. A descriptor stays open until the kernel has answered its fsync; the
//     io_uring engine never abandons an fsync in flight (no deadline on a
//     batch that serves many callers).
//
// Concurrency and crashes: a Syncer is safe for concurrent use; one
// committer goroutine runs the batches. A caller whose context ends stops
// waiting (its sync may still happen). Close cancels fsyncs still queued in
// the kernel (they answer ErrClosed), waits for the running ones, answers
// queued callers ErrClosed, and returns when the committer has exited. An
// error from fsync (EIO) is reported to every caller of that batch and
// never retried: after a failed fsync the kernel may have dropped the dirty
// pages, so a retry that succeeds proves nothing; the caller decides (the
// store latches the copy).
package fsync
