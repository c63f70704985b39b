package kafka

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/malachi-log/malachi/pki"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// createTopic creates topic through the client's CreateTopics.
func createTopic(t *testing.T, cl *kgo.Client, topic string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

func initProducer(t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	resp, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(testCtx(t), cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("InitProducerID: %v, code %d", err, resp.ErrorCode)
	}
	return resp.ProducerID
}

// TestIdempotentRetry: the same produce request sent twice is stored once
// and both answers carry its base offset; a sequence gap is refused and
// stores nothing.
func TestIdempotentRetry(t *testing.T) {
	tc := newTestCluster(t)
	addr := startServer(t, tc, DefaultConfig())
	cl := newClient(t, addr)
	createTopic(t, cl, "idem", 1)
	pid := initProducer(t, cl)
	ctx := testCtx(t)

	if _, err := cl.Request(ctx, produceRequest("idem", 0, makeBatch(-1, -1, -1, "x", "y"))); err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for range 2 {
		resp, err := cl.Request(ctx, produceRequest("idem", 0, makeBatch(pid, 0, 0, "a", "b", "c")))
		if err != nil {
			t.Fatal(err)
		}
		p := producePartition(t, resp)
		if p.ErrorCode != 0 {
			t.Fatalf("produce: %v", kerr.ErrorForCode(p.ErrorCode))
		}
		bases = append(bases, p.BaseOffset)
	}
	l, _ := tc.fileLog("idem", 0)
	if appends, hw := l.stats(); bases[0] != 2 || bases[1] != 2 || appends != 2 || hw != 5 {
		t.Fatalf("bases %v, %d appends, high watermark %d; want [2 2], 2, 5", bases, appends, hw)
	}
	resp, err := cl.Request(ctx, produceRequest("idem", 0, makeBatch(pid, 0, 7, "gap")))
	if err != nil {
		t.Fatal(err)
	}
	if p := producePartition(t, resp); p.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("sequence gap answered %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", kerr.ErrorForCode(p.ErrorCode))
	}
	if appends, hw := l.stats(); appends != 2 || hw != 5 {
		t.Fatalf("after a refused gap: %d appends, high watermark %d; want 2, 5", appends, hw)
	}
}

// TestProducerStateRebuilt: a new listener over the same log (a new
// leader) answers a retry of a batch stored before it started.
func TestProducerStateRebuilt(t *testing.T) {
	tc := newTestCluster(t)
	addr := startServer(t, tc, DefaultConfig())
	cl := newClient(t, addr)
	createTopic(t, cl, "rebuild", 1)
	batch := makeBatch(4242, 3, 0, "a", "b")
	if p := producePartition(t, dialRaw(t, addr).do(produceRequest("rebuild", 0, append([]byte(nil), batch...)))); p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	addr2 := startServer(t, tc, DefaultConfig()) // a second listener: fresh producer state
	rc := dialRaw(t, addr2)
	if p := producePartition(t, rc.do(produceRequest("rebuild", 0, append([]byte(nil), batch...)))); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("retry after rebuild: %v at %d, want duplicate at 0", kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
	}
	if p := producePartition(t, rc.do(produceRequest("rebuild", 0, makeBatch(4242, 2, 2, "old")))); p.ErrorCode != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("old epoch after rebuild: %v, want INVALID_PRODUCER_EPOCH", kerr.ErrorForCode(p.ErrorCode))
	}
	if l, _ := tc.fileLog("rebuild", 0); func() bool { a, hw := l.stats(); return a != 1 || hw != 2 }() {
		t.Fatal("the retry or the stale batch was stored")
	}
}

func TestBadCRCChangesNothing(t *testing.T) {
	tc := newTestCluster(t)
	addr := startServer(t, tc, DefaultConfig())
	rc := dialRaw(t, addr)
	if err := tc.CreateTopic(context.Background(), "crc", 1); err != nil {
		t.Fatal(err)
	}
	b := makeBatch(-1, -1, -1, "payload")
	b[len(b)-2] ^= 0x40
	if p := producePartition(t, rc.do(produceRequest("crc", 0, b))); p.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("bad CRC answered %v, want CORRUPT_MESSAGE", kerr.ErrorForCode(p.ErrorCode))
	}
	if l, _ := tc.fileLog("crc", 0); func() bool { a, _ := l.stats(); return a != 0 }() {
		t.Fatal("a batch with a bad CRC was stored")
	}
}

func TestUnknownTopicWithoutAutoCreate(t *testing.T) {
	tc := newTestCluster(t)
	cfg := DefaultConfig()
	cfg.AutoCreateTopics = false
	rc := dialRaw(t, startServer(t, tc, cfg))
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(12)
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("nope")
	req.Topics, req.AllowAutoTopicCreation = append(req.Topics, rt), true
	resp := rc.do(req).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("metadata of an unknown topic: %+v", resp.Topics)
	}
	if len(tc.Topics()) != 0 {
		t.Fatal("a topic was created")
	}
	if p := producePartition(t, rc.do(produceRequest("nope", 0, makeBatch(-1, -1, -1, "x")))); p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("produce to an unknown topic: %v", kerr.ErrorForCode(p.ErrorCode))
	}
}

func TestNotLeader(t *testing.T) {
	tc := newTestCluster(t)
	rc := dialRaw(t, startServer(t, tc, DefaultConfig()))
	if err := tc.CreateTopic(context.Background(), "elsewhere", 1); err != nil {
		t.Fatal(err)
	}
	tc.mu.Lock()
	tc.notLeader["elsewhere"] = true
	tc.mu.Unlock()
	if p := producePartition(t, rc.do(produceRequest("elsewhere", 0, makeBatch(-1, -1, -1, "x")))); p.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce to a non-leader: %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(p.ErrorCode))
	}
	f := fetchRequest("elsewhere", 0, 0, 0, 0)
	if p := rc.do(f).(*kmsg.FetchResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Fatalf("fetch from a non-leader: %v", kerr.ErrorForCode(p.ErrorCode))
	}
}

func fetchRequest(topic string, partition int32, offset int64, minBytes, maxWaitMillis int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.MinBytes, req.MaxWaitMillis, req.MaxBytes = minBytes, maxWaitMillis, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func TestOffsetOutOfRange(t *testing.T) {
	tc := newTestCluster(t)
	rc := dialRaw(t, startServer(t, tc, DefaultConfig()))
	if err := tc.CreateTopic(context.Background(), "short", 1); err != nil {
		t.Fatal(err)
	}
	rc.do(produceRequest("short", 0, makeBatch(-1, -1, -1, "a", "b")))
	p := rc.do(fetchRequest("short", 0, 3, 1, 100)).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if p.ErrorCode != kerr.OffsetOutOfRange.Code || p.HighWatermark != 2 || len(p.RecordBatches) != 0 {
		t.Fatalf("fetch past the end: %v, high watermark %d, %d bytes", kerr.ErrorForCode(p.ErrorCode), p.HighWatermark, len(p.RecordBatches))
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.SetVersion(6)
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "short"
	for _, ts := range []int64{-2, -1, 12345} {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
	}
	lo.Topics = append(lo.Topics, rt)
	ps := rc.do(lo).(*kmsg.ListOffsetsResponse).Topics[0].Partitions
	if ps[0].Offset != 0 || ps[1].Offset != 2 || ps[2].ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("ListOffsets earliest, latest, by time: %+v", ps)
	}
}

// TestFetchRecordsNeverNull: a partition answered without records (at
// the high watermark after the wait, or with an error) carries an empty
// record set, never a null one: librdkafka (kcat) refuses a null set
// ("invalid MessageSetSize -1") and fetches the same offset forever.
func TestFetchRecordsNeverNull(t *testing.T) {
	tc := newTestCluster(t)
	rc := dialRaw(t, startServer(t, tc, DefaultConfig()))
	if err := tc.CreateTopic(context.Background(), "quiet", 1); err != nil {
		t.Fatal(err)
	}
	rc.do(produceRequest("quiet", 0, makeBatch(-1, -1, -1, "a")))
	for _, v := range []int16{4, 11, 12} {
		for _, tcase := range []struct {
			name   string
			offset int64
			code   int16
		}{
			{"at the high watermark", 1, 0},
			{"past the end", 5, kerr.OffsetOutOfRange.Code},
		} {
			req := fetchRequest("quiet", 0, tcase.offset, 1, 10)
			req.SetVersion(v)
			p := rc.do(req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
			if p.ErrorCode != tcase.code || p.RecordBatches == nil {
				t.Errorf("Fetch v%d %s: %v, record set nil %v; want code %d and an empty set", v, tcase.name, kerr.ErrorForCode(p.ErrorCode), p.RecordBatches == nil, tcase.code)
			}
		}
	}
}

// TestUnsupportedRequests: kinds and versions not served are answered in
// kind and the connection keeps working.
func TestUnsupportedRequests(t *testing.T) {
	tc := newTestCluster(t)
	rc := dialRaw(t, startServer(t, tc, DefaultConfig()))
	da := kmsg.NewPtrDescribeACLsRequest()
	da.SetVersion(1)
	if resp := rc.do(da).(*kmsg.DescribeACLsResponse); resp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("DescribeACLs answered code %d, want UNSUPPORTED_VERSION", resp.ErrorCode)
	}
	old := produceRequest("t", 0, makeBatch(-1, -1, -1, "x"))
	old.SetVersion(2)
	corr := rc.send(old)
	if err := rc.recv(new(kmsg.ProduceResponse), corr); err != nil { // v2 has no top-level code: an empty answer
		t.Fatalf("Produce v2: %v", err)
	}
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(5) // newer than served: Kafka answers at v0
	corr = rc.send(av)
	v0 := kmsg.NewPtrApiVersionsResponse()
	v0.SetVersion(0)
	if err := rc.recv(v0, corr); err != nil || v0.ErrorCode != kerr.UnsupportedVersion.Code || len(v0.ApiKeys) != len(supported) {
		t.Fatalf("ApiVersions v5: %v, %+v", err, v0)
	}
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "raw", "1"
	if resp := rc.do(av).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 || len(resp.ApiKeys) != len(supported) {
		t.Fatalf("ApiVersions v3 after unsupported requests: %+v", resp)
	}
}

// TestBadFramesCloseOnlyTheirConnection: a truncated frame and an
// oversized frame each close their own connection; another stays usable.
func TestBadFramesCloseOnlyTheirConnection(t *testing.T) {
	tc := newTestCluster(t)
	cfg := DefaultConfig()
	cfg.MaxFrameBytes, cfg.MaxBatchBytes = 1<<16, 1<<15
	addr := startServer(t, tc, cfg)
	good := dialRaw(t, addr)
	good.do(kmsg.NewPtrApiVersionsRequest())
	for _, frame := range [][]byte{
		binary.BigEndian.AppendUint32(nil, 100), // says 100 bytes, sends 3
		binary.BigEndian.AppendUint32(nil, 1<<20),
	} {
		bad := dialRaw(t, addr)
		if _, err := bad.c.Write(append(frame, 0, 18, 0)); err != nil {
			t.Fatal(err)
		}
		if len(frame) == 4 && binary.BigEndian.Uint32(frame) == 100 {
			bad.c.(interface{ CloseWrite() error }).CloseWrite()
		}
		if _, err := bad.r.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("a bad frame: read %v, want the connection closed", err)
		}
	}
	good.do(kmsg.NewPtrApiVersionsRequest())
}

// TestFetchWaitsForData: a fetch at the end waits on the log and returns
// the batch produced while it waited.
func TestFetchWaitsForData(t *testing.T) {
	tc := newTestCluster(t)
	addr := startServer(t, tc, DefaultConfig())
	if err := tc.CreateTopic(context.Background(), "wait", 1); err != nil {
		t.Fatal(err)
	}
	l, _ := tc.fileLog("wait", 0)
	waits := make(chan int64, 4)
	l.mu.Lock()
	l.waits = waits
	l.mu.Unlock()
	fc := dialRaw(t, addr)
	corr := fc.send(fetchRequest("wait", 0, 0, 1, 600000))
	if off := <-waits; off != 0 { // the fetch is waiting on the log
		t.Fatalf("fetch waits for offset %d, want 0", off)
	}
	if p := producePartition(t, dialRaw(t, addr).do(produceRequest("wait", 0, makeBatch(-1, -1, -1, "late")))); p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(12)
	if err := fc.recv(resp, corr); err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	h, _, err := ParseBatch(p.RecordBatches)
	if err != nil || p.HighWatermark != 1 || h.BaseOffset != 0 || h.Records() != 1 {
		t.Fatalf("fetch after waiting: %+v, header %+v, %v", p, h, err)
	}
}

// TestTLSRefusals: a certificate of another CA fails the handshake; a
// viewer may read but not produce.
func TestTLSRefusals(t *testing.T) {
	l := testPKI(t)
	tc := newTestCluster(t)
	addr := startServer(t, tc, tlsConfig(t, l))
	if err := tc.CreateTopic(context.Background(), "guarded", 1); err != nil {
		t.Fatal(err)
	}

	other := testPKI(t)
	oc, err := tls.Dial("tcp", addr, clientTLSUnverified(t, other.ClientDir(), "operator"))
	if err == nil {
		defer oc.Close()
		b := kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrApiVersionsRequest(), 1)
		_, err = oc.Write(b)
		if err == nil {
			_, err = oc.Read(make([]byte, 1))
		}
	}
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("another CA's certificate: %v, want a TLS alert", err)
	}

	viewer := newClient(t, addr, kgo.DialTLSConfig(clientTLS(t, l.ClientDir(), "viewer")))
	resp, err := viewer.Request(testCtx(t), produceRequest("guarded", 0, makeBatch(-1, -1, -1, "no")))
	if err != nil {
		t.Fatal(err)
	}
	if p := producePartition(t, resp); p.ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("viewer produce: %v, want TOPIC_AUTHORIZATION_FAILED", kerr.ErrorForCode(p.ErrorCode))
	}
	ip, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(testCtx(t), viewer)
	if err != nil || ip.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("viewer InitProducerID: %v, code %d", err, ip.ErrorCode)
	}
	if l, _ := tc.fileLog("guarded", 0); func() bool { a, _ := l.stats(); return a != 0 }() {
		t.Fatal("a viewer's batch was stored")
	}
	fr, err := viewer.Request(testCtx(t), fetchRequest("guarded", 0, 0, 0, 0))
	if err != nil || fr.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("viewer fetch: %v %+v", err, fr)
	}
}

// clientTLSUnverified presents client name's certificate and accepts any
// server: the test is about the server refusing the client.
func clientTLSUnverified(t *testing.T, dir, name string) *tls.Config {
	t.Helper()
	certs, err := pki.LoadClient(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	c := certs.ClientConfig()
	c.VerifyConnection = nil
	return c
}
