// Package probe measures the stored bytes of many files in one batch: for
// each file its size, device and inode (the file's identity), or an error
// that tells a missing file (a lost copy) from a failed probe and from a
// probe the caller's deadline cut off. It never opens a file: it only calls
// statx, either through an io_uring ring (IORING_OP_STATX, the queue kept
// full and refilled as completions arrive) or as plain system calls.
//
// Usage, with files named relative to directory descriptors (the store's
// shard directories), which spares the kernel the walk of a full path:
//
//	p, err := probe.New(probe.DefaultConfig()) // Engine: KindAuto
//	defer p.Close()
//	var b probe.Batch                          // reuse between ticks
//	out := make([]probe.Result, n)             // reuse between ticks
//	for range ticks {
//		b.Reset()
//		for _, c := range copies {
//			b.Add(c.dirfd, c.name, c.suffix)    // copied into b's arena
//		}
//		ctx, cancel := context.WithTimeout(ctx, tickBudget)
//		err := p.ProbeBatch(ctx, &b, out)      // per-entry errors in out[i].Err
//		cancel()
//		for i, r := range out[:b.Len()] {
//			switch {
//			case r.Err == nil:                      // r.Size, r.Dev, r.Ino
//			case errors.Is(r.Err, probe.ErrNotExist): // the copy is lost
//			case errors.Is(r.Err, probe.ErrDeadline): // timed out this tick
//			default:                                  // probe failed (ErrFailed)
//			}
//		}
//	}
//	metricLabel := p.Choice().Kind.String()      // "uring" or "syscall", now
//
// ProbeBatch calls statx(dirfd, name, AT_SYMLINK_NOFOLLOW|
// AT_STATX_SYNC_AS_STAT): a name that is a symbolic link is measured, not
// followed. Probe(paths) does the same for full paths (dirfd CWD) and
// follows a final symbolic link, as stat(2) does; it reads each path where
// it lies, without copying the batch first.
//
// Engines: KindURing needs io_uring (kernel 5.6+, not refused by
// io_uring_disabled, seccomp or EPERM); KindSyscall works everywhere.
// KindAuto opens the ring if it can and logs which engine it uses and why
// ("probe: engine chosen"); when the ring is refused it uses the syscall
// engine and the reason names the refusal. While both exist, Auto answers a
// sample (ExploreSample entries) of its first large batches (Probe and
// ProbeBatch alike), and then of every ExploreEvery-th one, with the engine
// not in use, measures the cost per entry of both in that batch (the ring's first run only warms it up: io-wq
// spawns its workers then), and moves to the other engine when it was at
// least 10% faster in the same batch, so a warm-cache figure is never
// weighed against a cold-cache one ("probe: engine changed"; Choice().Reason
// quotes both costs). The sample runs before the rest of its batch, so on a
// cold cache it pays for the directories the batch shares, which keeps it
// from looking cheaper than it is. Batches under SmallBatch entries always
// use plain syscalls.
//
// Invariants:
//
//  1. Probe and ProbeBatch answer every entry of out[:n] exactly once: a
//     result, or a *PathError whose Kind is ErrNotExist, ErrFailed,
//     ErrDeadline or ErrClosed and whose Path is the entry's name (relative
//     to its directory descriptor in a Batch; built only on error).
//     Entries the batch did not answer share one error value, Path empty.
//  2. No file descriptor is opened: the io_uring ring's descriptor exists
//     from New to Close, and nothing else (TestProbeOpensNoFile counts
//     /proc/self/fd while 50,000 probes run). A Batch's directory
//     descriptors are the caller's, and must stay open while ProbeBatch runs.
//  3. Steady state allocates nothing per healthy entry: a Batch refilled
//     after Reset reuses its arena of NUL-terminated names and its entry
//     slice, Probe copies each path into a reused buffer (or ring slot),
//     results go into the caller's slice, and statx buffers are reused ring
//     slots (TestProbeBatchAllocatesNothingPerEntry: 10^4 entries, each
//     engine and Auto).
//  4. Memory the kernel may touch stays referenced until the completion of
//     its operation is reaped, even past the deadline: a statx buffer or a
//     copied path in its ring slot, a Batch's arena through the slot's
//     uring.Buffers.Pin. When a ring run is cut with statx still in flight,
//     the Batch takes a fresh copy of its arena (one allocation), so that
//     refilling it never writes into names the kernel may still read.
//  5. Choice() is the engine answering batches now; under Auto it changes
//     only on a measurement taken within one batch.
//
// Concurrency: a Prober is safe for concurrent use; Probe and ProbeBatch
// calls are serialized. A Batch is not: it must not change while
// ProbeBatch runs. Close interrupts a running call, which returns ErrClosed
// with the unanswered entries marked ErrClosed. Neither writes to the
// caller's slice after it returns.
package probe
