package stage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/loopdisk"
)

// The disk stages fault one broker's copies disk, a loop-mounted ext4:
// diskfull fills it, readonly remounts it read-only. While faulted, the
// stage cuts copies there and writes new segments: the unwritable copies
// must be replaced elsewhere, the intact ones keep serving, the logs name
// the cause, nothing acknowledged is lost; then the remedy, checked again.

// copiesDisk returns the loop-mounted copies disk and its broker, moving a
// follower's copies onto a new one first when the cluster has none. It
// sets fr.Skipped when no loop disk can be had.
func (e *Env) copiesDisk(ctx context.Context, fr *Report) (*harness.Broker, *loopdisk.Disk, error) {
	if l, lb := e.C.Loop(); l != nil && lb != nil {
		if !lb.Alive() {
			if err := e.C.Revive(ctx, e.StageTimeout, lb); err != nil {
				return nil, nil, err
			}
		}
		return lb, l, nil
	}
	if e.C.LoopSkip() != "" {
		fr.Skipped = "no loop-mounted copies disk: " + e.C.LoopSkip()
		return nil, nil, nil
	}
	if why := loopdisk.Unavailable(); why != "" {
		fr.Skipped = "no loop-mounted copies disk: " + why
		return nil, nil, nil
	}
	b, _ := e.busiestFollower(nil)
	if b == nil {
		fr.notInjected("no running follower to give a loop-mounted copies disk")
		return nil, nil, nil
	}
	// Room for a copy of every segment and the stages' writes.
	size := LoopDiskSize(int64(max(e.Segments, e.lastEv.Sealed))+4*int64(e.Brokers), max(e.SegmentBytes, 4096)+store.FooterSize)
	e.logf("  broker %d's copies move onto a loop-mounted ext4 (%s sparse image) first, with the broker stopped (SIGTERM): mount aside, copy, mount --move onto %s, start",
		b.ID, bytesize.Format(size), filepath.Join(b.Dir, "copies"))
	// Stopped, not under the running broker: its open active copies (the
	// Kafka partitions' frames) would keep taking frames in the old files.
	if err := e.C.Terminate(b, 10*time.Second); err != nil {
		return nil, nil, fmt.Errorf("stopping broker %d to move its copies: %w", b.ID, err)
	}
	files, n, err := e.C.MoveCopiesToDisk(b, size)
	if rerr := e.C.Revive(ctx, e.StageTimeout, b); rerr != nil {
		return nil, nil, fmt.Errorf("starting broker %d after moving its copies: %w", b.ID, errors.Join(err, rerr))
	}
	if err != nil {
		fr.Skipped = "no loop-mounted copies disk: " + err.Error()
		return nil, nil, nil
	}
	// After the move: a pass that began before it saw the old files.
	movedAt := time.Now()
	e.Aud.ForgetUnder(filepath.Join(b.Dir, "copies"))
	addNote(fr, "broker %d's %d copies (%s) were moved onto a loop-mounted ext4 at its data_dir/copies before the stage (the cluster had been started without one; with the broker stopped, its copies were copied over and the mount moved onto its copies directory)", b.ID, files, bytesize.Format(n))
	if _, err := e.settle(ctx, "copies on the loop disk", movedAt); err != nil {
		return nil, nil, fmt.Errorf("after moving broker %d's copies onto its loop disk: %w", b.ID, err)
	}
	v, err := e.C.WaitSettled(ctx, movedAt, e.StageTimeout, e.Poll)
	if err != nil {
		return nil, nil, fmt.Errorf("after moving broker %d's copies onto its loop disk: %w", b.ID, err)
	}
	e.Observe(v)
	l, _ := e.C.Loop()
	return b, l, nil
}

// busiestFollower is the running broker other than the leader and skip
// that holds the most sealed replicas, and how many (an earlier stage may
// have left one with copies its sets no longer name, which would make a
// fault there moot); nil when none.
func (e *Env) busiestFollower(skip *harness.Broker) (*harness.Broker, int) {
	var best *harness.Broker
	most := -1
	for _, b := range e.C.Running() {
		if b == skip || e.last != nil && b.ID == e.last.Leader {
			continue
		}
		n := 0
		if e.last != nil {
			n = len(e.sealedOn(b.ID))
		}
		if n > most {
			best, most = b, n
		}
	}
	return best, most
}

// diskCopies chooses up to n healthy sealed segments with a copy on b.
func (e *Env) diskCopies(b *harness.Broker, n int) []meta.Segment {
	var segs []meta.Segment
	for _, s := range e.last.Snap.Segments {
		if _, bad := e.lastEv.Unhealthy[s.ID]; !s.Sealed || bad || !s.HasReplica(b.ID) {
			continue
		}
		if _, ok := e.last.Copies[b.ID][s.ID]; ok {
			segs = append(segs, s)
		}
	}
	e.Rand.Shuffle(len(segs), func(i, j int) { segs[i], segs[j] = segs[j], segs[i] })
	return segs[:min(n, len(segs))]
}

// cutCopies truncates each copy's file on b to a random length in its
// first half, so that an in-place backfill must write at least half a
// segment.
func (e *Env) cutCopies(fr *Report, b *harness.Broker, segs []meta.Segment, pre map[meta.SegmentID]map[meta.BrokerID]int64) {
	for _, s := range segs {
		path := copyPath(b, s.ID)
		fi, err := os.Stat(path)
		if err == nil && fi.Size() < 2 {
			err = fmt.Errorf("%s: %w", path, harness.ErrEmptyCopy)
		}
		if err == nil {
			var f harness.Fault
			if f, err = harness.TruncateCopyAt(path, e.Rand.Int64N(fi.Size()/2)); err == nil {
				fr.Copies = append(fr.Copies, f)
				pre[s.ID][b.ID] = f.SizeAfter
			}
		}
		e.Aud.Forget(path)
		if err != nil {
			fr.Error = fmt.Sprintf("truncating %s on broker %d: %v", s.ID, b.ID, err)
		}
	}
}

// diskWrites are the stage's new segments written while the disk is
// faulted: acknowledged ones must survive; refused ones were never
// acknowledged.
type diskWrites struct {
	tried, acked int
	refused      []string // the errors, in order
}

// writeSegments writes n new sealed segments, one load each, counted in
// the report's segments.
func (e *Env) writeSegments(ctx context.Context, prefix string, n int) diskWrites {
	recs, rsize := RecordShape(e.SegmentSize)
	var w diskWrites
	sealedBefore, berr := e.SealedCount(ctx)
	defer func() {
		if after, err := e.SealedCount(ctx); err == nil && berr == nil && after > sealedBefore {
			e.Sealed += after - sealedBefore
		} else {
			e.Sealed += w.acked
		}
	}()
	for i := 0; i < n; i++ {
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		req := admin.LoadRequest{Segments: 1, RecordsPerSegment: recs, RecordSize: rsize, Prefix: prefix, First: i, Concurrency: 1}
		_, err := e.C.LeaderClient(ctx).Load(lctx, req)
		cancel()
		w.tried++
		if err != nil {
			w.refused = append(w.refused, err.Error())
			continue
		}
		w.acked++
	}
	return w
}

func (w diskWrites) String() string {
	s := fmt.Sprintf("%d of %d new segments written and acknowledged", w.acked, w.tried)
	if len(w.refused) > 0 {
		s += fmt.Sprintf(", %d refused (first: %s)", len(w.refused), harness.FirstLine(w.refused[0], 240))
	}
	return s
}

func (e *Env) noteCause(fr *Report, m harness.LogMarks, needle string) bool {
	counts, first := m.Grep(e.C.Brokers(), needle)
	if len(counts) == 0 {
		addNote(fr, "no broker's log names %q", needle)
		return false
	}
	var parts []string
	for _, b := range e.C.Brokers() {
		if n := counts[b.ID]; n > 0 {
			parts = append(parts, fmt.Sprintf("broker %d: %d", b.ID, n))
		}
	}
	addNote(fr, "%q in the logs (%s lines), e.g. %s", needle, strings.Join(parts, ", "), first)
	return true
}

// diskFault is how a disk stage tells its fault: the disk's state while
// faulted, the log text that names the cause, and the remedy (the
// catalogue's undo: remove the filler; stop, umount, e2fsck -f -y, mount,
// start).
type diskFault struct{ state, needle, remedy string }

var diskFaults = map[harness.Kind]diskFault{
	harness.KindDiskFull: {"full", "no space left on device", "removing the filler"},
	harness.KindReadOnly: {"read-only", "read-only file system", "recovering the disk"},
}

// diskRun is what a disk stage notes before its fault: the broker of the
// copies disk, the copies it damages (targets), what it measures, the
// log marks and how many replicas the broker holds.
type diskRun struct {
	b       *harness.Broker
	l       *loopdisk.Disk
	segs    []meta.Segment
	targets []meta.SegmentID
	m       measure
	marks   harness.LogMarks
	kept    int
}

// beginDisk readies the copies disk (copiesDisk) and notes the diskRun; nil
// when the stage cannot run (fr.Skipped, logged) or failed (the error).
func (e *Env) beginDisk(ctx context.Context, fr *Report) (*diskRun, error) {
	b, l, err := e.copiesDisk(ctx, fr)
	if err != nil || b == nil {
		switch {
		case fr.Skipped != "":
			e.logf("stage %s: skipped: %s", fr.Stage, fr.Skipped)
		case fr.Missed():
			e.logf("stage %s: %s", fr.Stage, fr.Error)
		}
		return nil, err
	}
	fr.Broker = b.ID
	r := &diskRun{b: b, l: l, segs: e.diskCopies(b, e.Copies), marks: e.C.MarkLogs(), kept: len(e.sealedOn(b.ID))}
	for _, s := range r.segs {
		r.targets = append(r.targets, s.ID)
	}
	r.m = e.measure(ctx, r.targets)
	return r, nil
}

// strikeDisk cuts the disk's copies and injects kind (diskfull, readonly)
// with the broker frozen, so that no heal pass sees a half-made fault.
func (e *Env) strikeDisk(ctx context.Context, fr *Report, r *diskRun, kind harness.Kind) (*harness.Injection, error) {
	var in *harness.Injection
	err := r.b.Frozen(func() error {
		e.cutCopies(fr, r.b, r.segs, r.m.pre)
		var err error
		in, err = e.C.Inject(ctx, harness.Target{Kind: kind, Timeout: e.StageTimeout})
		return err
	})
	if err != nil {
		fr.Error = err.Error()
		if in != nil && kind == harness.KindDiskFull {
			_ = in.Undo(ctx)
		}
		return nil, fatal(ctx, err, e)
	}
	fr.Injected = true
	if kind == harness.KindDiskFull {
		free, _ := r.l.Free()
		fr.What = fmt.Sprintf("broker %d's copies disk (loop ext4, %s) filled: %s, %s left free; %d of its copies truncated to under half",
			r.b.ID, bytesize.Format(r.l.Size), in.How, bytesize.Format(free), len(fr.Copies))
	} else {
		fr.What = fmt.Sprintf("broker %d's copies disk (loop ext4) read-only under the live broker by %s; %d of its copies truncated to under half just before",
			r.b.ID, in.How, len(fr.Copies))
	}
	e.logf("stage %s: %s", kind, fr.What)
	return in, nil
}

// stageDisk faults the copies disk (kind: diskfull, readonly), and while
// it is faulted writes, kills a second broker beside it when one can be
// spared, waits for the heal, names the cause in the logs and revives the
// second broker; then applies the remedy and checks everything again.
func (e *Env) stageDisk(ctx context.Context, kind harness.Kind, fr *Report) error {
	r, err := e.beginDisk(ctx, fr)
	if r == nil {
		return err
	}
	start := time.Now()
	in, err := e.strikeDisk(ctx, fr, r, kind)
	if in == nil {
		return err
	}
	if kind == harness.KindDiskFull {
		defer func() { _ = in.Undo(ctx) }()
	}
	df := diskFaults[kind]
	w := e.writeSegments(ctx, fr.Stage, e.Brokers)
	e.logf("  writes while %s: %s", df.state, w)
	addNote(fr, "while %s: %s", df.state, w)
	// Its replicas need new homes, and the faulted broker must fail as one.
	dead, deadSegs := e.killBeside(fr, r.b, df.state, r.m.pre)
	herr := e.heal(ctx, fr, "healing around the "+df.state+" disk", start, append(r.targets, deadSegs...), e.StageTimeout, r.m)
	e.noteCause(fr, r.marks, df.needle)
	if err := e.reviveBeside(ctx, fr, dead, r.b, df.state, r.marks); err != nil {
		return fatal(ctx, err, e)
	}
	if herr == nil {
		addNote(fr, "broker %d kept %d of its %d replicas while %s", r.b.ID, len(e.sealedOn(r.b.ID)), r.kept, df.state)
	} else if ctx.Err() != nil {
		return ctx.Err()
	}
	return e.remedyDisk(ctx, fr, r, in, df, herr)
}

// remedyDisk undoes a disk stage's fault as an operator would and waits
// for every segment healthy again; herr is the heal's error, which stops
// the run after the remedy.
func (e *Env) remedyDisk(ctx context.Context, fr *Report, r *diskRun, in *harness.Injection, df diskFault, herr error) error {
	if in.Kind == harness.KindReadOnly {
		e.logf("  recovering: stop broker %d, umount %s, e2fsck -f -y %s, mount, start", r.b.ID, r.l.Dir, r.l.Dev)
	}
	rstart := time.Now()
	if err := in.Undo(ctx); err != nil {
		fr.Healed = false
		return e.fail(ctx, fr, fmt.Errorf("%s: %w", df.remedy, err))
	}
	e.Aud.ForgetUnder(r.l.Dir)
	if herr != nil {
		return fatal(ctx, herr, e)
	}
	secs, err := e.settle(ctx, "after "+df.remedy, rstart)
	if err != nil {
		fr.Healed = false
		return e.fail(ctx, fr, fmt.Errorf("after %s: %w", df.remedy, err))
	}
	if in.Kind == harness.KindDiskFull {
		freed, _ := r.l.Free()
		addNote(fr, "filler removed (%s free): healthy again %s later", bytesize.Format(freed), FormatSeconds(secs))
		return nil
	}
	addNote(fr, "recovered by stop, umount, %s, mount, start: healthy again %s after the stop", in.Fsck, FormatSeconds(secs))
	if n := orphans(e.last, r.b.ID); n > 0 {
		addNote(fr, "broker %d still holds %d copies of segments whose replica sets no longer name it (replaced while its disk was read-only, so not deleted)", r.b.ID, n)
	}
	return nil
}

// killBeside kills a running follower other than the faulted broker full
// (its disk "full" or "read-only") when the cluster keeps a spare target
// and its quorum without both, and returns it (nil when not).
func (e *Env) killBeside(fr *Report, full *harness.Broker, state string, pre map[meta.SegmentID]map[meta.BrokerID]int64) (*harness.Broker, []meta.SegmentID) {
	run := e.C.Running()
	if len(run)-2 < e.RF || len(run)-1 <= len(e.C.Brokers())/2 {
		addNote(fr, "no second broker killed: %d running brokers for replication factor %d leave no spare beside the %s one", len(run), e.RF, state)
		return nil, nil
	}
	victim, most := e.busiestFollower(full)
	if victim == nil {
		return nil, nil
	}
	segs := e.lose(pre, victim.ID)
	e.logf("  kill -9 broker %d (%d replicas) while broker %d's disk is %s", victim.ID, most, full.ID, state)
	if err := e.C.Kill(victim); err != nil {
		addNote(fr, "killing broker %d: %v", victim.ID, err)
		return nil, nil
	}
	return victim, segs
}

// reviveBeside notes what the heal did with dead's replicas while full's
// disk was faulted, and starts dead again. Nil dead does nothing.
func (e *Env) reviveBeside(ctx context.Context, fr *Report, dead, full *harness.Broker, state string, marks harness.LogMarks) error {
	if dead == nil {
		return nil
	}
	counts, _ := marks.Grep(e.C.Brokers(), fmt.Sprintf(" to %d from ", full.ID))
	tried := 0
	for _, n := range counts {
		tried += n
	}
	addNote(fr, "broker %d was killed while the disk was %s: %d log lines of heal steps that targeted broker %d failing; its replicas re-placed on the others; restarted after", dead.ID, state, tried, full.ID)
	if err := e.C.Revive(ctx, e.StageTimeout, dead); err != nil {
		return fr.record(err)
	}
	return nil
}

// orphans counts the copies b lists of sealed segments whose replica set
// does not name b.
func orphans(v *harness.View, b meta.BrokerID) int {
	n := 0
	for id := range v.Copies[b] {
		if s, ok := v.Snap.Segment(id); ok && s.Sealed && !s.HasReplica(b) {
			n++
		}
	}
	return n
}
