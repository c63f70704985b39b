package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/bytesize"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/loopdisk"
	"github.com/malachi-log/malachi/testbed/netns"
)

// The fault catalogue: every fault the staged suite (testbed/stage) and
// the nemesis inject, each once. Cluster.Inject makes one and returns an
// Injection: what it did, its undo, and what it leaves for a checker to
// expect (Kind.Down, Kind.CutOff, Injection.Lost).

// Kind names one fault of the catalogue.
type Kind string

// The catalogue's kinds.
const (
	// KindKill is kill -9 of every target (a crash); undone by starting
	// them again (Revive). Every copy they hold is out until then.
	KindKill Kind = "kill"
	// KindQuorumLoss is a kill of a majority at once: the control plane
	// loses its quorum until they are started again.
	KindQuorumLoss Kind = "quorum-loss"
	// KindPause is SIGSTOP (Broker.Pause): the process holds its sockets
	// and answers nothing; undone by SIGCONT.
	KindPause Kind = "pause"
	// KindRestart is SIGTERM and a start at once: nothing left to undo.
	KindRestart Kind = "restart"
	// KindSwap kills the target and puts an empty data directory in
	// place of its own (moved aside to Injection.Aside): it restarts with
	// no copies, raft log or Pebble state. Undone by starting it.
	KindSwap Kind = "swap"
	// The file faults change a copy's file under its running broker
	// (faults.go): nothing to undo, the cluster heals them. Injection.Lost
	// names the copies hit.
	KindDelete   Kind = "delete"
	KindTruncate Kind = "truncate"
	KindExtend   Kind = "extend"
	KindBitflip  Kind = "bitflip"
	// KindLatch has the broker latch copies (POST /v1/faults/latch/{id}),
	// as a failed read or write of its store would: they are replaced.
	KindLatch Kind = "latch"
	// KindDiskFull fills the loop-mounted copies disk (a fallocated filler
	// file); undone by removing the filler.
	KindDiskFull Kind = "diskfull"
	// KindReadOnly makes the copies disk read-only under its live broker,
	// as an ext4 error with errors=remount-ro does; undone by the
	// operator's remedy (RecoverDisk: stop, umount, e2fsck -f -y, mount,
	// start).
	KindReadOnly Kind = "readonly"
	// The network faults (testbed/netns; brokers on hosts of their own):
	// isolate cuts a broker off both ways, partition cuts the targets
	// from the rest, drop-out / drop-in lose every packet a broker sends /
	// receives, flap cuts and restores its link every 0.5-2 s, cap limits
	// it to 2 MiB/s. Each is undone by removing its rules.
	KindIsolate   Kind = "isolate"
	KindPartition Kind = "partition"
	KindDropOut   Kind = "drop-out"
	KindDropIn    Kind = "drop-in"
	KindFlap      Kind = "flap"
	KindCap       Kind = "cap"
)

// The kinds by what they need: ProcessKinds and FileKinds any cluster;
// DiskKinds the loop-mounted copies disk (Config.LoopBroker); NetKinds
// brokers on hosts of their own (Config.Hosts).
var (
	ProcessKinds = []Kind{KindKill, KindPause, KindRestart, KindSwap}
	FileKinds    = []Kind{KindDelete, KindTruncate, KindExtend, KindBitflip, KindLatch}
	DiskKinds    = []Kind{KindDiskFull, KindReadOnly}
	NetKinds     = []Kind{KindIsolate, KindPartition, KindDropOut, KindDropIn, KindFlap, KindCap}
)

// AllKinds lists every kind of the catalogue.
func AllKinds() []Kind {
	return slices.Concat(ProcessKinds, FileKinds, DiskKinds, NetKinds, []Kind{KindQuorumLoss})
}

// Down says whether the fault keeps its brokers from reporting while it
// holds (for a partition: the targets, the minority side): a heal pass of
// the others must list them dead past the grace delay.
func (k Kind) Down() bool {
	switch k {
	case KindKill, KindPause, KindSwap, KindQuorumLoss, KindIsolate, KindPartition:
		return true
	}
	return false
}

// CutOff says whether the fault cuts its brokers off from the majority
// while they run: none of them may publish a heal pass once its leader
// lease ran out.
func (k Kind) CutOff() bool { return k == KindIsolate || k == KindPartition }

// Target is what one fault strikes.
type Target struct {
	Kind    Kind
	Brokers []*Broker
	// Segments are the copies a file fault hits, each on Brokers[0].
	Segments []meta.Segment
	// Rand draws a file fault's positions and sizes.
	Rand *rand.Rand
	// Length and Seed are a flap's duration and draw.
	Length time.Duration
	Seed   uint64
	// Timeout bounds the wait of a start (undo of a kill, a restart) for
	// the broker to answer with a leader.
	Timeout time.Duration
}

// Injection is one fault as injected.
type Injection struct {
	Kind    Kind
	Brokers []meta.BrokerID
	// Files are the copies' files a file fault changed, in the order of
	// Target.Segments (those it could not change left out).
	Files []Fault
	// Lost are the copies a file fault took from service: the cluster must
	// repair or replace each. A broker fault (Down) takes every copy its
	// brokers hold.
	Lost []heal.CopyRef
	// Aside is where a swap moved the broker's data directory.
	Aside string
	// How says in words how a disk fault was made (the filler's size; the
	// ext4 error or the remount that made a disk read-only), and Fsck
	// e2fsck's verdict once a read-only disk's undo ran.
	How, Fsck string

	undo func(ctx context.Context) error
}

// Undo undoes the fault (nothing for a fault the cluster heals itself)
// and waits as its kind says: a broker started answers with a leader.
func (in *Injection) Undo(ctx context.Context) error {
	if in == nil || in.undo == nil {
		return nil
	}
	undo := in.undo
	in.undo = nil
	return undo(ctx)
}

// Undoable says whether Undo has something left to do.
func (in *Injection) Undoable() bool { return in != nil && in.undo != nil }

// Inject makes fault t. On an error the Injection still holds the undo of
// what was done (Undo is safe to call), and what a file fault changed
// before it failed.
func (c *Cluster) Inject(ctx context.Context, t Target) (*Injection, error) {
	in := &Injection{Kind: t.Kind}
	for _, b := range t.Brokers {
		in.Brokers = append(in.Brokers, b.ID)
	}
	if len(t.Brokers) == 0 && t.Kind != KindDiskFull && t.Kind != KindReadOnly {
		return in, fmt.Errorf("harness: %s: no broker to strike", t.Kind)
	}
	revive := func(ctx context.Context) error { return c.Revive(ctx, t.Timeout, t.Brokers...) }
	switch t.Kind {
	case KindKill, KindQuorumLoss:
		in.undo = revive
		return in, c.killAll(t.Brokers)
	case KindPause:
		in.undo = func(context.Context) error { return resumeAll(t.Brokers) }
		for _, b := range t.Brokers {
			if err := b.Pause(); err != nil {
				return in, err
			}
		}
		return in, nil
	case KindRestart:
		for _, b := range t.Brokers {
			if err := c.Terminate(b, 10*time.Second); err != nil {
				in.undo = revive
				return in, err
			}
		}
		return in, revive(ctx)
	case KindSwap:
		return in, c.swap(in, t.Brokers[0], revive)
	case KindDelete, KindTruncate, KindExtend, KindBitflip, KindLatch:
		return in, c.fileFaults(ctx, in, t)
	case KindDiskFull:
		return in, c.fillDisk(in)
	case KindReadOnly:
		return in, c.diskReadOnly(in, t.Timeout)
	case KindIsolate, KindPartition, KindDropOut, KindDropIn, KindFlap, KindCap:
		return in, c.network(in, t)
	}
	return in, fmt.Errorf("harness: unknown fault kind %q", t.Kind)
}

func (c *Cluster) killAll(bs []*Broker) error {
	for _, b := range bs {
		if err := c.Kill(b); err != nil {
			return err
		}
	}
	return nil
}

func resumeAll(bs []*Broker) error {
	var errs []error
	for _, b := range bs {
		if err := b.Resume(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Revive starts every broker of bs that does not run and waits, up to
// timeout (0: a minute), until each answers /v1/health naming a leader.
// It fails at once when a broker of the cluster exits on its own.
func (c *Cluster) Revive(ctx context.Context, timeout time.Duration, bs ...*Broker) error {
	if timeout <= 0 {
		timeout = time.Minute
	}
	var errs []error
	for _, b := range bs {
		if !b.Alive() {
			if err := c.StartBroker(b); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, b := range bs {
		if err := c.waitLeaderKnown(ctx, b, timeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitLeaderKnown waits until b answers its health check with a leader.
func (c *Cluster) waitLeaderKnown(ctx context.Context, b *Broker, timeout time.Duration) error {
	start := time.Now()
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := b.Client.Health(hctx)
		cancel()
		if err == nil && h.Leader != 0 {
			return nil
		}
		if e := c.UnexpectedExit(); e != nil {
			return e
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("broker %d (admin %s) not back after %v: %v", b.ID, b.Admin, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// swap kills b and puts an empty data directory in place of its own,
// moved aside (b.Dir + ".swapped", then ".swapped2"...) for inspection.
func (c *Cluster) swap(in *Injection, b *Broker, revive func(context.Context) error) error {
	in.undo = revive
	if err := c.Kill(b); err != nil {
		return err
	}
	aside := b.Dir + ".swapped"
	for i := 2; ; i++ {
		if _, err := os.Lstat(aside); os.IsNotExist(err) {
			break
		}
		aside = fmt.Sprintf("%s.swapped%d", b.Dir, i)
	}
	if err := os.Rename(b.Dir, aside); err != nil {
		return fmt.Errorf("swap: moving %s aside: %w", b.Dir, err)
	}
	in.Aside = aside
	if err := os.Mkdir(b.Dir, 0o755); err != nil {
		return fmt.Errorf("swap: creating the empty %s: %w", b.Dir, err)
	}
	return nil
}

// DamageCopy does file fault kind (delete, truncate, extend, bitflip) to
// the copy file at path; limit bounds a bit flip to the frames (the
// segment's byte size, 0: the whole file).
func DamageCopy(kind Kind, path string, limit int64, rng *rand.Rand) (Fault, error) {
	switch kind {
	case KindDelete:
		return DeleteCopy(path)
	case KindTruncate:
		return TruncateCopy(path, rng)
	case KindExtend:
		return ExtendCopy(path, 1+rng.Int64N(8192), rng)
	case KindBitflip:
		return BitflipCopy(path, limit, rng)
	}
	return Fault{}, fmt.Errorf("harness: %s: %q is not a file fault", path, kind)
}

// fileFaults hits each of t.Segments on t.Brokers[0]: a file fault, or a
// latch through the broker.
func (c *Cluster) fileFaults(ctx context.Context, in *Injection, t Target) error {
	b := t.Brokers[0]
	var errs []error
	for _, s := range t.Segments {
		if t.Kind == KindLatch {
			if err := b.Client.Latch(ctx, s.ID); err != nil {
				errs = append(errs, fmt.Errorf("latch %s on broker %d: %w", s.ID, b.ID, err))
				continue
			}
		} else {
			path, err := b.CopyPath(s.ID)
			var f Fault
			if err == nil {
				f, err = DamageCopy(t.Kind, path, s.ByteSize, t.Rand)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s on broker %d: %w", s.ID, b.ID, err))
				continue
			}
			in.Files = append(in.Files, f)
		}
		in.Lost = append(in.Lost, heal.CopyRef{Segment: s.ID, Broker: b.ID})
	}
	if len(in.Lost) == 0 {
		errs = append(errs, fmt.Errorf("no copy on broker %d could be hit (%d asked for)", b.ID, len(t.Segments)))
	}
	return errors.Join(errs...)
}

// DiskFiller is the filler file's name in the copies disk: no .seg
// suffix, so the store never takes it for a copy.
const DiskFiller = "demo-disk-filler"

// copiesDisk is the mounted loop disk, or an error saying why there is none.
func (c *Cluster) copiesDisk(in *Injection) (*loopdisk.Disk, *Broker, error) {
	l, b := c.Loop()
	if l == nil {
		return nil, nil, fmt.Errorf("%s: no loop-mounted copies disk (%s)", in.Kind, c.LoopSkip())
	}
	in.Brokers = []meta.BrokerID{b.ID}
	return l, b, nil
}

// fillDisk fills the copies disk; the undo removes the filler.
func (c *Cluster) fillDisk(in *Injection) error {
	l, _, err := c.copiesDisk(in)
	if err != nil {
		return err
	}
	filler := filepath.Join(l.Dir, DiskFiller)
	in.undo = func(context.Context) error {
		if err := os.Remove(filler); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	filled, err := l.Fill(filler, 0)
	in.How = bytesize.Format(filled) + " filler"
	return err
}

// diskReadOnly syncs the copies disk and makes it read-only under its
// live broker; the undo is RecoverDisk.
func (c *Cluster) diskReadOnly(in *Injection, timeout time.Duration) error {
	l, _, err := c.copiesDisk(in)
	if err != nil {
		return err
	}
	in.undo = func(ctx context.Context) error {
		v, err := c.RecoverDisk(ctx, timeout)
		in.Fsck = v
		return err
	}
	if err := SyncDir(l.Dir); err != nil {
		return err
	}
	syscall.Sync()
	in.How, err = l.GoReadOnly()
	return err
}

// RecoverDisk is the operator's remedy for a read-only copies disk: stop
// its broker, unmount, e2fsck -f -y, mount, start the broker (Revive). It
// returns e2fsck's verdict in words.
func (c *Cluster) RecoverDisk(ctx context.Context, timeout time.Duration) (string, error) {
	l, b := c.Loop()
	if l == nil {
		return "", fmt.Errorf("no loop-mounted copies disk (%s)", c.LoopSkip())
	}
	if err := c.Terminate(b, 10*time.Second); err != nil {
		return "", err
	}
	if err := l.Unmount(); err != nil {
		return "", err
	}
	out, ferr := l.Fsck()
	verdict := "e2fsck -f -y (clean)"
	if strings.Contains(out, "MODIFIED") {
		verdict = "e2fsck -f -y (errors corrected)"
	}
	if err := l.Mount(); err != nil {
		return "", errors.Join(ferr, err)
	}
	if ferr != nil {
		return "", ferr
	}
	if ro, err := l.ReadOnly(); err != nil || ro {
		return "", fmt.Errorf("%s still read-only after e2fsck and mount (%v)", l.Dir, err)
	}
	return verdict, c.Revive(ctx, timeout, b)
}

// network injects a network fault between the brokers' hosts (host i is
// broker i); the undo removes it.
func (c *Cluster) network(in *Injection, t Target) error {
	nt := c.Net()
	if nt == nil {
		return fmt.Errorf("brokers on loopback: %s", c.NetSkip())
	}
	hosts := make([]int, len(in.Brokers))
	for i, id := range in.Brokers {
		hosts[i] = int(id)
	}
	var undo netns.Undo
	var err error
	switch t.Kind {
	case KindIsolate:
		undo, err = nt.Isolate(hosts[0])
	case KindPartition:
		var rest []int
		for _, b := range c.Brokers() {
			if !slices.Contains(hosts, int(b.ID)) {
				rest = append(rest, int(b.ID))
			}
		}
		undo, err = nt.Partition(hosts, rest)
	case KindDropOut:
		undo, err = nt.DropOutbound(hosts[0], nil)
	case KindDropIn:
		undo, err = nt.DropInbound(hosts[0], nil)
	case KindFlap:
		undo, _, err = nt.Flap(hosts[0], t.Length, t.Seed)
	case KindCap:
		undo, err = nt.Cap(hosts[0], 2<<20)
	}
	if undo != nil {
		in.undo = func(context.Context) error { return undo() }
	}
	return err
}

// SameSet says whether a and b hold the same brokers, in any order (a
// replica set's order may change without its members changing; compare
// meta.SameReplicas, which is ordered).
func SameSet(a, b []meta.BrokerID) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
