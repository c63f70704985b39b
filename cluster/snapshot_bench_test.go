package cluster

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/benchenv"
	"github.com/rs/zerolog"
)

// BenchmarkRaftSnapshot runs a raft snapshot of 10^6 or 10^7 sealed
// segments (RF 3, 1,000 brokers, 19-byte ids) through hashicorp/raft on
// loopback TCP: a leader whose state is seeded by restoring a generated
// snapshot (seed-restore-s), raft's user snapshot written to a file store
// (write-s, MB), then a fresh node added as a voter, which raft brings up
// with InstallSnapshot: install-s is from AddVoter until the new node's
// fsm holds every segment, restore-s the part of it in the new node's
// Restore (read, decode, build the table; the rest is raft sending the
// snapshot into the new node's file store, CRC64 on both sides). It
// reports the live heap per segment of the state machine, the heap before
// the round, the peak heap sampled during the install and the process's
// VmHWM (both include the leader's state: one process; reset at the start
// of each round). Run one size at a time with -benchtime 1x; in -bench,
// write 10\^7 (a bare ^ anchors the pattern and matches nothing).
//
// load=busy1 runs the round beside another process at full CPU, started
// before the round and stopped after it (benchenv.SpinLoad: one core of
// the machine's, as much as the scheduler gives it; load-core is the share
// of a core it got); load=none runs it alone.
func BenchmarkRaftSnapshot(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		for _, busy := range []bool{false, true} {
			name := fmt.Sprintf("segments=10^%d/load=none", len(strconv.Itoa(n))-1)
			if busy {
				name = strings.Replace(name, "none", "busy1", 1)
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					benchRaftSnapshotLoaded(b, n, busy)
				}
			})
		}
	}
}

// benchRaftSnapshotLoaded runs one round, beside a spinning process when
// busy.
func benchRaftSnapshotLoaded(b *testing.B, n int, busy bool) {
	if !benchenv.ResetPeakRSS() {
		b.Log("VmHWM could not be reset: it may be an earlier round's")
	}
	if !busy {
		benchRaftSnapshot(b, n)
		return
	}
	spin, err := benchenv.StartSpinner()
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_, share := spin.Stop()
		b.ReportMetric(share, "load-core")
	}()
	benchRaftSnapshot(b, n)
}

// genSegments yields n sealed segments in id order, like meta's benchmarks.
func genSegments(n int) func(func(int, *meta.Segment) bool) {
	return func(yield func(int, *meta.Segment) bool) {
		per := max(1, n/1000)
		rs := make([]meta.BrokerID, 3)
		for i := range n {
			b := meta.BrokerID(i%1000 + 1)
			rs[0], rs[1], rs[2] = b, (b+332)%1000+1, (b+665)%1000+1
			s := meta.Segment{ID: meta.SegmentID(fmt.Sprintf("t-%04d-%012d", i/per, i%per)), StartOffset: uint64(i%per) * 1000,
				Length: 1000, ByteSize: 1 << 20, Sealed: true, Checksum: meta.CRC32C(uint32(i)), Replicas: rs, Version: 2}
			if !yield(i, &s) {
				return
			}
		}
	}
}

func heapNow() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func vmHWM() float64 {
	raw, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

type benchRaft struct {
	r     *raft.Raft
	trans *raft.NetworkTransport
	snaps *raft.FileSnapshotStore
}

// timedFSM is an fsm whose Restore records how long it took.
type timedFSM struct {
	*fsm
	restore atomic.Int64 // ns
}

func (t *timedFSM) Restore(rc io.ReadCloser) error {
	start := time.Now()
	err := t.fsm.Restore(rc)
	t.restore.Store(int64(time.Since(start)))
	return err
}

func newBenchRaft(b *testing.B, id string, f raft.FSM) *benchRaft {
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(id)
	conf.Logger = hclog.NewNullLogger()
	conf.TrailingLogs = 0 // a new node must install the snapshot
	conf.SnapshotThreshold, conf.SnapshotInterval = 1<<40, time.Hour
	store := raft.NewInmemStore()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(b.TempDir(), 1, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	trans, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 30*time.Second, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	r, err := raft.NewRaft(conf, f, store, store, snaps, trans)
	if err != nil {
		b.Fatal(err)
	}
	br := &benchRaft{r: r, trans: trans, snaps: snaps}
	b.Cleanup(func() {
		r.Shutdown().Error()
		trans.Close()
		// testing keeps this func after running it: without this the next
		// round would start with this one's state (GBs at 10^7) in the heap.
		r, trans = nil, nil
	})
	return br
}

func benchRaftSnapshot(b *testing.B, n int) {
	base := heapNow()
	b.ReportMetric(float64(base)/(1<<20), "heap-before-MB")
	leader := newFSM(zerolog.Nop())
	start := time.Now()
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeCompact(pw, meta.Snapshot{Index: uint64(2 * n), ReplicationFactor: 3}, n, genSegments(n)))
	}()
	if err := leader.Restore(pr); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(start).Seconds(), "seed-restore-s")
	b.ReportMetric(float64(heapNow()-base)/float64(n), "B/segment")

	l := newBenchRaft(b, "1", leader)
	if err := l.r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "1", Address: l.trans.LocalAddr()}}}).Error(); err != nil {
		b.Fatal(err)
	}
	for l.r.State() != raft.Leader {
		time.Sleep(10 * time.Millisecond)
	}
	data, _ := meta.EncodeCommand(meta.RegisterBroker{Broker: meta.Broker{ID: 1}})
	if err := l.r.Apply(data, 0).Error(); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	if err := l.r.Snapshot().Error(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(start).Seconds(), "write-s")
	if list, err := l.snaps.List(); err == nil && len(list) > 0 {
		b.ReportMetric(float64(list[0].Size)/(1<<20), "MB")
	}

	fresh := newFSM(zerolog.Nop())
	timed := &timedFSM{fsm: fresh}
	f := newBenchRaft(b, "2", timed)
	var peak atomic.Uint64
	stop := make(chan struct{})
	go func() { // sample the heap during the install
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
		}
	}()
	start = time.Now()
	if err := l.r.AddVoter("2", f.trans.LocalAddr(), 0, 0).Error(); err != nil {
		b.Fatal(err)
	}
	for fresh.view().Len() < n || timed.restore.Load() == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	b.ReportMetric(time.Since(start).Seconds(), "install-s")
	b.ReportMetric(time.Duration(timed.restore.Load()).Seconds(), "restore-s")
	close(stop)
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MB")
	b.ReportMetric(vmHWM(), "VmHWM-MB")
	if got, want := fresh.view().At(n-1).ID, leader.view().At(n-1).ID; got != want {
		b.Fatalf("installed state ends at %s, want %s", got, want)
	}
	benchenv.ReportLoad(b)
}
