package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

// testPKI writes a CA, a broker and the operator, viewer and client
// clients.
func testPKI(t *testing.T) pki.Local {
	t.Helper()
	l, err := pki.CreateLocal(t.TempDir(), []meta.BrokerID{1}, []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tlsConfig is a broker's Kafka listener config from its certs.
func tlsConfig(t *testing.T, l pki.Local) Config {
	t.Helper()
	certs, err := pki.LoadBroker(l.BrokerDir(1))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.TLS = certs.ServerConfig()
	cfg.Authorize = func(cs tls.ConnectionState) (pki.Identity, error) {
		return certs.VerifyPeer(cs.PeerCertificates)
	}
	return cfg
}

// clientTLS is the client config of client name in dir.
func clientTLS(t *testing.T, dir, name string) *tls.Config {
	t.Helper()
	certs, err := pki.LoadClient(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	c := certs.ClientConfig()
	c.ServerName = "127.0.0.1"
	return c
}

func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestKgoRoundTripTCP(t *testing.T) {
	cl := newTestCluster(t)
	addr := startServer(t, cl, DefaultConfig())
	roundTrip(t, cl, addr, nil)
}

// TestKgoRoundTripAppendReader: partitions read into the connection's
// arena (one fetch fills it for several partitions, growing it, and the
// next reuses it) come back as produced.
func TestKgoRoundTripAppendReader(t *testing.T) {
	cl := newTestCluster(t)
	cl.appendRead = true
	addr := startServer(t, cl, DefaultConfig())
	roundTrip(t, cl, addr, nil)
}

func TestKgoRoundTripMutualTLS(t *testing.T) {
	l := testPKI(t)
	cl := newTestCluster(t)
	addr := startServer(t, cl, tlsConfig(t, l))
	roundTrip(t, cl, addr, clientTLS(t, l.ClientDir(), "operator"))
}

// TestKgoRoundTripClientRole: a certificate of role client (a Kafka
// application) produces and consumes.
func TestKgoRoundTripClientRole(t *testing.T) {
	l := testPKI(t)
	cl := newTestCluster(t)
	addr := startServer(t, cl, tlsConfig(t, l))
	roundTrip(t, cl, addr, clientTLS(t, l.ClientDir(), "client"))
}

// TestRoleAccess: what each certificate role may do over Kafka.
func TestRoleAccess(t *testing.T) {
	for _, tc := range []struct {
		role pki.Role
		want Access
	}{
		{pki.RoleOperator, AccessRead | AccessWrite},
		{pki.RoleClient, AccessRead | AccessWrite},
		{pki.RoleViewer, AccessRead},
		{pki.RoleBroker, 0},
		{"", 0},
		{"admin", 0},
	} {
		if got := RoleAccess(tc.role); got != tc.want {
			t.Errorf("RoleAccess(%q) = %v, want %v", tc.role, got, tc.want)
		}
	}
}

// roundTrip produces records with kgo's defaults (idempotent, acks=all) to
// a topic the first Metadata creates, then consumes every partition from
// the start and checks every record came back once, in order, unchanged.
func roundTrip(t *testing.T, cl *testCluster, addr string, tc *tls.Config) {
	const n = 600
	opts := []kgo.Opt{kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("events")}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	prod := newClient(t, addr, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "value %d %x", i, i*i)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	want := map[int32][]*kgo.Record{}
	for _, r := range recs {
		want[r.Partition] = append(want[r.Partition], r)
	}
	for p := range want {
		sort.Slice(want[p], func(i, j int) bool { return want[p][i].Offset < want[p][j].Offset })
	}
	parts := map[int32]kgo.Offset{}
	for p := range cl.Topics()[0].Partitions {
		parts[int32(p)] = kgo.NewOffset().AtStart()
	}
	copts := []kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"events": parts})}
	if tc != nil {
		copts = append(copts, kgo.DialTLSConfig(tc))
	}
	cons := newClient(t, addr, copts...)
	got := map[int32][]*kgo.Record{}
	for total := 0; total < n; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", total, n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], r)
			total++
		})
	}
	checkSame(t, want, got)
	checkLogs(t, cl, "events", want)
}

// checkSame compares per partition: same count, offsets 0.. in order,
// identical keys and values.
func checkSame(t *testing.T, want, got map[int32][]*kgo.Record) {
	t.Helper()
	for p, ws := range want {
		gs := got[p]
		if len(gs) != len(ws) {
			t.Fatalf("partition %d: consumed %d records, produced %d", p, len(gs), len(ws))
		}
		for i, w := range ws {
			g := gs[i]
			if g.Offset != int64(i) || w.Offset != int64(i) || string(g.Key) != string(w.Key) || string(g.Value) != string(w.Value) {
				t.Fatalf("partition %d record %d: consumed offset %d %q=%q, produced offset %d %q=%q", p, i, g.Offset, g.Key, g.Value, w.Offset, w.Key, w.Value)
			}
		}
	}
}

// checkLogs checks each partition's high watermark equals the records
// produced to it: nothing stored twice.
func checkLogs(t *testing.T, cl *testCluster, topic string, want map[int32][]*kgo.Record) {
	t.Helper()
	for i := range cl.Topics()[0].Partitions {
		l, err := cl.fileLog(topic, int32(i))
		if err != nil {
			t.Fatal(err)
		}
		if _, hw := l.stats(); hw != int64(len(want[int32(i)])) {
			t.Fatalf("partition %d: high watermark %d, produced %d records", i, hw, len(want[int32(i)]))
		}
	}
}
