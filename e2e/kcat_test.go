package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/testbed/kafkaload"
)

// kcat runs the kcat binary (librdkafka's client) against a cluster's
// Kafka listeners over mutual TLS with one client certificate.
type kcat struct {
	bin     string
	brokers string // -b: every broker's kafka_listen
	client  kafkaClient
}

// kcatBinary finds kcat on PATH, or skips naming the Debian package.
func kcatBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed: install the Debian package kcat (make deps)")
	}
	return bin
}

// cmd is a kcat command in mode (-P, -C) on topic/partition with the TLS
// options and extra arguments.
func (k kcat) cmd(ctx context.Context, mode, topic string, partition int32, extra ...string) *exec.Cmd {
	args := []string{mode, "-b", k.brokers, "-t", topic, "-p", fmt.Sprint(partition),
		"-X", "security.protocol=ssl",
		"-X", "ssl.ca.location=" + k.client.ca,
		"-X", "ssl.certificate.location=" + k.client.cert,
		"-X", "ssl.key.location=" + k.client.key,
	}
	return exec.CommandContext(ctx, k.bin, append(args, extra...)...)
}

// producer starts kcat -P on topic/partition with acks=all and the
// idempotent producer, reading one record per line ("key\tvalue") from
// the returned writer; wait closes it and returns kcat's stderr and exit error. kcat
// exits non-zero when any record's delivery failed, so a nil error means
// every record written was acknowledged.
func (k kcat) producer(ctx context.Context, topic string, partition int32) (io.WriteCloser, func() (string, error), error) {
	cmd := k.cmd(ctx, "-P", topic, partition, "-K", `\t`, "-X", "acks=all", "-X", "enable.idempotence=true")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return in, func() (string, error) {
		in.Close()
		err := cmd.Wait()
		return stderr.String(), err
	}, nil
}

// consume reads topic/partition from the beginning to its end as
// "offset key value" lines.
func (k kcat) consume(ctx context.Context, topic string, partition int32) (string, string, error) {
	cmd := k.cmd(ctx, "-C", topic, partition, "-e", "-o", "beginning", "-f", "%o %k %s\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// kcatRecord is record i of partition p: printable, distinct, of varying
// length, without a newline or a tab; kcatKey is its key (kafkaload's,
// producer p).
func kcatRecord(p int32, i int) string {
	pad := strings.Repeat(string(rune('a'+(i%26))), 40+(i*7)%200)
	return fmt.Sprintf("kcat p%d r%06d %s|%x", p, i, pad, i*i)
}

func kcatKey(p int32, i int) string { return string(kafkaload.Key(int(p), i)) }

// parseKcat reads kcat -C's "offset key value" lines of topic/partition
// back into records, in the order printed.
func parseKcat(topic string, partition int32, out string) ([]kafkaload.Record, error) {
	var recs []kafkaload.Record
	for line := range strings.Lines(out) {
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), " ", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("kcat -C line %q: want offset, key and value", line)
		}
		off, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("kcat -C line %q: %w", line, err)
		}
		recs = append(recs, kafkaload.NewRecord(topic, partition, off, []byte(f[1]), []byte(f[2])))
	}
	return recs, nil
}

// TestKafkaKcatProduceKillConsume: kcat (librdkafka, acks=all, idempotent)
// produces over mutual TLS to each partition of a topic on a four-broker
// cluster of rf 3 with 64 KiB segments, one process per partition reading
// records from a pipe; a broker that leads a partition is SIGKILLed while
// they write; every kcat exits 0 (every record acknowledged); the killed
// broker's sealed segments heal to three replicas that do not name it;
// then kcat -C reads each partition from the beginning and kafkaload's
// checker finds every record at offsets 0.. in the order written, byte
// for byte, once.
func TestKafkaKcatProduceKillConsume(t *testing.T) {
	bin := kcatBinary(t)
	c := startCluster(t, clusterOpts{n: 4, rf: 3, heal: true, kafka: kafkaTable})
	client := kafkaClientCerts(t, c.certs.Root, "kcat", pki.RoleClient)
	k := kcat{bin: bin, brokers: strings.Join(c.kafkaSeeds(), ","), client: client}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const topic, partitions, n = "kcat", int32(3), 1200
	createTopic(t, ctx, c, client, topic, partitions)

	type producer struct {
		in   io.WriteCloser
		wait func() (string, error)
	}
	prods := make([]producer, partitions)
	for p := range partitions {
		in, wait, err := k.producer(ctx, topic, p)
		if err != nil {
			t.Fatal(err)
		}
		prods[p] = producer{in, wait}
	}
	write := func(from, to int) {
		var wg sync.WaitGroup
		for p := range partitions {
			wg.Go(func() {
				var b strings.Builder
				for i := from; i < to; i++ {
					b.WriteString(kcatKey(p, i) + "\t" + kcatRecord(p, i) + "\n")
				}
				if _, err := io.WriteString(prods[p].in, b.String()); err != nil {
					t.Errorf("partition %d: writing records %d..%d to kcat: %v", p, from, to, err)
				}
			})
		}
		wg.Wait()
	}
	write(0, n/3)
	// The kill comes once most of the first third is stored (kcat holds a
	// line back until it reads past its delimiter), the rest unwritten.
	c.eventually(time.Minute, "the first quarter of the records stored", func() bool {
		ends := partitionEnds(ctx, client, c.kafkaSeeds(), topic, partitions)
		for p := range partitions {
			if ends[p] < n/4 {
				return false
			}
		}
		return true
	})
	killed, victims := c.killPartitionLeader(topic, partitions)
	write(n/3, n)
	for p := range partitions {
		if stderr, err := prods[p].wait(); err != nil {
			t.Fatalf("kcat -P partition %d: %v (a record was not acknowledged):\n%s", p, err, stderr)
		}
	}
	c.waitKafkaHealed(killed, victims)
	// kcat exited 0: every record was acknowledged, each partition's in
	// the order written, so at offsets 0..n-1.
	var acked, read []kafkaload.Record
	for p := range partitions {
		for i := range n {
			acked = append(acked, kafkaload.NewRecord(topic, p, int64(i), []byte(kcatKey(p, i)), []byte(kcatRecord(p, i))))
		}
		out, stderr, err := k.consume(ctx, topic, p)
		if err != nil {
			t.Fatalf("kcat -C partition %d: %v\n%s", p, err, stderr)
		}
		recs, err := parseKcat(topic, p, out)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != n {
			t.Errorf("partition %d: kcat -C read %d records, want %d", p, len(recs), n)
		}
		read = append(read, recs...)
	}
	checkRecords(t, acked, read)
	t.Logf("kcat: %d records per partition acknowledged and read back identical, in order; broker %d's %d partition segments healed", n, killed, len(victims))
}

// createTopic creates topic with the given partitions through the Kafka
// listener (CreateTopics) as client.
func createTopic(t *testing.T, ctx context.Context, c *cluster, client kafkaClient, topic string, partitions int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaSeeds()...), kgo.DialTLSConfig(client.tls))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, -1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("CreateTopics %s: error code %d: %v", topic, code, resp.Topics[0].ErrorMessage)
	}
}

// partitionEnds asks for the end offset (high watermark) of each
// partition of topic; a partition that does not answer is absent.
func partitionEnds(ctx context.Context, client kafkaClient, seeds []string, topic string, partitions int32) map[int32]int64 {
	out := map[int32]int64{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTLSConfig(client.tls))
	if err != nil {
		return out
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, cl)
	if err != nil {
		return out
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out
}
