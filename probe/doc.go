// Package probe measures the stored bytes of many files in one batch: for
// each path its size, device and inode (the file's identity), or an error
// that tells a missing file (a lost copy) from a failed probe and from a
// probe the caller's deadline cut off. It never opens a file: it only calls
// statx, either through an io_uring ring (IORING_OP_STATX, the queue kept
// full and refilled as completions arrive) or as plain system calls.
//
// Usage:
//
//	p, err := probe.New(probe.DefaultConfig()) // Engine: KindAuto
//	defer p.Close()
//	out := make([]probe.Result, len(paths))    // reuse between ticks
//	for range ticks {
//		ctx, cancel := context.WithTimeout(ctx, tickBudget)
//		err := p.Probe(ctx, paths, out)        // per-entry errors in out[i].Err
//		cancel()
//		for i, r := range out {
//			switch {
//			case r.Err == nil:                      // r.Size, r.Dev, r.Ino
//			case errors.Is(r.Err, probe.ErrNotExist): // the copy is lost
//			case errors.Is(r.Err, probe.ErrDeadline): // timed out this tick
//			default:                                  // probe failed (ErrFailed)
//			}
//		}
//	}
//	metricLabel := p.Choice().Kind.String()      // "uring" or "syscall"
//
// Engines: KindURing needs io_uring (kernel 5.6+, not refused by
// io_uring_disabled, seccomp or EPERM); KindSyscall works everywhere.
// KindAuto opens the ring if it can and logs which engine it uses and why
// ("probe: engine chosen"); when the ring is refused it uses the syscall
// engine and the reason names the refusal. While both exist, Auto answers a
// sample (ExploreSample paths) of its first large batches, and then of every
// ExploreEvery-th one, with the engine not in use, measures the cost per
// path of both in that batch (the ring's first run only warms it up: io-wq
// spawns its workers then), and moves to the other engine when it was at
// least 10% faster in the same batch, so a warm-cache figure is never
// weighed against a cold-cache one ("probe: engine changed"; Choice().Reason
// quotes both costs). The sample runs before the rest of its batch, so on a
// cold cache it pays for the directories the batch shares, which keeps it
// from looking cheaper than it is. Batches under
// SmallBatch paths always use plain syscalls.
//
// Invariants:
//
//  1. Probe answers every entry of out[:len(paths)] exactly once: a result,
//     or a *PathError whose Kind is ErrNotExist, ErrFailed, ErrDeadline or
//     ErrClosed. Entries the batch did not answer share one error value.
//  2. No file descriptor is opened: the io_uring ring's descriptor exists
//     from New to Close, and nothing else (TestProbeOpensNoFile counts
//     /proc/self/fd while 50,000 probes run).
//  3. Steady state allocates nothing per healthy entry: paths are copied
//     into reused NUL-terminated buffers, results go into the caller's
//     slice, and statx buffers are reused ring slots.
//  4. A statx buffer handed to the kernel stays referenced by the ring's
//     in-flight table until its completion arrives, even past the deadline
//     (see internal/uring).
//
// Concurrency: a Prober is safe for concurrent use; Probe calls are
// serialized. Close interrupts a running Probe, which returns ErrClosed with
// the unanswered entries marked ErrClosed. Probe does not write to the
// caller's slice after it returns.
package probe
