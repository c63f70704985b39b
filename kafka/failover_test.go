package kafka

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// movingCluster is one of two brokers sharing testCluster's partition
// logs: broker self leads them while lead says so.
type movingCluster struct {
	*testCluster
	self  int32
	addrs *[2]BrokerAddr // both listeners
	mu    *sync.Mutex
	lead  *int32 // the leading broker; protected by mu
}

func (m movingCluster) Self() int32 { return m.self }

func (m movingCluster) Brokers() []BrokerAddr { return m.addrs[:] }

func (m movingCluster) leader() int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return *m.lead
}

func (m movingCluster) Topics() []TopicInfo {
	ts := m.testCluster.Topics()
	for i := range ts {
		for j := range ts[i].Partitions {
			p := &ts[i].Partitions[j]
			p.Leader, p.LeaderEpoch, p.Replicas = m.leader(), m.leader(), []int32{1, 2}
		}
	}
	return ts
}

func (m movingCluster) Partition(topic string, index int32) (Log, error) {
	if m.leader() != m.self {
		return nil, ErrNotLeader
	}
	return m.testCluster.Partition(topic, index)
}

// TestIdempotentAcrossLeaderChange: the leader stores a batch and dies
// before answering (its connection closes unanswered, the partitions move
// to the other broker, which shares the stored log); kgo's idempotent
// producer retries the batch on the new leader, which rebuilds the
// producer state from the log and answers it as a duplicate at its first
// offset: the batch is stored once. The test fails unless the answer was
// dropped after the batch was stored.
func TestIdempotentAcrossLeaderChange(t *testing.T) {
	tc := newTestCluster(t)
	if err := tc.CreateTopic(context.Background(), "t", 1); err != nil {
		t.Fatal(err)
	}
	var addrs [2]BrokerAddr
	var mu sync.Mutex
	lead := int32(1)
	a := movingCluster{tc, 1, &addrs, &mu, &lead}
	b := movingCluster{tc, 2, &addrs, &mu, &lead}
	dropped := make(chan int64, 1) // the high watermark when the answer was dropped
	lnA := serveTest(t, a, func() bool {
		mu.Lock()
		lead = 2 // the partitions move before the client learns anything
		mu.Unlock()
		_, hw := mustLog(t, tc, "t", 0).stats()
		select {
		case dropped <- hw:
			return true
		default:
			return false
		}
	})
	lnB := serveTest(t, b, nil)
	addrs[0], addrs[1] = listenerAddr(1, lnA), listenerAddr(2, lnB)
	cl := newClient(t, lnA.Addr().String(), kgo.DefaultProduceTopic("t"), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }), kgo.MetadataMinAge(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := &kgo.Record{Value: []byte("once")}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	select {
	case hw := <-dropped:
		if hw != 1 {
			t.Fatalf("the answer was dropped at high watermark %d: the batch was not stored before the leader died", hw)
		}
	default:
		t.Fatal("the leader answered: the fault did not land")
	}
	appends, hw := mustLog(t, tc, "t", 0).stats()
	if appends != 1 || hw != 1 || r.Offset != 0 {
		t.Fatalf("after the retry on the new leader: %d appends, high watermark %d, acknowledged at offset %d; want the batch stored once at 0", appends, hw, r.Offset)
	}
}

// serveTest serves cl insecurely on a loopback listener, with the Produce
// answer hook drop, until the test ends.
func serveTest(t *testing.T, cl Cluster, drop func() bool) net.Listener {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Insecure = true
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).With().Int32("broker", cl.Self()).Logger()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(cfg, cl)
	if err != nil {
		t.Fatal(err)
	}
	srv.dropProduceAnswer = drop
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln
}

// listenerAddr is broker id's address at ln.
func listenerAddr(id int32, ln net.Listener) BrokerAddr {
	a := ln.Addr().(*net.TCPAddr)
	return BrokerAddr{NodeID: id, Host: "127.0.0.1", Port: int32(a.Port)}
}

// lockedBuffer is a log sink the connections' goroutines share.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestHandshakeLogs: a client that closes its connection during the TLS
// handshake is no refusal (debug); one of another CA is logged at warn as
// not admitted.
func TestHandshakeLogs(t *testing.T) {
	l := testPKI(t)
	cfg := tlsConfig(t, l)
	var buf lockedBuffer
	cfg.Logger = zerolog.New(&buf).Level(zerolog.InfoLevel)
	srv, err := NewServer(cfg, newTestCluster(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if oc, err := tls.Dial("tcp", ln.Addr().String(), clientTLSUnverified(t, testPKI(t).ClientDir(), "operator")); err == nil {
		_, _ = oc.Read(make([]byte, 1))
		oc.Close()
	}
	srv.Close() // waits for both connections' goroutines
	buf.mu.Lock()
	logged := buf.b.String()
	buf.mu.Unlock()
	if n := strings.Count(logged, "\n"); n != 1 || !strings.Contains(logged, `"level":"warn"`) || !strings.Contains(logged, "peer not admitted") {
		t.Fatalf("logged %d lines, want one warn line naming the peer not admitted:\n%s", n, logged)
	}
}

// TestProduceNotLeaderHintsTheNewLeader: from Produce v10 a partition
// answered NOT_LEADER_OR_FOLLOWER carries its current leader and epoch,
// and the response the brokers' endpoints (KIP-951), so a client moves it
// at once instead of at its next metadata refresh; v9 carries neither.
func TestProduceNotLeaderHintsTheNewLeader(t *testing.T) {
	tc := newTestCluster(t)
	if err := tc.CreateTopic(context.Background(), "t", 1); err != nil {
		t.Fatal(err)
	}
	var addrs [2]BrokerAddr
	var mu sync.Mutex
	lead := int32(2)
	a := movingCluster{tc, 1, &addrs, &mu, &lead}
	ln := serveTest(t, a, nil)
	host, port := splitAddr(t, ln.Addr().String())
	addrs[0], addrs[1] = BrokerAddr{NodeID: 1, Host: host, Port: port}, BrokerAddr{NodeID: 2, Host: "127.0.0.2", Port: 9092, Rack: "r2"}

	for _, v := range []int16{9, 10} {
		req := produceRequest("t", 0, makeBatch(-1, -1, -1, "x"))
		req.SetVersion(v)
		resp := dialRaw(t, ln.Addr().String()).do(req).(*kmsg.ProduceResponse)
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != kerr.NotLeaderForPartition.Code {
			t.Fatalf("v%d: error %d, want NOT_LEADER_OR_FOLLOWER", v, p.ErrorCode)
		}
		if v < 10 {
			if p.CurrentLeader.LeaderID != -1 || len(resp.Brokers) != 0 {
				t.Fatalf("v9 answered a leader hint %+v and brokers %v: the version has no such fields", p.CurrentLeader, resp.Brokers)
			}
			continue
		}
		if p.CurrentLeader.LeaderID != 2 || p.CurrentLeader.LeaderEpoch != 2 {
			t.Fatalf("v10 hint %+v, want leader 2 at epoch 2", p.CurrentLeader)
		}
		if len(resp.Brokers) != 2 || resp.Brokers[1].NodeID != 2 || resp.Brokers[1].Host != "127.0.0.2" || resp.Brokers[1].Rack == nil || *resp.Brokers[1].Rack != "r2" {
			t.Fatalf("v10 brokers %+v, want both endpoints, broker 2 at 127.0.0.2 in rack r2", resp.Brokers)
		}
	}
}

func splitAddr(t *testing.T, addr string) (string, int32) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return host, int32(port)
}
