package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/plugin"
)

// liveGrace is the heal grace of the tests of this file: a Kafka listener
// counts a broker dead after half of it without an answer, 2 s, which a
// broker stalled by a loaded test machine does not reach.
const liveGrace = "4s"

// metadataAt asks the Kafka listener at addr, and only it, for topic's
// metadata.
func metadataAt(t *testing.T, ctx context.Context, addr string, tlsCfg *tls.Config, topic string) *kmsg.MetadataResponse {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(tlsCfg))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		t.Fatalf("Metadata from %s: %v", addr, err)
	}
	return resp.(*kmsg.MetadataResponse)
}

// checkListed fails t unless md lists exactly the brokers want and no
// partition leader outside them.
func checkListed(t *testing.T, from int, md *kmsg.MetadataResponse, want []int32) {
	t.Helper()
	var got []int32
	for _, b := range md.Brokers {
		got = append(got, b.NodeID)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("broker %d's Metadata lists brokers %v, want %v", from, got, want)
	}
	for _, tp := range md.Topics {
		for _, p := range tp.Partitions {
			if p.Leader >= 0 && !slices.Contains(want, p.Leader) {
				t.Fatalf("broker %d's Metadata names %d, not live, the leader of %s/%d", from, p.Leader, *tp.Topic, p.Partition)
			}
		}
	}
}

// produceN produces records key-<from>..key-<to-1> to topic and waits
// for each; it returns the acknowledged ones, key to value.
func produceN(t *testing.T, ctx context.Context, cl *kgo.Client, from, to int) map[string]string {
	t.Helper()
	var mu sync.Mutex
	acked := map[string]string{}
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		r := &kgo.Record{Key: fmt.Appendf(nil, "key-%06d", i), Value: fmt.Appendf(nil, "value %06d %x", i, i*i)}
		wg.Add(1)
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err == nil {
				mu.Lock()
				acked[string(r.Key)] = string(r.Value)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked
}

// TestKafkaMetadataLiveBrokers: a killed broker is left out of every
// live broker's Metadata (brokers and partition leaders) by the time heal
// counts it dead, and listed again once it answers after a restart.
func TestKafkaMetadataLiveBrokers(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 4, rf: 3, heal: true, kafka: kafkaTable, grace: liveGrace})
	tlsCfg := kafkaClientTLS(t, c.certs.Root, "kafka-e2e", pki.RoleOperator)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "living"
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaSeeds()...), kgo.DialTLSConfig(tlsCfg), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if len(produceN(t, ctx, prod, 0, 30)) != 30 {
		t.Fatal("not every record acknowledged")
	}
	all := []int32{1, 2, 3, 4}
	checkListed(t, 1, metadataAt(t, ctx, c.b(1).kafka, tlsCfg, topic), all)
	feed := c.leaderFeed()
	killed, _ := c.killPartitionLeader(topic, 3)
	c.untilPass(feed, time.Minute, fmt.Sprintf("a heal pass counting broker %d dead", killed), func(p *plugin.PassRecord) (bool, string) {
		return slices.Contains(p.Report.Dead, meta.BrokerID(killed)), passLine(p)
	})
	live := slices.DeleteFunc(slices.Clone(all), func(id int32) bool { return id == int32(killed) })
	marks := map[int]int64{}
	for _, id := range live {
		checkListed(t, int(id), metadataAt(t, ctx, c.b(int(id)).kafka, tlsCfg, topic), live)
		marks[int(id)] = c.logSize(int(id))
	}
	c.start(killed)
	for _, id := range live {
		c.eventually(time.Minute, fmt.Sprintf("broker %d logged broker %d answering again", id, killed), func() bool {
			return len(c.logLines(int(id), marks[int(id)], "answers again", fmt.Sprintf(`"peer_broker":%d`, killed))) > 0
		})
		checkListed(t, int(id), metadataAt(t, ctx, c.b(int(id)).kafka, tlsCfg, topic), all)
	}
}

// findCoordinator is the node id coordinating group, asked through cl.
func findCoordinator(t *testing.T, ctx context.Context, cl *kgo.Client, group string) int32 {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey, req.CoordinatorKeys = group, []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("FindCoordinator %s: %v", group, err)
	}
	if len(resp.Coordinators) > 0 {
		if c := resp.Coordinators[0]; c.ErrorCode == 0 {
			return c.NodeID
		}
		t.Fatalf("FindCoordinator %s: %+v", group, resp.Coordinators[0])
	}
	if resp.ErrorCode != 0 {
		t.Fatalf("FindCoordinator %s: code %d", group, resp.ErrorCode)
	}
	return resp.NodeID
}

// coordinatorMoving says err is kgo's "the coordinator it was named is not
// in its broker list", or the protocol's coordinator errors.
func coordinatorMoving(err error) bool {
	return strings.Contains(err.Error(), "did not reply with that broker in the broker list") ||
		errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.CoordinatorNotAvailable)
}

// committedOffsets is group's committed offsets of topic's partitions
// 0..n-1 (-1: none), asked through cl.
func committedOffsets(t *testing.T, ctx context.Context, cl *kgo.Client, group, topic string, n int32) map[int32]int64 {
	t.Helper()
	var parts []int32
	for p := range n {
		parts = append(parts, p)
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: topic, Partitions: parts}}
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group, rg.Topics = group, []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: parts}}
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(ctx, cl)
	for err != nil && coordinatorMoving(err) && ctx.Err() == nil {
		// For up to half the heal grace after a broker's death the
		// brokers' views of the living differ: one may still name the
		// dead coordinator that the client's metadata no longer lists.
		// kgo retries this itself in a group's own requests; a raw
		// request asks again until the coordinator has moved.
		t.Logf("OffsetFetch %s: %v (the coordinator is moving; asking again)", group, err)
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
		resp, err = req.RequestWith(ctx, cl)
	}
	if err != nil {
		t.Fatalf("OffsetFetch %s: %v", group, err)
	}
	out := map[int32]int64{}
	if len(resp.Groups) > 0 {
		g := resp.Groups[0]
		if g.ErrorCode != 0 {
			t.Fatalf("OffsetFetch %s: group code %d", group, g.ErrorCode)
		}
		for _, tp := range g.Topics {
			for _, p := range tp.Partitions {
				out[p.Partition] = p.Offset
			}
		}
		return out
	}
	if resp.ErrorCode != 0 {
		t.Fatalf("OffsetFetch %s: code %d", group, resp.ErrorCode)
	}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			out[p.Partition] = p.Offset
		}
	}
	return out
}

// groupRun is a consumer group of kgo members reading a topic: every
// record consumed, key to value and times, and done closed once every
// record of want has been consumed after want is final.
type groupRun struct {
	mu       sync.Mutex
	consumed map[string]string   // protected by mu
	times    map[string]int      // protected by mu
	at       map[string][2]int64 // partition and offset of each; protected by mu
	want     map[string]string   // protected by mu; nil until final
	done     chan struct{}
	closed   bool // protected by mu
}

// check closes done when every wanted record was consumed; under mu.
func (g *groupRun) check() {
	if g.closed || g.want == nil {
		return
	}
	for k := range g.want {
		if _, ok := g.consumed[k]; !ok {
			return
		}
	}
	g.closed = true
	close(g.done)
}

// member polls cl until ctx ends, recording what it consumes.
func (g *groupRun) member(ctx context.Context, cl *kgo.Client) {
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		g.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			g.consumed[string(r.Key)] = string(r.Value)
			g.times[string(r.Key)]++
			g.at[string(r.Key)] = [2]int64{int64(r.Partition), r.Offset}
		})
		g.check()
		g.mu.Unlock()
	}
}

// startMembers starts two kgo members of group reading topic (committing
// every 300 ms) and waits until both hold partitions, so that no record
// is read twice for the group's first rebalances; committed is closed at
// the group's first commit past offset 0. stop ends the members' polls
// and returns once they stopped.
func startMembers(t *testing.T, ctx context.Context, base []kgo.Opt, topic, group string) (g *groupRun, committed <-chan struct{}, stop func()) {
	t.Helper()
	g = &groupRun{consumed: map[string]string{}, times: map[string]int{}, at: map[string][2]int64{}, done: make(chan struct{})}
	first := make(chan struct{})
	var once sync.Once
	pollCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	assigned := make(chan int, 2)
	for member := range 2 {
		var held sync.Once
		cl, err := kgo.NewClient(append(slices.Clone(base), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
				if len(a[topic]) > 0 {
					held.Do(func() { assigned <- member })
				}
			}),
			kgo.AutoCommitInterval(300*time.Millisecond), kgo.HeartbeatInterval(300*time.Millisecond), kgo.SessionTimeout(6*time.Second),
			kgo.AutoCommitCallback(func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				if err != nil {
					return
				}
				for i, tp := range resp.Topics {
					for j, p := range tp.Partitions {
						if p.ErrorCode != 0 {
							t.Logf("member %d (%s, generation %d): commit of %s/%d: %v", member, req.MemberID, req.Generation, tp.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
						} else if req.Topics[i].Partitions[j].Offset > 0 {
							once.Do(func() { close(first) })
						}
					}
				}
			}))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		wg.Add(1)
		go func() { defer wg.Done(); g.member(pollCtx, cl) }()
	}
	for range 2 {
		select {
		case <-assigned:
		case <-ctx.Done():
			t.Fatal("the members were not both assigned partitions")
		}
	}
	return g, first, func() { cancel(); wg.Wait() }
}

// groupKill is what runGroupKill saw: the broker killed, the records
// acknowledged, the group's committed offsets just before the kill and
// after it (read through a client that never knew the killed broker).
type groupKill struct {
	killed        int
	acked         map[string]string
	before, after map[int32]int64
	survivor      *kgo.Client
}

// runGroupKill runs a consumer group of two kgo members (startMembers) on
// a topic of 3 partitions of a four-broker cluster while the broker that
// victim picks and returns is SIGKILLed mid-production: every
// acknowledged record is consumed at least once, each as produced, a
// record consumed twice lies at or after the offset its partition had
// committed before the kill, and the committed offsets read after the
// kill are at least those read just before it.
func runGroupKill(t *testing.T, topic, group string, victim func(c *cluster, ctx context.Context, admin *kgo.Client) int) groupKill {
	c := startCluster(t, clusterOpts{n: 4, rf: 3, heal: true, kafka: kafkaTable, grace: liveGrace})
	tlsCfg := kafkaClientTLS(t, c.certs.Root, "kafka-e2e", pki.RoleClient)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	const n = 1200
	base := []kgo.Opt{kgo.SeedBrokers(c.kafkaSeeds()...), kgo.DialTLSConfig(tlsCfg)}
	prod, err := kgo.NewClient(append(slices.Clone(base), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	admin, err := kgo.NewClient(base...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	createTopic(t, ctx, c, kafkaClient{tls: tlsCfg}, topic, 3)
	g, committed, stop := startMembers(t, ctx, base, topic, group)
	defer stop()
	r := groupKill{acked: produceN(t, ctx, prod, 0, n/2)}
	select {
	case <-committed:
	case <-ctx.Done():
		t.Fatal("the group committed nothing")
	}
	r.before = committedOffsets(t, ctx, admin, group, topic, 3)
	r.killed = victim(c, ctx, admin)
	for k, v := range produceN(t, ctx, prod, n/2, n) {
		r.acked[k] = v
	}
	g.mu.Lock()
	g.want = r.acked
	g.check()
	g.mu.Unlock()
	select {
	case <-g.done:
	case <-ctx.Done():
		g.mu.Lock()
		t.Fatalf("the group consumed %d of %d acknowledged records", len(g.consumed), len(r.acked))
	}
	stop()
	if len(r.acked) < n/2 {
		t.Fatalf("only %d of %d records acknowledged", len(r.acked), n)
	}
	twice := checkGroupRun(t, g, r.acked, r.before)
	var seeds []string // a client that never knew the killed broker
	for _, b := range c.brokers {
		if b.id != r.killed {
			seeds = append(seeds, b.kafka)
		}
	}
	r.survivor, err = kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTLSConfig(tlsCfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.survivor.Close)
	r.after = committedOffsets(t, ctx, r.survivor, group, topic, 3)
	for p, o := range r.before {
		if r.after[p] < o {
			t.Fatalf("partition %d: committed %d before the kill, %d after", p, o, r.after[p])
		}
	}
	t.Logf("%d acknowledged records consumed, %d of them more than once (each after the offset committed before the kill); committed %v -> %v",
		len(r.acked), twice, r.before, r.after)
	return r
}

// TestKafkaGroupCoordinatorKill: runGroupKill with the broker coordinating
// the group killed; the group moves to another broker.
func TestKafkaGroupCoordinatorKill(t *testing.T) {
	const group = "e2e-group"
	var coord int32
	r := runGroupKill(t, "grouped", group, func(c *cluster, ctx context.Context, admin *kgo.Client) int {
		coord = findCoordinator(t, ctx, admin, group)
		t.Logf("killing broker %d, the coordinator of %s", coord, group)
		c.kill(int(coord))
		return int(coord)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if moved := findCoordinator(t, ctx, r.survivor, group); moved == coord {
		t.Fatalf("the group is still coordinated by the killed broker %d", coord)
	} else {
		t.Logf("coordinator %d -> %d", coord, moved)
	}
}

// TestKafkaGroupLeaderKill: runGroupKill with a broker leading one of the
// topic's partitions (and not the control plane's leader) killed: the
// members' fetches move to the partition's next leader, and no record
// below the committed offsets is read again.
func TestKafkaGroupLeaderKill(t *testing.T) {
	runGroupKill(t, "led", "e2e-leader-group", func(c *cluster, _ context.Context, _ *kgo.Client) int {
		killed, _ := c.killPartitionLeader("led", 3)
		return killed
	})
}
