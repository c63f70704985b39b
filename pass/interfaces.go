package pass

import (
	"context"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// The interfaces below are what the Coordinator needs from the world, each
// declared here by its consumer; the plugin implements them over its RPC, the simulation
// tests implement them in memory. Every method must honour ctx: when ctx is
// done it returns promptly with an error wrapping ctx.Err() and leaves
// nothing half-applied on the broker (a cancelled backfill is aborted back to
// the target's durable end, never committed).

// Metadata is the replicated metadata as the heal leader reads and
// changes it: a view, and a compare-and-set of one segment's replica set.
// It is narrower than the broker's control plane (plugin.ControlPlane:
// any command, barriers, leadership), which the plugin adapts to it.
type Metadata interface {
	// View returns the metadata at one applied index, at least as recent
	// as every SetReplicas this Metadata has already acknowledged: an
	// immutable view (meta.Table.View), not a copy.
	View(ctx context.Context) (*meta.View, error)

	// SetReplicas applies cmd as a compare-and-set: the segment's replica
	// set becomes cmd.Replicas only if it is still exactly cmd.Expected.
	// It returns nil once the change is committed and applied. When the
	// current set differs it returns an error wrapping
	// meta.ErrStaleReplicas and changes nothing; the Coordinator drops the
	// command and the next pass plans the segment again. Any other error
	// (lost leadership, timeout) means the command may or may not have
	// been applied: the Coordinator treats it like a stale one and deletes
	// nothing on its account.
	SetReplicas(ctx context.Context, cmd meta.SetSegmentReplicas) error
}

// Prober asks one broker about its sealed copies.
type Prober interface {
	// Probe asks broker to stat every sealed copy that the metadata, at an
	// applied index of at least snapshotIndex, assigns it (the broker may
	// wait, bounded by ctx, for its own view to catch up), and to report
	// only what is wrong: see ProbeReport for the contract of the answer.
	// An error means the broker's state is unreadable this tick: the
	// planner then treats the broker as not up (it is neither a source nor
	// a target, and its segments' latch state is unknown) and the grace
	// delay decides when it counts as dead.
	Probe(ctx context.Context, broker meta.BrokerID, snapshotIndex uint64) (heal.ProbeReport, error)
}

// Backfiller copies a sealed segment's bytes between brokers.
type Backfiller interface {
	// Backfill makes target's copy of seg whole in one request: the
	// target resumes at its own durable end (the end of its copy's whole,
	// valid frames; 0 for no copy) and copies the bytes from there to the
	// end of the frames and the seal footer from source's copy. (The
	// plan's Action.From is what the probe saw; the target's copy may have
	// changed since, so the target, not the caller, says where to resume.)
	// The target creates the copy if it has none and must
	// never commit a copy that does not verify against seg (frames,
	// offsets, checksum); on any error it rolls back to its durable end.
	// It returns the number of bytes transferred. A target that latched
	// the copy, a source that refuses (latched, short, unsealed) or a
	// checksum mismatch are all errors; the Coordinator reports them and
	// never records a replica set that names target on their account. A
	// target whose existing copy carries its own valid seal disagreeing
	// with seg refuses, changing nothing, with an error wrapping
	// heal.ErrSealConflict. A target that cannot open its copy at its
	// durable end (before reading the source) answers an error wrapping
	// heal.ErrNoDurableEnd: the failure is the target's, not the source's.
	Backfill(ctx context.Context, target, source meta.BrokerID, seg meta.Segment) (int64, error)
}

// Settler brings overrun copies back to their sealed size and records that
// they are exact, a broker's batch at a time (one request per broker and
// pass: the broker makes the batch's directories durable together).
type Settler interface {
	// Settle brings broker's copy of each segs[i] down to its ByteSize
	// (plus the seal footer), writing the footer if the copy is not yet
	// sealed and syncing and rolling the log first if the copy is its
	// active segment, then fences the copy and syncs its directory. It
	// never confirms anything and it refuses (errs[i]) a copy whose frames
	// end short of ByteSize. A copy that carries its own valid seal
	// disagreeing with segs[i] is refused, changing nothing, with an error
	// wrapping ErrSealConflict. errs[i] answers segs[i]; the returned
	// error means none was answered (the broker could not be reached).
	Settle(ctx context.Context, broker meta.BrokerID, segs []meta.Segment, errs []error) error

	// Confirm records, durably on broker, that its copy of each segs[i]
	// has been settled and is exact, keyed by the copy's file identity,
	// so that the copy is never reported overrun again. The Coordinator
	// calls it only for copies whose Settle succeeded in the same pass.
	// Errors as for Settle.
	Confirm(ctx context.Context, broker meta.BrokerID, segs []meta.Segment, errs []error) error
}

// Deleter removes copies that the metadata no longer assigns.
type Deleter interface {
	// Delete removes broker's copy of seg, latched or not. The
	// Coordinator calls it only after a replica set that leaves broker out
	// has been recorded by the Metadata. Deleting a copy that does not
	// exist is not an error.
	Delete(ctx context.Context, broker meta.BrokerID, seg meta.SegmentID) error
}

// LeftoverDeleter is what a Deleter also implements to delete leftovers.
type LeftoverDeleter interface {
	// DeleteLeftover removes broker's copy of seg only if, in broker's
	// metadata at index or later, the segment's set does not name broker;
	// otherwise it refuses with an error naming why. A missing copy is not
	// an error.
	DeleteLeftover(ctx context.Context, broker meta.BrokerID, seg meta.SegmentID, index uint64) error
}

// Brokers is everything the Coordinator asks of brokers; one value (the
// plugin's RPC client) usually implements all of it.
type Brokers interface {
	Prober
	Backfiller
	Settler
	Deleter
}
