package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fileLog is test scaffolding: a partition log in one append-only file
// with an in-memory index of its batches.
type fileLog struct {
	mu      sync.Mutex
	f       *os.File
	index   []indexEntry  // protected by mu
	hw      int64         // protected by mu
	changed chan struct{} // closed and replaced on every append; protected by mu
	waits   chan int64    // when set, receives every Wait's offset
	appends int           // protected by mu
}

type indexEntry struct {
	base    int64
	pos     int64
	size    int32
	records int32
}

func newFileLog(t *testing.T, path string) *fileLog {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &fileLog{f: f, changed: make(chan struct{})}
}

func (l *fileLog) Append(ctx context.Context, batch []byte, records int32) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	base := l.hw
	SetBaseOffset(batch, base)
	pos := int64(0)
	if n := len(l.index); n > 0 {
		pos = l.index[n-1].pos + int64(l.index[n-1].size)
	}
	if _, err := l.f.Write(batch); err != nil {
		return 0, err
	}
	if err := l.f.Sync(); err != nil {
		return 0, err
	}
	l.index = append(l.index, indexEntry{base: base, pos: pos, size: int32(len(batch)), records: records})
	l.hw += int64(records)
	l.appends++
	close(l.changed)
	l.changed = make(chan struct{})
	return base, nil
}

func (l *fileLog) Read(offset int64, maxBytes int32) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset < 0 || offset > l.hw {
		return nil, fmt.Errorf("%w: %d not in [0, %d]", ErrOffsetOutOfRange, offset, l.hw)
	}
	i := sort.Search(len(l.index), func(i int) bool {
		return l.index[i].base+int64(l.index[i].records) > offset
	})
	if i == len(l.index) {
		return nil, nil
	}
	size := int64(l.index[i].size)
	j := i + 1
	for ; j < len(l.index) && size+int64(l.index[j].size) <= int64(maxBytes); j++ {
		size += int64(l.index[j].size)
	}
	b := make([]byte, size)
	if _, err := l.f.ReadAt(b, l.index[i].pos); err != nil {
		return nil, err
	}
	return b, nil
}

func (l *fileLog) Offsets() (int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return 0, l.hw
}

func (l *fileLog) Wait(offset int64) <-chan struct{} {
	l.mu.Lock()
	ch := l.changed
	if l.hw > offset {
		ch = make(chan struct{})
		close(ch)
	}
	waits := l.waits
	l.mu.Unlock()
	if waits != nil {
		waits <- offset
	}
	return ch
}

func (l *fileLog) stats() (appends int, hw int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.appends, l.hw
}

// testCluster is test scaffolding: one broker leading every partition,
// whose logs are fileLogs in dir.
type testCluster struct {
	t    *testing.T
	dir  string
	addr BrokerAddr

	mu        sync.Mutex
	topics    map[string][]*fileLog // protected by mu
	names     []string              // protected by mu
	notLeader map[string]bool       // protected by mu
	nextPID   int64                 // protected by mu
	// appendRead serves the partitions as AppendReaders (appendLog).
	appendRead bool
	// The Groups side (groups_test.go): the coordinator of every group
	// (0: this broker), the committed offsets by group and every
	// CommitOffsets call.
	coordinator int32               // protected by mu
	offsets     map[string][]Offset // protected by mu
	commits     [][]Offset          // protected by mu
}

// appendLog is a fileLog read through AppendRead, into the listener's
// arena.
type appendLog struct{ *fileLog }

func (l appendLog) AppendRead(dst []byte, offset int64, maxBytes int32) ([]byte, error) {
	b, err := l.Read(offset, maxBytes)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

func newTestCluster(t *testing.T) *testCluster {
	return &testCluster{t: t, dir: t.TempDir(), topics: map[string][]*fileLog{}, notLeader: map[string]bool{}, nextPID: 1000}
}

func (c *testCluster) Self() int32           { return 1 }
func (c *testCluster) Brokers() []BrokerAddr { return []BrokerAddr{c.addr} }

func (c *testCluster) Topics() []TopicInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []TopicInfo
	for _, name := range c.names {
		ti := TopicInfo{Name: name}
		for i := range c.topics[name] {
			ti.Partitions = append(ti.Partitions, PartitionInfo{Index: int32(i), Leader: 1, LeaderEpoch: 0, Replicas: []int32{1}})
		}
		out = append(out, ti)
	}
	return out
}

func (c *testCluster) CreateTopic(ctx context.Context, name string, partitions int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.topics[name]; ok {
		return fmt.Errorf("topic %q: %w", name, ErrTopicExists)
	}
	if partitions < 1 || partitions > 64 {
		return fmt.Errorf("topic %q: %d: %w", name, partitions, ErrInvalidPartitions)
	}
	logs := make([]*fileLog, partitions)
	for i := range logs {
		logs[i] = newFileLog(c.t, filepath.Join(c.dir, name+"-"+strconv.Itoa(i)+".log"))
	}
	c.topics[name] = logs
	c.names = append(c.names, name)
	return nil
}

func (c *testCluster) Partition(topic string, index int32) (Log, error) {
	l, err := c.fileLog(topic, index)
	if err != nil {
		return nil, err
	}
	if c.appendRead {
		return appendLog{l}, nil
	}
	return l, nil
}

func (c *testCluster) fileLog(topic string, index int32) (*fileLog, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	logs, ok := c.topics[topic]
	if !ok || index < 0 || int(index) >= len(logs) {
		return nil, fmt.Errorf("%s/%d: %w", topic, index, ErrUnknownTopicOrPartition)
	}
	if c.notLeader[topic] {
		return nil, fmt.Errorf("%s/%d: %w", topic, index, ErrNotLeader)
	}
	return logs[index], nil
}

func (c *testCluster) NewProducerID(context.Context) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextPID++
	return c.nextPID, nil
}

// startServer serves cl on a loopback listener with cfg (Logger and the
// insecure default filled in) and returns its address.
func startServer(t *testing.T, cl *testCluster, cfg Config) string {
	t.Helper()
	if cfg.TLS == nil {
		cfg.Insecure = true
	}
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).With().Timestamp().Logger()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().(*net.TCPAddr)
	cl.addr = BrokerAddr{NodeID: 1, Host: "127.0.0.1", Port: int32(a.Port)}
	srv, err := NewServer(cfg, cl)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != ErrClosed {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	})
	return ln.Addr().String()
}

// rawConn speaks the protocol by hand over one connection, for what a
// client library would not send.
type rawConn struct {
	t    *testing.T
	c    net.Conn
	r    *bufio.Reader
	corr int32
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

func (rc *rawConn) send(req kmsg.Request) int32 {
	rc.t.Helper()
	rc.corr++
	b := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, rc.corr)
	if _, err := rc.c.Write(b); err != nil {
		rc.t.Fatal(err)
	}
	return rc.corr
}

// recv reads one response frame into resp (its version set).
func (rc *rawConn) recv(resp kmsg.Response, corr int32) error {
	var size [4]byte
	if _, err := io.ReadFull(rc.r, size[:]); err != nil {
		return err
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(rc.r, b); err != nil {
		return err
	}
	r := kbin.Reader{Src: b}
	if got := r.Int32(); got != corr {
		return fmt.Errorf("correlation id %d, want %d", got, corr)
	}
	if resp.IsFlexible() && resp.Key() != kmsg.ApiVersions.Int16() {
		kmsg.SkipTags(&r)
	}
	return resp.ReadFrom(r.Src)
}

// do sends req and reads its response, failing the test on error.
func (rc *rawConn) do(req kmsg.Request) kmsg.Response {
	rc.t.Helper()
	corr := rc.send(req)
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := rc.recv(resp, corr); err != nil {
		rc.t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

// makeBatch is a v2 record batch of values with a valid CRC.
func makeBatch(pid int64, epoch int16, seq int32, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.NewRecord()
		r.OffsetDelta, r.Value = int32(i), []byte(v)
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	rb := kmsg.NewRecordBatch()
	rb.Length = int32(batchHeaderLen - 12 + len(recs))
	rb.PartitionLeaderEpoch, rb.Magic = -1, 2
	rb.LastOffsetDelta, rb.NumRecords = int32(len(values)-1), int32(len(values))
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = pid, epoch, seq
	rb.Records = recs
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[crcStart:], castagnoli))
	return b
}

// produceRequest carries batch to topic/partition with acks=all.
func produceRequest(topic string, partition int32, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func producePartition(t *testing.T, resp kmsg.Response) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	pr := resp.(*kmsg.ProduceResponse)
	if len(pr.Topics) != 1 || len(pr.Topics[0].Partitions) != 1 {
		t.Fatalf("produce response: %+v", pr)
	}
	return pr.Topics[0].Partitions[0]
}
