package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/testbed/harness"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/rpc"
)

// binary is the malachid built once by TestMain, cli the malachi CLI.
var binary, cli string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "malachi-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		root, err := harness.ModuleRoot()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		binary, cli = filepath.Join(dir, "malachid"), filepath.Join(dir, "malachi")
		for out, pkg := range map[string]string{binary: "malachid", cli: "malachi"} {
			if err := harness.Build(context.Background(), root, "./cmd/"+pkg, out); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
				return 1
			}
		}
		return m.Run()
	}())
}

// broker is one malachid process of a test cluster: the harness's
// broker, with the names the tests use.
type broker struct {
	*harness.Broker
	id                     int
	dir, logPath           string
	admin, raft, rpc, data string
	kafka                  string // kafka_listen; "" without clusterOpts.kafka
	// slow calls POST /v1/load, which may take minutes.
	slow *admin.Client
}

// cluster is a set of malachid processes on loopback (testbed/harness),
// each with its certificate of the cluster's CA, called over mutual TLS
// as the operator (or, insecure, all in plaintext).
type cluster struct {
	t        *testing.T
	h        *harness.Cluster
	brokers  []*broker
	certs    pki.Local // zero when insecure
	insecure bool
	// rpc is the harness's client (the plugins' /metrics).
	rpc *rpc.Client
	// loaded is when a network test's load ended (netClusterOpts): its
	// final check reads every heal pass from then on.
	loaded time.Time
}

type clusterOpts struct {
	n     int
	rf    int
	heal  bool
	tick  string
	grace string
	extra string // appended to every [heal] table
	// insecure runs every broker with insecure = true and no
	// certificates; the harness calls them in plaintext.
	insecure bool
	// hosts runs every broker in a network namespace of its own
	// (harness Config.Hosts); the test is skipped where that cannot be.
	hosts bool
	// raft replaces e2eRaft when set.
	raft *harness.RaftTimings
	// kafka gives every broker a Kafka listener (kafka_listen, on a free
	// loopback port) and this [kafka] table.
	kafka string
}

// e2eRaft are the [raft] timings of every test cluster.
var e2eRaft = harness.RaftTimings{Heartbeat: 300 * time.Millisecond, Election: 300 * time.Millisecond, LeaderLease: 250 * time.Millisecond}

// startCluster writes a TOML config per broker and starts them all.
func startCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	if o.tick == "" {
		o.tick = "200ms"
	}
	if o.grace == "" {
		o.grace = "1s"
	}
	tick, err := time.ParseDuration(o.tick)
	if err != nil {
		t.Fatal(err)
	}
	grace, err := time.ParseDuration(o.grace)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if d := os.Getenv("MALACHI_E2E_DIR"); d != "" {
		if root, err = os.MkdirTemp(d, "e2e-"); err != nil {
			t.Fatal(err)
		}
		if os.Getenv("MALACHI_E2E_KEEP") == "" {
			t.Cleanup(func() { os.RemoveAll(root) })
		}
	}
	extra := o.extra
	if !strings.Contains(extra, "rebalance") {
		// These tests' checkers allow a replica set to change only after a
		// loss and audit the final sets as quiescent: rebalance moves (its
		// own tests are cmd/malachi's) would break both, as in the nemesis.
		extra += "\nrebalance = false\n"
	}
	if !strings.Contains(extra, "max_backfills") {
		extra += "\nmax_backfills = 256\nmax_backfills_per_broker = 64\n"
	}
	raft := e2eRaft
	if o.raft != nil {
		raft = *o.raft
	}
	h, err := harness.New(harness.Config{Bin: binary, Root: root, Brokers: o.n, RF: o.rf, Tick: tick, Grace: grace,
		Raft: raft, NoHeal: !o.heal, HealExtra: extra, LogLevel: "info", CallTimeout: 10 * time.Second, Insecure: o.insecure,
		Hosts: o.hosts, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if o.hosts && h.Net() == nil {
		h.Stop()
		t.Skipf("brokers on hosts of their own need root, ip, nft and tc: %s", h.NetSkip())
	}
	c := &cluster{t: t, h: h, certs: h.Certs(), insecure: o.insecure, rpc: h.RPC()}
	slow := c.slowClient()
	for _, hb := range h.Brokers() {
		c.brokers = append(c.brokers, &broker{Broker: hb, id: int(hb.ID), dir: hb.Dir, logPath: hb.LogPath,
			admin: hb.Admin, raft: hb.Raft, rpc: hb.RPC, data: hb.Data, slow: admin.New(hb.Admin, slow, o.insecure)})
	}
	t.Cleanup(func() {
		for _, b := range c.brokers {
			c.kill(b.id)
		}
		h.Stop()
		slow.Close()
		if t.Failed() {
			for _, b := range c.brokers {
				logTail(t, b)
			}
		}
	})
	for _, b := range c.brokers {
		if err := h.WriteConfig(b.Broker); err != nil {
			t.Fatal(err)
		}
		if o.kafka != "" {
			c.addKafka(b, o.kafka)
		}
	}
	for _, b := range c.brokers {
		c.start(b.id)
	}
	c.waitLeader(20 * time.Second)
	c.waitRegistered(20 * time.Second)
	return c
}

// addKafka puts kafka_listen, on a free loopback port, and the [kafka]
// table into broker b's config file, written by the harness.
func (c *cluster) addKafka(b *broker, table string) {
	c.t.Helper()
	addrs, err := harness.FreeLoopbackPorts(1)
	if err != nil {
		c.t.Fatal(err)
	}
	b.kafka = addrs[0]
	text, err := os.ReadFile(b.ConfigPath)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := fmt.Sprintf("kafka_listen = %q\n%s\n[kafka]\n%s\n", b.kafka, text, table)
	if err := os.WriteFile(b.ConfigPath, []byte(cfg), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// slowClient is an RPC client as the operator whose calls may last five
// minutes (POST /v1/load).
func (c *cluster) slowClient() *rpc.Client {
	c.t.Helper()
	if c.insecure {
		return rpc.NewClient(nil, admin.Codes, 5*time.Minute)
	}
	op, err := pki.LoadClient(c.certs.ClientDir(), string(pki.RoleOperator))
	if err != nil {
		c.t.Fatal(err)
	}
	return rpc.NewClient(op, admin.Codes, 5*time.Minute)
}

func logTail(t *testing.T, b *broker) {
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		return
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.Contains(l, `"component":"raft"`) || strings.Contains(l, `"component":"pebble"`) {
			continue
		}
		lines = append(lines, l)
	}
	keep := lines[max(0, len(lines)-40):]
	t.Logf("---- broker %d log tail (%s) ----\n%s", b.id, b.logPath, strings.Join(keep, "\n"))
}

func (c *cluster) b(id int) *broker { return c.brokers[id-1] }

// start runs broker id's process (appending to its log) and waits for
// its admin API to answer the harness.
func (c *cluster) start(id int) {
	c.t.Helper()
	c.launch(id)
	c.eventually(15*time.Second, fmt.Sprintf("broker %d admin API up", id), func() bool {
		c.mustRun(id)
		var h health
		return c.get(id, "/v1/health", &h) == nil
	})
}

// mustRun fails the test, with broker id's log, if its process exited.
func (c *cluster) mustRun(id int) {
	c.t.Helper()
	if !c.alive(id) {
		logTail(c.t, c.b(id))
		c.t.Fatalf("broker %d exited: %v", id, c.b(id).ExitErr())
	}
}

// launch runs broker id's process (appending to its log) and returns at
// once.
func (c *cluster) launch(id int) {
	c.t.Helper()
	if err := c.h.StartBroker(c.b(id).Broker); err != nil {
		c.t.Fatal(err)
	}
}

// kill sends SIGKILL to broker id and waits for it to exit.
func (c *cluster) kill(id int) {
	if b := c.b(id); b.Alive() {
		_ = c.h.Kill(b.Broker)
	}
}

// term sends SIGTERM and waits; it returns the exit error.
func (c *cluster) term(id int) error {
	c.t.Helper()
	b := c.b(id)
	if err := c.h.Terminate(b.Broker, 15*time.Second); err != nil {
		c.t.Fatalf("broker %d: %v", id, err)
	}
	return b.ExitErr()
}

func (c *cluster) alive(id int) bool { return c.b(id).Alive() }

type health = admin.Health

// get calls GET path on broker id's admin API as the operator. Id 0 (what
// leader returns when no broker claims to lead) is an error, not a panic.
func (c *cluster) get(id int, path string, v any) error {
	if id < 1 || id > len(c.brokers) {
		return fmt.Errorf("no broker %d (of %d)", id, len(c.brokers))
	}
	return c.b(id).Client.Call(context.Background(), http.MethodGet, path, nil, v)
}

// post calls POST path on broker id's admin API as the operator.
func (c *cluster) post(id int, path string, req, v any) error {
	if id < 1 || id > len(c.brokers) {
		return fmt.Errorf("no broker %d (of %d)", id, len(c.brokers))
	}
	cl := c.b(id).Client
	if path == "/v1/load" {
		cl = c.b(id).slow
	}
	return cl.Call(context.Background(), http.MethodPost, path, req, v)
}

// eventually polls cond until it holds or the timeout passes.
func (c *cluster) eventually(timeout time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *cluster) waitLeader(timeout time.Duration) int {
	c.t.Helper()
	var l int
	c.eventually(timeout, "a raft leader", func() bool {
		if b := c.h.Leader(context.Background()); b != nil {
			l = int(b.ID)
		}
		return l != 0
	})
	return l
}

// waitRegistered waits until every live broker is in the metadata
// (harness.Cluster.WaitRegistered).
func (c *cluster) waitRegistered(timeout time.Duration) {
	c.t.Helper()
	if err := c.h.WaitRegistered(context.Background(), timeout); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) anyAlive(except ...int) int {
	for _, b := range c.brokers {
		skip := false
		for _, e := range except {
			skip = skip || e == b.id
		}
		if !skip && c.alive(b.id) {
			return b.id
		}
	}
	c.t.Fatal("no live broker")
	return 0
}

func (c *cluster) metadata(id int) (meta.Snapshot, error) {
	var s meta.Snapshot
	err := c.get(id, "/v1/metadata", &s)
	return s, err
}

// load creates, writes and seals n segments through broker id.
func (c *cluster) load(id, n, records, size int, prefix string) {
	c.t.Helper()
	req := map[string]any{"segments": n, "records_per_segment": records, "record_size": size, "prefix": prefix}
	if err := c.post(id, "/v1/load", req, nil); err != nil {
		c.t.Fatalf("load: %v", err)
	}
	// The load answered once its seals were committed; a broker that lost
	// the leadership meanwhile may apply them a little later. Every test
	// reads some broker's metadata next: wait until every live broker's
	// shows the n segments sealed.
	var last string
	defer func() { c.t.Logf("load %s: last seen: %s", prefix, last) }()
	c.eventually(30*time.Second, "the loaded segments sealed in every live broker's metadata ("+prefix+")", func() bool {
		for i := range c.brokers {
			id := i + 1
			if !c.alive(id) {
				continue
			}
			snap, err := c.metadata(id)
			if errors.Is(err, pki.ErrUntrusted) {
				continue // a broker of another CA (TestBrokerWithAnotherCA) cannot be asked
			}
			if err != nil {
				last = err.Error()
				return false
			}
			sealed := 0
			for _, s := range snap.Segments {
				if strings.HasPrefix(string(s.ID), prefix+"-") && s.Sealed {
					sealed++
				}
			}
			if sealed < n {
				last = fmt.Sprintf("broker %d: %d of %d sealed", id, sealed, n)
				return false
			}
		}
		last = "all sealed"
		return true
	})
}

// untilPass reads feed's heal passes in order (harness.PassFeed.Until),
// calling each on every one, until each says done, and returns that pass.
// It fails the test with each's last account when no pass is done within
// the limit, and when the histories dropped or skipped a pass before it:
// every pass is judged.
func (c *cluster) untilPass(feed *harness.PassFeed, within time.Duration, what string, each func(p *plugin.PassRecord) (done bool, why string)) plugin.PassRecord {
	c.t.Helper()
	p, err := feed.Until(context.Background(), c.h, within, each)
	if err == nil {
		if prob := feed.Problem(); prob != "" {
			err = errors.New(prob)
		}
	}
	if err != nil {
		c.t.Fatalf("waiting for %s: %v", what, err)
	}
	return p
}

// readPasses returns feed's heal passes not read yet, oldest end first,
// failing the test when the histories dropped or skipped one. A history
// that does not answer is read on a later call.
func (c *cluster) readPasses(feed *harness.PassFeed) []plugin.PassRecord {
	c.t.Helper()
	recs, _ := feed.Next(context.Background(), c.h)
	if prob := feed.Problem(); prob != "" {
		c.t.Fatal(prob)
	}
	return recs
}

// leaderFeed returns a feed of the leader's heal passes that end after it
// returns, which has read the leader's history once (the passes that read
// returns are not judged): such a feed follows that leader through a
// fault that leaves some broker knowing no leader, where a feed that has
// still to look the leader up (harness.Cluster.Leader) would read nothing.
// Call it before the fault.
func (c *cluster) leaderFeed() *harness.PassFeed {
	c.t.Helper()
	feed := harness.NewPassFeed(time.Now())
	c.eventually(20*time.Second, "the leader's pass history read", func() bool {
		c.readPasses(feed)
		return len(feed.Leaders) > 0
	})
	return feed
}

// passLine names pass p, its broker and its end, and sums up its report.
func passLine(p *plugin.PassRecord) string {
	return fmt.Sprintf("pass %d of broker %d (ended %s): %s", p.Seq, p.Broker, p.Ended.Format("15:04:05.000"), p.Report)
}

type copyInfo struct {
	ID      string `json:"id"`
	Size    int64  `json:"size"`
	Latched bool   `json:"latched"`
	Sealed  bool   `json:"sealed"`
}

func (c *cluster) copies(id int) map[string]copyInfo {
	c.t.Helper()
	var cs []copyInfo
	if err := c.get(id, "/v1/copies", &cs); err != nil {
		c.t.Fatal(err)
	}
	m := map[string]copyInfo{}
	for _, ci := range cs {
		m[ci.ID] = ci
	}
	return m
}

// fullyHealed reports whether, in broker id's metadata, every sealed
// segment has rf replicas, all among the live brokers.
func (c *cluster) fullyHealed(snap meta.Snapshot, rf int, dead map[meta.BrokerID]bool) (bool, string) {
	for _, s := range snap.Segments {
		if len(s.Replicas) != rf {
			return false, fmt.Sprintf("%s has %d replicas %v", s.ID, len(s.Replicas), s.Replicas)
		}
		for _, r := range s.Replicas {
			if dead[r] {
				return false, fmt.Sprintf("%s still on dead broker %d", s.ID, r)
			}
		}
	}
	return true, ""
}

// checkCopies asserts that every live replica holds an exact sealed copy
// of every segment it is assigned, as its broker lists it
// (harness.CheckCopy).
func (c *cluster) checkCopies(snap meta.Snapshot) {
	c.t.Helper()
	byBroker := map[meta.BrokerID]map[meta.SegmentID]admin.Copy{}
	for _, s := range snap.Segments {
		for _, r := range s.Replicas {
			if !c.alive(int(r)) {
				continue
			}
			if byBroker[r] == nil {
				cs, err := c.b(int(r)).Client.Copies(context.Background())
				if err != nil {
					c.t.Fatal(err)
				}
				byBroker[r] = harness.CopiesByID(cs)
			}
			lc, ok := byBroker[r][s.ID]
			if why := harness.CheckCopy(s, lc, ok); why != "" {
				c.t.Errorf("segment %s on broker %d: copy %+v: %s", s.ID, r, lc, why)
			}
		}
	}
}

// dialable reports whether something accepts connections at addr.
func dialable(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// metric scrapes one unlabelled metric from broker id's plugin /metrics
// (HTTPS, as the operator); -1 when it cannot.
func (c *cluster) metric(id int, name string) float64 {
	body, err := c.rpc.GetRaw(context.Background(), c.b(id).rpc, "/metrics")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

// hasCopy reports whether broker b holds a file for segment id.
func hasCopy(b *broker, id meta.SegmentID) bool {
	_, err := b.CopyPath(id)
	return err == nil
}

// fault damages broker id's copy of segment seg with testbed/harness's
// injector: "delete" removes the file, "truncate" cuts it at byte arg,
// "extend" appends arg zero bytes, "flip" flips bit 4 of byte arg.
func (c *cluster) fault(id int, kind string, seg meta.SegmentID, arg int64) error {
	path, err := c.b(id).CopyPath(seg)
	if err != nil {
		return err
	}
	switch kind {
	case "delete":
		_, err = harness.DeleteCopy(path)
	case "truncate":
		_, err = harness.TruncateCopyAt(path, arg)
	case "extend":
		_, err = harness.ExtendCopyWith(path, make([]byte, arg))
	case "flip":
		_, err = harness.FlipBit(path, arg, 4)
	default:
		err = fmt.Errorf("fault %q: want delete, truncate, extend or flip", kind)
	}
	return err
}
