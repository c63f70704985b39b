package e2e

import (
	"bufio"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/malachi-log/malachi/pki"
)

// balanced starts kcat -G (librdkafka's balanced consumer) in group on
// topic, from the earliest offset when the group has none, committing
// every 300 ms, and feeds each record it prints to g. It stops with ctx.
func (k kcat) balanced(t *testing.T, ctx context.Context, group, topic string, g *groupRun) {
	t.Helper()
	cmd := k.cmdG(ctx, group, topic)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("kcat -G: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("kcat -G stderr:\n%s", stderr.String())
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), "\t", 4)
			if len(f) != 4 {
				continue
			}
			p, _ := strconv.ParseInt(f[0], 10, 32)
			off, _ := strconv.ParseInt(f[1], 10, 64)
			g.mu.Lock()
			g.consumed[f[2]] = f[3]
			g.times[f[2]]++
			g.at[f[2]] = [2]int64{p, off}
			g.check()
			g.mu.Unlock()
		}
	}()
}

// cmdG is kcat -G group topic with the client's TLS options, printing
// "partition\toffset\tkey\tvalue" per record, unbuffered.
func (k kcat) cmdG(ctx context.Context, group, topic string) *exec.Cmd {
	return exec.CommandContext(ctx, k.bin, "-G", group, "-b", k.brokers, "-q", "-u",
		"-f", "%p\t%o\t%k\t%s\n",
		"-X", "security.protocol=ssl",
		"-X", "ssl.ca.location="+k.client.ca,
		"-X", "ssl.certificate.location="+k.client.cert,
		"-X", "ssl.key.location="+k.client.key,
		"-X", "auto.offset.reset=earliest",
		"-X", "auto.commit.interval.ms=300",
		"-X", "session.timeout.ms=6000",
		"-X", "heartbeat.interval.ms=300",
		topic)
}

// TestKafkaKcatGroupCoordinatorKill: two kcat -G members read a topic
// while the broker coordinating their group is SIGKILLed mid-production:
// every acknowledged record is consumed at least once, as produced, a
// record consumed twice lies at or after the offset committed before the
// kill, and the committed offsets after the kill are at least those before.
func TestKafkaKcatGroupCoordinatorKill(t *testing.T) {
	const group = "kcat-group"
	runKcatGroupKill(t, "kcatgrouped", group, func(c *cluster, ctx context.Context, admin *kgo.Client) int {
		coord := findCoordinator(t, ctx, admin, group)
		t.Logf("killing broker %d, the coordinator of %s", coord, group)
		c.kill(int(coord))
		return int(coord)
	})
}

// TestKafkaKcatGroupLeaderKill: the same two kcat -G members through the
// SIGKILL of a broker leading one of the topic's partitions: their
// fetches move to the partition's next leader, with the same checks.
func TestKafkaKcatGroupLeaderKill(t *testing.T) {
	runKcatGroupKill(t, "kcatled", "kcat-leader-group", func(c *cluster, _ context.Context, _ *kgo.Client) int {
		killed, _ := c.killPartitionLeader("kcatled", 3)
		t.Logf("killed broker %d, a leader of kcatled", killed)
		return killed
	})
}

// runKcatGroupKill runs two kcat -G members of group on topic (3
// partitions, 1,200 records) while victim kills a broker mid-production,
// and checks what they consumed and committed.
func runKcatGroupKill(t *testing.T, topic, group string, victim func(c *cluster, ctx context.Context, admin *kgo.Client) int) {
	bin := kcatBinary(t)
	c := startCluster(t, clusterOpts{n: 4, rf: 3, heal: true, kafka: kafkaTable, grace: liveGrace})
	client := kafkaClientCerts(t, c.certs.Root, "kcat", pki.RoleClient)
	k := kcat{bin: bin, brokers: strings.Join(c.kafkaSeeds(), ","), client: client}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 1200
	createTopic(t, ctx, c, client, topic, 3)
	base := []kgo.Opt{kgo.SeedBrokers(c.kafkaSeeds()...), kgo.DialTLSConfig(client.tls)}
	prod, err := kgo.NewClient(append(base, kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	admin, err := kgo.NewClient(base...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	g := &groupRun{consumed: map[string]string{}, times: map[string]int{}, at: map[string][2]int64{}, done: make(chan struct{})}
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	for range 2 {
		k.balanced(t, kctx, group, topic, g)
	}
	acked := produceN(t, ctx, prod, 0, n/2)
	c.eventually(time.Minute, "kcat's group committed an offset", func() bool {
		for _, o := range committedOffsets(t, ctx, admin, group, topic, 3) {
			if o > 0 {
				return true
			}
		}
		return false
	})
	before := committedOffsets(t, ctx, admin, group, topic, 3)
	killed := victim(c, ctx, admin)
	t.Logf("broker %d killed; %s had committed %v", killed, group, before)
	for key, v := range produceN(t, ctx, prod, n/2, n) {
		acked[key] = v
	}
	g.mu.Lock()
	g.want = acked
	g.check()
	g.mu.Unlock()
	select {
	case <-g.done:
	case <-ctx.Done():
		g.mu.Lock()
		t.Fatalf("kcat's group consumed %d of %d acknowledged records", len(g.consumed), len(acked))
	}
	stop()
	checkGroupRun(t, g, acked, before)
	var seeds []string
	for _, b := range c.brokers {
		if b.id != killed {
			seeds = append(seeds, b.kafka)
		}
	}
	survivor, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTLSConfig(client.tls))
	if err != nil {
		t.Fatal(err)
	}
	defer survivor.Close()
	after := committedOffsets(t, ctx, survivor, group, topic, 3)
	for p, o := range before {
		if after[p] < o {
			t.Fatalf("partition %d: committed %d before the kill, %d after", p, o, after[p])
		}
	}
	t.Logf("kcat -G: %d acknowledged records consumed; committed %v -> %v", len(acked), before, after)
}

// checkGroupRun fails t unless every acknowledged record was consumed as
// produced and every record consumed twice lies at or after its
// partition's offset in before (committed before the fault).
func checkGroupRun(t *testing.T, g *groupRun, acked map[string]string, before map[int32]int64) int {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	twice := 0
	for key, v := range acked {
		if g.consumed[key] != v {
			t.Fatalf("%s consumed as %q, produced as %q", key, g.consumed[key], v)
		}
		if g.times[key] > 1 {
			twice++
			if at := g.at[key]; at[1] < before[int32(at[0])] {
				t.Fatalf("%s (partition %d offset %d) consumed %d times, below the offset committed before the kill (%d)", key, at[0], at[1], g.times[key], before[int32(at[0])])
			}
		}
	}
	return twice
}
