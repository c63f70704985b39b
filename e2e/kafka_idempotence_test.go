package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	malachid "github.com/malachi-log/malachi/broker"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/testbed/kafkaload"
)

// TestKafkaIdempotentRetryAcrossKill: the kill lands where idempotence is
// needed, certainly. The broker leading a partition has its produce hold
// armed (fault_injection's POST /v1/faults/hold-produce): the next batch
// it stores on every replica gets no answer. Once its GET says a batch is
// held, the test SIGKILLs that broker; kgo (idempotent, acks=all) retries
// the batch, with its sequence, against the partition's new leader, which
// must answer it as a duplicate: the record is acknowledged at the
// offset the dead leader stored it at, and reading the partition back
// finds it there once. The test fails when the hold never fired (the kill
// would not have landed between the store and the answer).
func TestKafkaIdempotentRetryAcrossKill(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 4, rf: 3, heal: true, kafka: kafkaTable, grace: liveGrace})
	client := kafkaClientCerts(t, c.certs.Root, "kafka-e2e", pki.RoleOperator)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic = "held"
	createTopic(t, ctx, c, client, topic, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaSeeds()...), kgo.DialTLSConfig(client.tls), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var acked []kafkaload.Record
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			r := &kgo.Record{Key: fmt.Appendf(nil, "key-%04d", i), Value: fmt.Appendf(nil, "value %04d", i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			acked = append(acked, kafkaload.NewRecord(r.Topic, r.Partition, r.Offset, r.Key, r.Value))
		}
	}
	produce(0, 20) // the producer has its id and sequence on the partition
	var leader int
	c.eventually(30*time.Second, topic+"/0 led by a broker", func() bool {
		leader = int(c.partitionLeader(c.waitLeader(10*time.Second), topic, 0))
		return leader != 0
	})
	path := "/v1/faults/hold-produce/" + topic + "/0"
	if err := c.post(leader, path, nil, nil); err != nil {
		t.Fatalf("arming broker %d's produce hold: %v", leader, err)
	}
	heldRec := &kgo.Record{Key: []byte("the-held-record"), Value: []byte("stored by a leader that died before answering")}
	answered := make(chan error, 1)
	cl.Produce(ctx, heldRec, func(_ *kgo.Record, err error) { answered <- err })
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	var held malachid.HeldBatch
	err = c.b(leader).slow.Call(wctx, http.MethodGet, path, nil, &held)
	wcancel()
	if err != nil {
		t.Fatalf("broker %d's produce hold never fired (the kill would not land between the replicas storing the batch and the answer): %v", leader, err)
	}
	select {
	case err := <-answered:
		t.Fatalf("the held record was answered (%v) before the kill: the hold did not hold", err)
	default: // held, as the route said
	}
	t.Logf("broker %d holds the answer of %s/%d at offset %d (%d records); killing it", leader, held.Topic, held.Partition, held.BaseOffset, held.Records)
	c.kill(leader)
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("the retried record after the kill: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the held record was never acknowledged after its leader's death")
	}
	if heldRec.Offset != held.BaseOffset {
		t.Fatalf("the retry was acknowledged at offset %d, the dead leader stored it at %d: the new leader stored it again instead of answering a duplicate",
			heldRec.Offset, held.BaseOffset)
	}
	acked = append(acked, kafkaload.NewRecord(heldRec.Topic, heldRec.Partition, heldRec.Offset, heldRec.Key, heldRec.Value))
	produce(20, 40) // the producer goes on after the duplicate answer
	cfg := kafkaload.DefaultConfig()
	cfg.Seeds, cfg.TLS, cfg.Topic = c.kafkaSeeds(), client.tls, topic
	read, ends, err := cfg.Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	times := 0
	for _, r := range read {
		if r.Key == string(heldRec.Key) {
			times++
		}
	}
	if times != 1 {
		t.Fatalf("the held record is in the partition %d times (high watermarks %v), want once", times, ends)
	}
	checkRecords(t, acked, read)
	t.Logf("the retry of the held batch was answered at offset %d, stored once; %d records read back, high watermarks %v", heldRec.Offset, len(read), ends)
}
