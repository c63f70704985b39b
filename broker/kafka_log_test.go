package broker

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/kafka"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// The partition Log of kafka_log.go on real brokers in this process (raft,
// stores on disk, the internal frame, seal_at, end and read routes over
// mutual TLS): each test drives a kafkaCluster of its own over a broker of
// a testCluster, without the Kafka listener or its keeper, so that every
// roll and seal is the test's doing.

// testBatch is a v2 record batch of values (no producer id) with a valid
// CRC-32C, its base offset 0 until Append sets it.
func testBatch(values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.NewRecord()
		r.OffsetDelta, r.Value = int32(i), []byte(v)
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	rb := kmsg.NewRecordBatch()
	rb.Length = int32(61 - 12 + len(recs))
	rb.PartitionLeaderEpoch, rb.Magic = -1, 2
	rb.LastOffsetDelta, rb.NumRecords = int32(len(values)-1), int32(len(values))
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
	rb.Records = recs
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// kafkaLogCluster is n brokers of rf 3 whose partitions roll at
// segmentBytes, with topic "t" of one partition created; edit, if any,
// changes each broker's config further.
func kafkaLogCluster(t *testing.T, n int, segmentBytes int64, edit ...func(*Config)) *testCluster {
	t.Helper()
	c := newTestCluster(t, n, 3, func(cfg *Config) {
		cfg.Kafka.SegmentBytes, cfg.Kafka.SegmentMS = segmentBytes, 0
		for _, e := range edit {
			e(cfg)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.leader()
	err := newKafkaCluster(leader).CreateTopic(ctx, "t", 1)
	if errors.Is(err, kafka.ErrTopicExists) {
		// A retried CreateTopic whose first attempt landed across a
		// leader change: its first segment is the keeper's to create.
		_, err = leader.create(ctx, admin.CreateRequest{ID: meta.PartitionSegmentID("t", 0, 0)})
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newKafkaCluster(b *Server) *kafkaCluster {
	return &kafkaCluster{b: b, logs: map[partKey]*partLog{}}
}

// partitionLog opens the Log of t/0 on the broker its active segment
// names first, waiting for that segment to exist.
func (c *testCluster) partitionLog(t *testing.T) (*partLog, *Server) {
	t.Helper()
	var last *meta.Segment
	c.waitFor(20*time.Second, "an active segment of t/0", func() bool {
		chain := c.leader().node.View().Chain("t", 0)
		if len(chain) == 0 || chain[len(chain)-1].Sealed {
			return false
		}
		last = chain[len(chain)-1]
		for _, b := range c.brokers {
			if b == nil {
				continue
			}
			if bc := b.node.View().Chain("t", 0); len(bc) != len(chain) || bc[len(bc)-1].ID != last.ID {
				return false
			}
		}
		return true
	})
	b := c.b(last.Replicas[0])
	l, err := newKafkaCluster(b).Partition("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	return l.(*partLog), b
}

// appended is what a test appended: each batch as stored (its base offset
// set) and its offsets.
type appended struct {
	batches [][]byte
	bases   []int64
}

func (a *appended) add(t *testing.T, l *partLog, values ...string) {
	t.Helper()
	b := testBatch(values...)
	base, err := l.Append(context.Background(), b, int32(len(values)))
	if err != nil {
		t.Fatalf("append of %d records: %v", len(values), err)
	}
	a.batches, a.bases = append(a.batches, b), append(a.bases, base)
}

// readAll reads l from offset 0 to its high watermark, batch span by
// batch span, and returns the concatenated bytes and the reads it took.
func readAll(t *testing.T, l *partLog) ([]byte, int) {
	t.Helper()
	_, hw := l.Offsets()
	var out []byte
	reads := 0
	for off := int64(0); off < hw; {
		b, err := l.Read(off, 1<<20)
		if err != nil || len(b) == 0 {
			t.Fatalf("read at %d of %d: %d bytes, %v", off, hw, len(b), err)
		}
		reads++
		for rest := b; len(rest) > 0; {
			h, n, err := kafka.ParseBatch(rest)
			if err != nil {
				t.Fatalf("read at %d: %v", off, err)
			}
			if h.BaseOffset != off {
				t.Fatalf("read at %d: a batch at offset %d", off, h.BaseOffset)
			}
			off += int64(h.Records())
			rest = rest[n:]
		}
		out = append(out, b...)
	}
	return out, reads
}

// copiesAgree checks that every running replica of seg holds a sealed copy
// of seg.ByteSize bytes of frames.
func (c *testCluster) copiesAgree(t *testing.T, seg meta.Segment) {
	t.Helper()
	for _, r := range seg.Replicas {
		b := c.b(r)
		if b == nil {
			continue
		}
		end, err := b.db.DurableEnd(seg.ID)
		if err != nil || !end.Footer || end.Bytes != seg.ByteSize || end.Frames != seg.Length {
			t.Errorf("broker %d's copy of %s: %+v %v, want sealed at %d bytes, %d frames", r, seg.ID, end, err, seg.ByteSize, seg.Length)
		}
	}
}

// TestPartLogRollsAtSegmentBytes: batches are frames of the active
// segment on every replica; the append after the segment reaches
// segment_bytes seals it where it ends (the same on every replica) and
// continues on the next, led here, with offsets contiguous; a read never
// spans two segments, and reading from 0 gives back every batch byte for
// byte. A read of an offset inside a batch answers the whole batch; reads
// below 0 or past the high watermark are OFFSET_OUT_OF_RANGE, at it
// nothing; Wait fires on the next append.
func TestPartLogRollsAtSegmentBytes(t *testing.T) {
	c := kafkaLogCluster(t, 3, 4096)
	l, _ := c.partitionLog(t)
	var a appended
	value := string(bytes.Repeat([]byte("v"), 900))
	for i := range 12 {
		a.add(t, l, fmt.Sprintf("%02d-a-%s", i, value), fmt.Sprintf("%02d-b", i), fmt.Sprintf("%02d-c", i))
	}
	for i, base := range a.bases {
		if base != int64(3*i) {
			t.Fatalf("batch %d at offset %d, want %d", i, base, 3*i)
		}
	}
	chain := c.leader().node.View().Chain("t", 0)
	if len(chain) < 3 {
		t.Fatalf("12 batches of about 1 KiB at segment_bytes 4096 made %d segments", len(chain))
	}
	frame := int64(store.FrameHeaderSize + len(a.batches[0]))
	var frames uint64
	for i, s := range chain[:len(chain)-1] {
		if !s.Sealed || s.ByteSize < 4096 || s.ByteSize >= 4096+frame || s.StartOffset != frames {
			t.Errorf("segment %d %s: sealed %v at %d bytes from frame %d, want sealed at the first frame end past 4096, from frame %d", i, s.ID, s.Sealed, s.ByteSize, s.StartOffset, frames)
		}
		frames += s.Length
		c.copiesAgree(t, *s)
	}
	if act := chain[len(chain)-1]; act.Sealed || act.Replicas[0] != l.b.self {
		t.Fatalf("the active segment %s (sealed %v) is led by %v, not by %d", act.ID, act.Sealed, act.Replicas, l.b.self)
	}

	got, reads := readAll(t, l)
	if want := bytes.Join(a.batches, nil); !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, appended %d: not the same bytes", len(got), len(want))
	}
	if reads < len(chain) {
		t.Errorf("read %d segments in %d reads: a read spans segments", len(chain), reads)
	}
	if b, err := l.Read(4, 1); err != nil || !bytes.Equal(b, a.batches[1]) {
		t.Errorf("read at offset 4, inside batch 1: %d bytes, %v; want batch 1 (%d bytes)", len(b), err, len(a.batches[1]))
	}
	_, hw := l.Offsets()
	if b, err := l.Read(hw, 1<<20); err != nil || len(b) != 0 {
		t.Errorf("read at the high watermark %d: %d bytes, %v; want nothing", hw, len(b), err)
	}
	for _, off := range []int64{-1, hw + 1, hw + 100} {
		if _, err := l.Read(off, 1<<20); !errors.Is(err, kafka.ErrOffsetOutOfRange) {
			t.Errorf("read at %d (high watermark %d): %v, want ErrOffsetOutOfRange", off, hw, err)
		}
	}
	woken := l.Wait(hw)
	select {
	case <-woken:
		t.Fatal("Wait at the high watermark fired before an append")
	default:
	}
	a.add(t, l, "after the wait")
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait at the high watermark did not fire on the append")
	}
}

// TestPartLogSealsAtCommonEndOnReplicaFailure: with a follower replica
// stopped, the next append fails (NOT_LEADER_OR_FOLLOWER for the client to
// retry), the active segment is sealed on the live replicas at the last
// acknowledged frame (the failed batch is in no sealed copy) and the Log
// steps down. Once the next segment exists on live brokers, a new Log
// rebuilt from the copies (read from another broker when its leader holds
// none) reads every acknowledged batch across the sealed segment and
// appends after it.
func TestPartLogSealsAtCommonEndOnReplicaFailure(t *testing.T) {
	c := kafkaLogCluster(t, 4, 1<<20)
	l, lb := c.partitionLog(t)
	var a appended
	for i := range 5 {
		a.add(t, l, fmt.Sprintf("acked %d", i), fmt.Sprintf("acked %d second", i))
	}
	act := l.b.node.View().Chain("t", 0)[0]
	var victim meta.BrokerID
	for _, r := range act.Replicas[1:] {
		if !c.b(r).node.IsLeader() {
			victim = r
			break
		}
	}
	c.stop(victim)
	_, err := l.Append(context.Background(), testBatch("never acknowledged"), 1)
	if !errors.Is(err, kafka.ErrNotLeader) {
		t.Fatalf("append with replica %d stopped: %v, want ErrNotLeader", victim, err)
	}
	var sealed meta.Segment
	c.waitFor(10*time.Second, string(act.ID)+" sealed in the leader's metadata", func() bool {
		sealed, _ = lb.node.Segment(act.ID)
		return sealed.Sealed
	})
	var wantBytes int64
	for _, b := range a.batches {
		wantBytes += int64(store.FrameHeaderSize + len(b))
	}
	if sealed.Length != 5 || sealed.ByteSize != wantBytes {
		t.Fatalf("after the failed append %s is %+v, want sealed at 5 frames, %d bytes", act.ID, sealed, wantBytes)
	}
	if !slices.Contains(sealed.Replicas, victim) {
		t.Errorf("the sealed set %v dropped the failed replica %d: heal replaces it, the seal does not", sealed.Replicas, victim)
	}
	c.copiesAgree(t, sealed)

	// The keeper's part, by hand: the next segment on live brokers once
	// the control plane's leader no longer counts the stopped one.
	c.keepUntilSegments(2)
	next := c.leader().node.View().Chain("t", 0)[1]
	if next.StartOffset != 5 || slices.Contains(next.Replicas, victim) {
		t.Fatalf("next segment %s starts at frame %d on %v; want frame 5, without broker %d", next.ID, next.StartOffset, next.Replicas, victim)
	}
	l2, _ := c.partitionLog(t)
	if l2 == l {
		t.Fatal("the stepped-down Log was opened again")
	}
	if _, hw := l2.Offsets(); hw != 10 {
		t.Fatalf("rebuilt Log: high watermark %d, want 10 (5 batches of 2)", hw)
	}
	a.add(t, l2, "after the seal")
	if a.bases[len(a.bases)-1] != 10 {
		t.Fatalf("first append after the seal at offset %d, want 10", a.bases[len(a.bases)-1])
	}
	got, _ := readAll(t, l2)
	if want := bytes.Join(a.batches, nil); !bytes.Equal(got, want) {
		t.Fatalf("rebuilt Log read back %d bytes, appended %d (the failed batch excluded): not the same bytes", len(got), len(want))
	}
}

// TestPartLogSealsAnEarlierLeadersFrames: a Log opened over an active
// segment that already holds frames (an earlier leader's) seals it at the
// longest end its replicas hold and refuses to lead it; the partition goes
// on in its next segment.
func TestPartLogSealsAnEarlierLeadersFrames(t *testing.T) {
	c := kafkaLogCluster(t, 3, 1<<20)
	l, lb := c.partitionLog(t)
	var a appended
	a.add(t, l, "one", "two")
	a.add(t, l, "three")
	act := lb.node.View().Chain("t", 0)[0]
	_, err := newKafkaCluster(lb).Partition("t", 0)
	if !errors.Is(err, kafka.ErrNotLeader) {
		t.Fatalf("a second Log over %s with 2 frames: %v, want ErrNotLeader", act.ID, err)
	}
	// The seal is committed through the control plane's leader; this
	// broker's metadata follows.
	var sealed meta.Segment
	c.waitFor(10*time.Second, string(act.ID)+" sealed in the broker's metadata", func() bool {
		sealed, _ = lb.node.Segment(act.ID)
		return sealed.Sealed
	})
	if sealed.Length != 2 {
		t.Fatalf("%s after a new Log opened over it (%v): %+v, want sealed at 2 frames", act.ID, err, sealed)
	}
	c.copiesAgree(t, sealed)
}

// TestPartLogAppendsAfterItsReplicasRestartEmpty: the active segment
// rolled and still empty when every broker restarts; each store reopens its
// copy with no frame to read the start offset from. The Log opened again
// appends to that segment at its start (the leader passes the segment's
// start with each frame and seal) instead of refusing every append and
// seal of the partition.
func TestPartLogAppendsAfterItsReplicasRestartEmpty(t *testing.T) {
	c := kafkaLogCluster(t, 3, 1<<20)
	l, _ := c.partitionLog(t)
	var a appended
	a.add(t, l, "one", "two")
	a.add(t, l, "three")
	l.mu.Lock()
	act := l.chain[len(l.chain)-1]
	l.mu.Unlock()
	if err := l.roll(context.Background(), act, true, nil); err != nil {
		t.Fatalf("roll: %v", err)
	}
	for i := range c.brokers {
		c.stop(meta.BrokerID(i + 1))
	}
	for i := range c.brokers {
		c.start(meta.BrokerID(i + 1))
	}
	// Every broker's own view, not only the leader's: the partition's
	// leader replicates to the addresses its view holds.
	c.waitFor(30*time.Second, "every broker's view holding every broker's new address", func() bool {
		if c.currentLeader() == nil {
			return false
		}
		for _, viewer := range c.brokers {
			for _, b := range c.brokers {
				if br, ok := viewer.node.View().Broker(b.self); !ok || br.AdminAddr != b.adminAddr {
					return false
				}
			}
		}
		return true
	})
	l2, _ := c.partitionLog(t)
	chain := c.leader().node.View().Chain("t", 0)
	if len(chain) != 2 || chain[1].StartOffset != 2 {
		t.Fatalf("after the roll the chain is %d segments, the active one from frame %d; want 2, from frame 2", len(chain), chain[len(chain)-1].StartOffset)
	}
	a.add(t, l2, "after the restart", "and another")
	if got := a.bases[len(a.bases)-1]; got != 3 {
		t.Fatalf("first append after the restart at offset %d, want 3", got)
	}
	if n := len(c.leader().node.View().Chain("t", 0)); n != 2 {
		t.Fatalf("the append after the restart rolled the partition (%d segments): its replicas refused the empty active segment", n)
	}
	got, _ := readAll(t, l2)
	if want := bytes.Join(a.batches, nil); !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, appended %d: not the same bytes", len(got), len(want))
	}
	l2.mu.Lock()
	act = l2.chain[len(l2.chain)-1]
	l2.mu.Unlock()
	sealed, on, err := sealActive(context.Background(), l2.b, meta.Segment{ID: act.id, StartOffset: act.start, Replicas: act.replicas}, act.bytes, nil)
	if err != nil || len(on) != 3 || sealed.Length != 1 {
		t.Fatalf("seal of the segment appended after the restart: %+v on %v, %v; want 1 frame on 3 replicas", sealed, on, err)
	}
	c.copiesAgree(t, sealed)
}

// TestPartLogRollsPastAFollowerThatHangs: a follower that takes requests
// and never answers (a paused process) holds an append for the heal
// grace, not until the client gives up; the roll that follows seals on
// the other replicas without asking it and places the next segment
// without it, so the partition moves on in that one append: no seal
// call timing out on it, no create placed on it, no keeper turn. The
// hung follower records what it was asked.
func TestPartLogRollsPastAFollowerThatHangs(t *testing.T) {
	c := kafkaLogCluster(t, 4, 1<<20, func(cfg *Config) { cfg.Heal.Grace = time.Second })
	l, lb := c.partitionLog(t)
	var a appended
	a.add(t, l, "acked", "acked too")
	act := l.b.node.View().Chain("t", 0)[0]
	var victim meta.BrokerID
	for _, r := range act.Replicas[1:] {
		if !c.b(r).node.IsLeader() {
			victim = r
			break
		}
	}
	asked := hangAt(t, c, victim)

	_, err := l.Append(context.Background(), testBatch("never acknowledged"), 1)
	if !errors.Is(err, kafka.ErrNotLeader) {
		t.Fatalf("append with replica %d hung: %v, want ErrNotLeader", victim, err)
	}
	if got := asked(); len(got) != 1 || !strings.HasSuffix(got[0], "/frame") {
		t.Fatalf("the hung follower %d was asked %v; want only the frame write (the seal and the next create pass it by)", victim, got)
	}
	// The roll committed both changes before Append returned; the
	// partition leader's own view applies them a moment later.
	var chain []*meta.Segment
	c.waitFor(10*time.Second, fmt.Sprintf("the roll's seal and next segment in broker %d's view (the append answered: %v)", lb.self, err), func() bool {
		chain = lb.node.View().Chain("t", 0)
		return len(chain) >= 2
	})
	if len(chain) != 2 || !chain[0].Sealed || chain[0].Length != 1 {
		t.Fatalf("after the append the chain is %v; want %s sealed at its 1 acknowledged frame and the next segment created by the roll", chainIDs(chain), act.ID)
	}
	if next := chain[1]; slices.Contains(next.Replicas, victim) || next.StartOffset != 1 {
		t.Fatalf("next segment %s on %v from frame %d; want it without the hung broker %d, from frame 1", next.ID, next.Replicas, next.StartOffset, victim)
	}
}

// hangAt stops broker id and serves its admin address with its own
// certificate, recording each request's path and never answering: a
// paused broker. asked returns the paths so far.
func hangAt(t *testing.T, c *testCluster, id meta.BrokerID) (asked func() []string) {
	t.Helper()
	addr := c.b(id).AdminAddr()
	c.stop(id)
	cfg := c.cfgs[id-1]
	certs, err := cfg.LoadCerts()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", addr, certs.ServerConfig())
	if err != nil {
		t.Fatalf("listening on broker %d's admin address %s: %v", id, addr, err)
	}
	release := make(chan struct{})
	var mu sync.Mutex
	var paths []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		close(release)
		_ = srv.Close()
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(paths)
	}
}

func chainIDs(chain []*meta.Segment) []meta.SegmentID {
	var out []meta.SegmentID
	for _, s := range chain {
		out = append(out, s.ID)
	}
	return out
}

// TestPartLogMovesOnWhenItsLeaderLostTheCopy: the partition's leader
// comes back without its copies (a data directory emptied, as the swap
// fault does) while its segment is active. The Log it would open cannot
// lead: it seals the segment on the other replicas at the longest end
// they hold, every acknowledged batch kept, and the partition goes on in
// its next segment. Before, the Log refused to open forever and the
// others, seeing their leader answer, never took over: no client could
// produce to or read the partition again.
func TestPartLogMovesOnWhenItsLeaderLostTheCopy(t *testing.T) {
	c := kafkaLogCluster(t, 4, 1<<20)
	l, lb := c.partitionLog(t)
	var a appended
	for i := range 3 {
		a.add(t, l, fmt.Sprintf("acked %d", i))
	}
	act := lb.node.View().Chain("t", 0)[0]
	c.stop(lb.self)
	if err := os.RemoveAll(filepath.Join(c.cfgs[lb.self-1].DataDir, "copies")); err != nil {
		t.Fatal(err)
	}
	back := c.restart(lb.self)
	if _, err := newKafkaCluster(back).Partition("t", 0); err == nil || !strings.Contains(err.Error(), "holds no copy") {
		t.Fatalf("opening the Log on the leader without its copy: %v; want a refusal saying it holds no copy", err)
	}
	c.sealedAndOn(act, &a)
}

// sealedAndOn checks that the partition's active segment act, of the 3
// acknowledged single-record batches in a, was sealed with all 3, and
// that the partition goes on: the next segment's Log appends at offset 3
// and every batch reads back.
func (c *testCluster) sealedAndOn(act *meta.Segment, a *appended) {
	t := c.t
	t.Helper()
	var sealed meta.Segment
	c.waitFor(10*time.Second, string(act.ID)+" sealed", func() bool {
		sealed, _ = c.leader().node.Segment(act.ID)
		return sealed.Sealed
	})
	if sealed.Length != 3 {
		t.Fatalf("%s sealed at %d frames, want the 3 acknowledged", act.ID, sealed.Length)
	}
	c.keepUntilSegments(2)
	l2, _ := c.partitionLog(t)
	a.add(t, l2, "after the seal")
	if got := a.bases[len(a.bases)-1]; got != 3 {
		t.Fatalf("first append after the seal at offset %d, want 3", got)
	}
	got, _ := readAll(t, l2)
	if want := bytes.Join(a.batches, nil); !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, appended %d: not the same bytes", len(got), len(want))
	}
}

// restart starts broker id again (after stop) and waits until the
// control plane's leader has its new addresses.
func (c *testCluster) restart(id meta.BrokerID) *Server {
	c.t.Helper()
	back := c.start(id)
	c.waitFor(20*time.Second, fmt.Sprintf("broker %d back in every view", id), func() bool {
		leader := c.currentLeader()
		if leader == nil {
			return false
		}
		br, ok := leader.node.View().Broker(id)
		return ok && br.AdminAddr == back.adminAddr
	})
	return back
}

// TestPartLogKeepsTheFramesItsLeadersCopyLost: the leader's copy of the
// active segment falls behind the frames it wrote and acknowledged (its
// disk lost synced writes, or was put back from an older image: the fault
// suite once moved a running broker's copies onto a new disk so), and the
// leader restarts on it. With no frame left there, the Log used to take
// the segment as empty, write at its start (refused by the followers) and
// seal it at 0 frames: CI lost 451 acknowledged records so. With some
// left, the takeover sealed at the least end. Either way the segment must
// be sealed at the longest end its replicas hold: every acknowledged batch
// reads back, and the next append follows them.
func TestPartLogKeepsTheFramesItsLeadersCopyLost(t *testing.T) {
	for _, kept := range []int{0, 1} {
		t.Run(fmt.Sprintf("%d of 3 frames left", kept), func(t *testing.T) {
			c := kafkaLogCluster(t, 3, 1<<20)
			l, lb := c.partitionLog(t)
			act := lb.node.View().Chain("t", 0)[0]
			path := store.CopyPath(c.cfgs[lb.self-1].DataDir, act.ID)
			var a appended
			var older []byte
			for i := range 3 {
				if i == kept {
					var err error
					if older, err = os.ReadFile(path); err != nil {
						t.Fatal(err)
					}
				}
				a.add(t, l, fmt.Sprintf("acked %d", i))
			}
			c.stop(lb.self)
			if err := os.WriteFile(path, older, 0o644); err != nil {
				t.Fatal(err)
			}
			back := c.restart(lb.self)
			if _, err := newKafkaCluster(back).Partition("t", 0); !errors.Is(err, kafka.ErrNotLeader) {
				t.Fatalf("opening the Log on a leader whose copy holds %d of the 3 acknowledged frames: %v; want it refused (ErrNotLeader) and the segment sealed", kept, err)
			}
			c.sealedAndOn(act, &a)
		})
	}
}

// keepUntilSegments runs the keeper's turns for t/0 by hand on the
// control plane's leader until the partition's chain holds n segments.
func (c *testCluster) keepUntilSegments(n int) {
	c.t.Helper()
	turn := keepTurn{down: map[meta.SegmentID]int{}}
	c.waitFor(30*time.Second, fmt.Sprintf("the partition's segment %d", n), func() bool {
		leader := c.currentLeader()
		if leader == nil {
			return false
		}
		turn.wasMissing, turn.missing = turn.missing, map[meta.SegmentID]bool{}
		newKafkaCluster(leader).keepPartition(context.Background(), leader.node.View(), "t", 0, &turn)
		return len(leader.node.View().Chain("t", 0)) == n
	})
}

// TestPartLogTakeoverCutsNoAcknowledgedFrame: a follower takes over
// (the keeper, seeing the leader silent) and learns the replicas' ends;
// the leader, only paused, resumes and appends before the takeover's seal
// lands. That append must not be acknowledged, or the seal at the ends
// asked before it cuts a frame a client was told is stored (seed 777 of
// the nemesis lost one record so). The fence that answers the end refuses
// the frame; the seal then keeps every acknowledged batch.
func TestPartLogTakeoverCutsNoAcknowledgedFrame(t *testing.T) {
	c := kafkaLogCluster(t, 3, 1<<20)
	l, a, act, keeper, at, live := c.ackedThenFenced()
	ctx := context.Background()
	base, err := l.Append(ctx, testBatch("the resumed leader's"), 1)
	if err == nil {
		a.batches, a.bases = append(a.batches, nil), append(a.bases, base)
	} else if !errors.Is(err, kafka.ErrNotLeader) {
		t.Fatalf("the resumed leader's append after the fence: %v, want refused (ErrNotLeader) or acknowledged", err)
	}
	sealReplicasAt(ctx, keeper, *act, live, sealAtRequest{Start: act.StartOffset, Bytes: at, Fenced: true}, nil)
	var sealed meta.Segment
	c.waitFor(10*time.Second, string(act.ID)+" sealed", func() bool {
		sealed, _ = c.leader().node.Segment(act.ID)
		return sealed.Sealed
	})
	if acked := uint64(len(a.bases)); sealed.Length < acked {
		t.Fatalf("%s sealed at %d frames, below the %d the leader acknowledged (the last at offset %d)", act.ID, sealed.Length, acked, a.bases[len(a.bases)-1])
	}
	c.copiesAgree(t, sealed)
}

// TestPartLogFencedSealRefusesACopyThatLostItsFence: a replica that
// restarts between the takeover's fence and its seal has dropped the
// fence and may have taken (and the leader acknowledged) frames past the
// end it answered. The fenced seal refuses to cut it (code fenced), and no
// replica is cut: every acknowledged batch stays.
func TestPartLogFencedSealRefusesACopyThatLostItsFence(t *testing.T) {
	c := kafkaLogCluster(t, 3, 1<<20)
	l, lb := c.partitionLog(t)
	var a appended
	a.add(t, l, "acked")
	act := lb.node.View().Chain("t", 0)[0]
	ctx := context.Background()
	keeper, at, live, err := c.fenceFollowers(act)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range act.Replicas[1:] {
		c.b(r).setFence(act.ID, false) // what a restart does to the fence
	}
	a.add(t, l, "acked after the fence was lost")
	_, on, err := sealReplicasAt(ctx, keeper, *act, live, sealAtRequest{Start: act.StartOffset, Bytes: at, Fenced: true}, nil)
	if !errors.Is(err, errFenced) || len(on) != 0 {
		t.Fatalf("fenced seal at byte %d of copies that lost their fence: sealed on %v, %v; want refused with errFenced everywhere", at, on, err)
	}
	for _, r := range act.Replicas {
		end, err := c.b(r).db.DurableEnd(act.ID)
		if err != nil || end.Frames != 2 || end.Footer {
			t.Fatalf("broker %d's copy after the refused seal: %+v, %v; want both acknowledged frames, unsealed", r, end, err)
		}
	}
}

// TestPartLogTakesBackASealTheMetadataRefused: a takeover seals the
// followers' copies, then its SealSegment is refused: another seal was
// recorded first (a leader's roll, or a takeover by brokers this one
// could not reach: the nemesis's seed 90210 had a follower cut off from
// everyone seal its own copy one frame past the recorded seal, and heal
// then refused to touch the copy for good). The copies must not keep a
// seal the metadata does not record: their footers come off, their
// frames stay, and they stay fenced, taking no frame.
func TestPartLogTakesBackASealTheMetadataRefused(t *testing.T) {
	c := kafkaLogCluster(t, 3, 1<<20)
	_, _, act, keeper, at, live := c.ackedThenFenced()
	ctx := context.Background()
	other := meta.SealSegment{ID: act.ID, Length: 2, ByteSize: at - 1, Checksum: meta.CRC32C(1)}
	if _, err := c.leader().apply(ctx, other); err != nil {
		t.Fatal(err)
	}
	_, on, err := sealReplicasAt(ctx, keeper, *act, live, sealAtRequest{Start: act.StartOffset, Bytes: at, Fenced: true}, nil)
	if !errors.Is(err, meta.ErrSealed) || len(on) != 2 {
		t.Fatalf("the takeover's seal after another was recorded: sealed on %v, %v; want both copies sealed, then the commit refused (meta.ErrSealed)", on, err)
	}
	for _, r := range act.Replicas[1:] {
		end, err := c.b(r).db.DurableEnd(act.ID)
		if err != nil || end.Footer || end.Frames != 3 || end.Bytes != at {
			t.Errorf("broker %d's copy after the refused commit: %+v, %v; want its 3 frames (%d bytes) and no footer", r, end, err, at)
		}
		if err := appendFrame(c.b(r), act.ID, act.StartOffset, act.StartOffset+3, testBatch("after the refused seal")); !errors.Is(err, errFenced) {
			t.Errorf("broker %d took a frame after the refused seal: %v; want errFenced", r, err)
		}
	}
}

// TestPartLogFollowersReadWhatTheClientsWaitOn: each frame carries the
// length of the partition's previous replicate round (what its acks=all
// clients waited on), and a follower counts the longer of that and its
// own append as its client latency, so a follower no client talks to
// paces the catch-up it receives by the partition's clients. One follower
// holds the first frame (the test holds its segment lock: a slow disk),
// so the first round is slow; on the second frame both followers, the
// other one's own appends fast, must read at least that round.
func TestPartLogFollowersReadWhatTheClientsWaitOn(t *testing.T) {
	c := kafkaLogCluster(t, 3, 1<<20)
	l, lb := c.partitionLog(t)
	chain := lb.node.View().Chain("t", 0)
	act := chain[len(chain)-1]
	slow, fast := c.b(act.Replicas[1]), c.b(act.Replicas[2])
	for _, f := range []*Server{slow, fast} {
		f.clientLatency = new(kafka.Latency) // the test cluster runs no Kafka listener
		// The frame route takes this lock before it reads clientLatency:
		// taking it once here orders the write before every frame's read.
		f.lockSegment(act.ID)()
	}

	release := slow.lockSegment(act.ID)
	done := make(chan error, 1)
	go func() {
		_, err := l.Append(context.Background(), testBatch("held by a slow follower"), 1)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the slow follower's disk; nothing is compared to it
	release()
	if err := <-done; err != nil {
		t.Fatalf("append held by broker %d: %v", slow.self, err)
	}
	l.mu.Lock()
	held := l.round // what the next frame carries: only Append changes it
	l.mu.Unlock()
	if held <= 0 {
		t.Fatalf("after an acknowledged append the Log recorded a round of %v", held)
	}

	since := time.Now() // after every follower's append of the first frame
	var a appended
	a.add(t, l, "after the held one")
	for _, f := range []*Server{slow, fast} {
		p99, ok := f.clientLatency.P99(since)
		if !ok || p99 < held {
			t.Errorf("broker %d's client p99 over the second frame: %v (known %v); want at least the %v the leader's first round took", f.self, p99, ok, held)
		}
	}
}

// ackedThenFenced opens t/0's Log, appends 3 acknowledged single-record
// batches (a) to its active segment act, and fences act's followers as a
// takeover by the first of them (keeper) does: where to seal and the
// replicas that answered, both followers.
func (c *testCluster) ackedThenFenced() (l *partLog, a *appended, act *meta.Segment, keeper *Server, at int64, live []sealReplica) {
	t := c.t
	t.Helper()
	l, lb := c.partitionLog(t)
	a = &appended{}
	for i := range 3 {
		a.add(t, l, fmt.Sprintf("acked %d", i))
	}
	act = lb.node.View().Chain("t", 0)[0]
	keeper, at, live, err := c.fenceFollowers(act)
	if err != nil || len(live) != 2 {
		t.Fatalf("the takeover's fence of %v's followers: %v on %d replicas", act.Replicas, err, len(live))
	}
	return l, a, act, keeper, at, live
}

// fenceFollowers is the first step of a takeover of act by its first
// follower (the keeper): every follower fenced, where to seal (the
// longest end among them) and those that answered.
func (c *testCluster) fenceFollowers(act *meta.Segment) (keeper *Server, at int64, live []sealReplica, err error) {
	keeper = c.b(act.Replicas[1])
	var followers []sealReplica
	for _, r := range act.Replicas[1:] {
		br, _ := keeper.node.View().Broker(r)
		followers = append(followers, sealReplica{r, br.AdminAddr})
	}
	at, live, err = fenceReplicas(context.Background(), keeper, *act, followers)
	return keeper, at, live, err
}
