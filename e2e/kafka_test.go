package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	be "encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/testbed/kafkaload"
)

// kafkaTable is the [kafka] table of the Kafka tests: small segments, so
// that production rolls many.
const kafkaTable = "segment_bytes = 65536\nnum_partitions = 3\n"

// kafkaClient is a client certificate of the cluster CA as files (what
// kcat reads) and as a dialer config (what kgo takes).
type kafkaClient struct {
	ca, cert, key string
	tls           *tls.Config
}

// kafkaClientCerts creates a client certificate named name of the given
// role, signed by the CA under caRoot, in a directory of its own.
func kafkaClientCerts(t *testing.T, caRoot, name string, role pki.Role) kafkaClient {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "client")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(caRoot, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pki.CACert), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	o := pki.Options{Dir: dir, CACert: filepath.Join(caRoot, pki.CACert), CAKey: filepath.Join(caRoot, pki.CAKey)}
	if err := pki.CreateClient(o, name, role); err != nil {
		t.Fatal(err)
	}
	certs, err := pki.LoadClient(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := certs.ClientConfig()
	cfg.ServerName = "127.0.0.1"
	return kafkaClient{ca: filepath.Join(dir, pki.CACert), cert: filepath.Join(dir, pki.ClientCert(name)),
		key: filepath.Join(dir, pki.ClientKey(name)), tls: cfg}
}

// kafkaClientTLS is the dialer config of kafkaClientCerts.
func kafkaClientTLS(t *testing.T, caRoot, name string, role pki.Role) *tls.Config {
	t.Helper()
	return kafkaClientCerts(t, caRoot, name, role).tls
}

func (c *cluster) kafkaSeeds() []string {
	var out []string
	for _, b := range c.brokers {
		out = append(out, b.kafka)
	}
	return out
}

// partitionLeader is the first replica of the active segment of
// topic/p in broker id's metadata, 0 when there is none.
func (c *cluster) partitionLeader(id int, topic string, p int32) meta.BrokerID {
	snap, err := c.metadata(id)
	if err != nil {
		return 0
	}
	chain := meta.NewView(snap).Chain(topic, p)
	if len(chain) == 0 || chain[len(chain)-1].Sealed {
		return 0
	}
	return chain[len(chain)-1].Replicas[0]
}

// TestKafkaProduceKillConsume: franz-go's kgo with its defaults
// (idempotent, acks=all) produces to a four-broker cluster of rf 3 with
// 64 KiB segments; a broker that leads a partition is killed mid-run;
// every acknowledged record is then consumed back from offset 0, byte for
// byte, in offset order, once; and the killed broker's sealed segments
// heal to three replicas that do not name it.
func TestKafkaProduceKillConsume(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 4, rf: 3, heal: true, kafka: kafkaTable})
	tlsCfg := kafkaClientTLS(t, c.certs.Root, "kafka-e2e", pki.RoleOperator)
	const topic, n = "orders", 2000
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaSeeds()...), kgo.DialTLSConfig(tlsCfg), kgo.DefaultProduceTopic(topic),
		kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var mu sync.Mutex
	var acked []kafkaload.Record
	var failed []error
	var wg sync.WaitGroup
	killAt := n / 3
	var killed int
	var victims []meta.SegmentID // partition segments the killed broker held
	for i := range n {
		if i == killAt {
			// Wait for what was produced so far, then kill a partition's
			// leader.
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			killed, victims = c.killPartitionLeader(topic, 3)
		}
		value := bytes.Repeat([]byte{byte(i)}, 300)
		copy(value, fmt.Sprintf("record %06d|", i))
		r := &kgo.Record{Key: []byte(fmt.Sprintf("key-%06d", i)), Value: value}
		wg.Add(1)
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, err)
				return
			}
			acked = append(acked, kafkaload.NewRecord(r.Topic, r.Partition, r.Offset, r.Key, r.Value))
		})
	}
	wg.Wait()
	total := len(acked)
	t.Logf("%d records acknowledged, %d failed (first: %v)", total, len(failed), func() error {
		if len(failed) > 0 {
			return failed[0]
		}
		return nil
	}())
	if total == 0 {
		t.Fatal("nothing acknowledged")
	}
	consumeAll(t, ctx, tlsCfg, c.kafkaSeeds(), topic, acked)
	c.waitKafkaHealed(killed, victims)
	c.clientLatencyLearned(killed)
}

// clientLatencyLearned: the brokers' catch-up rate is "auto" (the
// default) and at least one broker learned an idle client p99 from its
// Kafka listener's Produce and Fetch handling (the pacer's latency
// signal is wired), waiting for one idle step after the traffic.
func (c *cluster) clientLatencyLearned(killed int) {
	c.t.Helper()
	c.eventually(30*time.Second, "a broker's auto backfill rate learned an idle client p99", func() bool {
		for _, b := range c.brokers {
			if b.id == killed {
				continue
			}
			var st plugin.Status
			if err := c.get(b.id, "/v1/status", &st); err != nil || st.BackfillRate == nil {
				continue
			}
			if st.BackfillRate.Mode != "auto" {
				c.t.Fatalf("broker %d's backfill rate is %+v: the default is auto", b.id, *st.BackfillRate)
			}
			if st.BackfillRate.BaselineP99Seconds > 0 {
				c.t.Logf("broker %d: backfill rate %+v", b.id, *st.BackfillRate)
				return true
			}
		}
		return false
	})
}

// consumeAll reads every partition of topic from offset 0 up to its high
// watermark (kafkaload's consumer) and checks it against acked with the
// one acknowledged-record checker (kafkaload.Check): every acknowledged
// record at its offset, byte-identical; offsets increasing within a
// partition; no key twice.
func consumeAll(t *testing.T, ctx context.Context, tlsCfg *tls.Config, seeds []string, topic string, acked []kafkaload.Record) {
	t.Helper()
	cfg := kafkaload.DefaultConfig()
	cfg.Seeds, cfg.TLS, cfg.Topic = seeds, tlsCfg, topic
	read, ends, err := cfg.Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, acked, read)
	t.Logf("consumed %d records, high watermarks %v", len(read), ends)
}

// checkRecords fails t with the checker's violations.
func checkRecords(t *testing.T, acked, read []kafkaload.Record) {
	t.Helper()
	res := kafkaload.Check(acked, read)
	if !res.OK() || res.ReadBack != len(acked) {
		t.Fatalf("%d acknowledged, %d read back, %d lost, %d duplicated, %d out of order:\n%s",
			res.Acknowledged, res.ReadBack, res.Lost, res.Duplicated, res.OutOfOrder, strings.Join(res.Violations, "\n"))
	}
}

// killPartitionLeader SIGKILLs a broker that leads one of topic's first
// partitions and is not the control plane's leader, and returns it and
// the partition segments it held.
func (c *cluster) killPartitionLeader(topic string, partitions int32) (int, []meta.SegmentID) {
	c.t.Helper()
	raftLeader := c.waitLeader(10 * time.Second)
	killed := 0
	for p := int32(0); p < partitions && killed == 0; p++ {
		if l := c.partitionLeader(raftLeader, topic, p); l != 0 && int(l) != raftLeader {
			killed = int(l)
		}
	}
	if killed == 0 {
		c.t.Fatalf("no partition of %s is led by a broker other than the control plane's leader %d", topic, raftLeader)
	}
	snap, err := c.metadata(raftLeader)
	if err != nil {
		c.t.Fatal(err)
	}
	var victims []meta.SegmentID
	for _, s := range snap.Segments {
		if _, _, _, ok := meta.ParsePartitionSegment(s.ID); ok && s.HasReplica(meta.BrokerID(killed)) {
			victims = append(victims, s.ID)
		}
	}
	if len(victims) == 0 {
		c.t.Fatalf("broker %d leads a partition of %s but holds no partition segment", killed, topic)
	}
	c.t.Logf("killing broker %d, which leads a partition of %s and holds %d partition segments", killed, topic, len(victims))
	c.kill(killed)
	return killed, victims
}

// waitKafkaHealed waits until every sealed partition segment has three
// replicas, none of them the killed broker, and every victim (a segment
// it held) is sealed.
func (c *cluster) waitKafkaHealed(killed int, victims []meta.SegmentID) {
	c.t.Helper()
	dead := meta.BrokerID(killed)
	last := ""
	c.eventually(3*time.Minute, fmt.Sprintf("sealed segments of broker %d healed to 3 other replicas", killed), func() bool {
		snap, err := c.metadata(c.anyAlive(killed))
		if err != nil {
			return false
		}
		for _, id := range victims {
			if s, ok := snap.Segment(id); !ok || !s.Sealed {
				return false
			}
		}
		for _, s := range snap.Segments {
			if _, _, _, ok := meta.ParsePartitionSegment(s.ID); !ok || !s.Sealed {
				continue
			}
			if s.HasReplica(dead) || len(s.Replicas) != 3 {
				if why := fmt.Sprintf("%s: replicas %v", s.ID, s.Replicas); why != last {
					c.t.Logf("not healed yet: %s", why)
					last = why
				}
				return false
			}
		}
		return true
	})
}

// TestKafkaRefusals: a produce to a broker that does not lead the
// partition is answered NOT_LEADER_OR_FOLLOWER; a client certificate of
// another CA is refused at the handshake.
func TestKafkaRefusals(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 3, rf: 3, kafka: kafkaTable})
	tlsCfg := kafkaClientTLS(t, c.certs.Root, "kafka-e2e", pki.RoleOperator)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaSeeds()...), kgo.DialTLSConfig(tlsCfg), kgo.DefaultProduceTopic("refusals"),
		kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("first")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	leader := c.partitionLeader(c.waitLeader(10*time.Second), "refusals", 0)
	follower := 1
	if leader == 1 {
		follower = 2
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "refusals"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, rawBatch("to a follower")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.Broker(follower).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce to follower %d (leader %d): %v, want NOT_LEADER_OR_FOLLOWER", follower, leader, kerr.ErrorForCode(code))
	}

	other, err := pki.CreateLocal(filepath.Join(t.TempDir(), "other"), []meta.BrokerID{1}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	foreign := kafkaClientTLS(t, other.Root, "intruder", pki.RoleOperator)
	foreign.VerifyConnection = nil // the test is about the broker refusing the client
	fc, err := kgo.NewClient(kgo.SeedBrokers(c.b(1).kafka), kgo.DialTLSConfig(foreign), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
	defer mcancel()
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(mctx, fc); err == nil {
		t.Fatal("a client certificate of another CA was served")
	}
}

// TestKafkaClientRole: a certificate of role client (`malachi cert
// create-client NAME --role client`) produces with kgo's defaults and
// consumes every record back; the same role is refused, naming the role
// the route needs and the one it has, on an admin route that changes
// state, and nothing changes.
func TestKafkaClientRole(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 3, rf: 3, kafka: kafkaTable})
	tlsCfg := kafkaClientTLS(t, c.certs.Root, "app", pki.RoleClient)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, n = "apps", 300
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaSeeds()...), kgo.DialTLSConfig(tlsCfg), kgo.DefaultProduceTopic(topic),
		kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "key-%06d", i), Value: fmt.Appendf(nil, "client record %d", i)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce as role client: %v", err)
	}
	var acked []kafkaload.Record
	for _, r := range recs {
		acked = append(acked, kafkaload.NewRecord(r.Topic, r.Partition, r.Offset, r.Key, r.Value))
	}
	consumeAll(t, ctx, tlsCfg, c.kafkaSeeds(), topic, acked)

	certs, err := pki.LoadClient(c.certs.ClientDir(), string(pki.RoleClient))
	if err != nil {
		t.Fatal(err)
	}
	rc := rpc.NewClient(certs, admin.Codes, 10*time.Second)
	defer rc.Close()
	before, err := c.metadata(c.waitLeader(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	err = admin.New(c.b(1).admin, rc, false).Call(ctx, "POST", "/v1/load", map[string]any{"segments": 1}, nil)
	if !errors.Is(err, rpc.ErrForbidden) || !strings.Contains(err.Error(), "needs a certificate of role operator") || !strings.Contains(err.Error(), "has role client") {
		t.Fatalf("POST /v1/load as role client: %v, want forbidden naming the role needed and the one held", err)
	}
	after, err := c.metadata(c.waitLeader(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Segments) != len(before.Segments) {
		t.Fatalf("a refused load changed the segments: %d -> %d", len(before.Segments), len(after.Segments))
	}
}

// rawBatch is a record batch v2 of one record, without a producer id.
func rawBatch(value string) []byte {
	r := kmsg.NewRecord()
	r.Value = []byte(value)
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	recs := r.AppendTo(nil)
	rb := kmsg.NewRecordBatch()
	rb.Length = int32(61 - 12 + len(recs))
	rb.PartitionLeaderEpoch, rb.Magic = -1, 2
	rb.LastOffsetDelta, rb.NumRecords = 0, 1
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
	rb.Records = recs
	b := rb.AppendTo(nil)
	be.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}
