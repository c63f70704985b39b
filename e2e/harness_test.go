package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/internal/rpc"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
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
		binary, cli = filepath.Join(dir, "malachid"), filepath.Join(dir, "malachi")
		for out, pkg := range map[string]string{binary: "malachid", cli: "malachi"} {
			cmd := exec.Command("go", "build", "-o", out, "github.com/malachi-log/malachi/cmd/"+pkg)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: building %s: %v\n", pkg, err)
				return 1
			}
		}
		return m.Run()
	}())
}

// freePorts returns n distinct free loopback ports.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ps []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ps
}

// broker is one malachid process of a test cluster.
type broker struct {
	id                     int
	dir, cfg, logPath      string
	admin, raft, rpc, data string
	cmd                    *exec.Cmd
	done                   chan struct{}
	exit                   error
}

// cluster is a set of malachid processes on loopback, each with its
// certificate of the cluster's CA, called over mutual TLS as the
// operator (or, insecure, all in plaintext).
type cluster struct {
	t        *testing.T
	brokers  []*broker
	certs    pki.Local // zero when insecure
	insecure bool
	// rpc calls the admin APIs and the plugins' /metrics; slow calls
	// POST /v1/load, which may take minutes.
	rpc, slow *rpc.Client
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
}

// startCluster writes a TOML config per broker and starts them all.
func startCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	if o.tick == "" {
		o.tick = "200ms"
	}
	if o.grace == "" {
		o.grace = "1s"
	}
	root := t.TempDir()
	if d := os.Getenv("MALACHI_E2E_DIR"); d != "" {
		var err error
		if root, err = os.MkdirTemp(d, "e2e-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(root) })
	}
	ports := freePorts(t, 4*o.n)
	c := &cluster{t: t, insecure: o.insecure}
	if o.insecure {
		c.rpc, c.slow = rpc.NewClient(nil, nil, 10*time.Second), rpc.NewClient(nil, nil, 5*time.Minute)
		t.Cleanup(func() { c.rpc.Close(); c.slow.Close() })
	} else {
		c.makeCerts(filepath.Join(root, "certs"), o.n)
	}
	var peers []string
	for i := 0; i < o.n; i++ {
		b := &broker{id: i + 1, dir: filepath.Join(root, fmt.Sprintf("b%d", i+1))}
		b.admin = fmt.Sprintf("127.0.0.1:%d", ports[4*i])
		b.raft = fmt.Sprintf("127.0.0.1:%d", ports[4*i+1])
		b.rpc = fmt.Sprintf("127.0.0.1:%d", ports[4*i+2])
		b.data = fmt.Sprintf("127.0.0.1:%d", ports[4*i+3])
		peers = append(peers, fmt.Sprintf("%q", fmt.Sprintf("%d=%s", b.id, b.raft)))
		c.brokers = append(c.brokers, b)
	}
	extra := o.extra
	if !strings.Contains(extra, "max_backfills") {
		extra += "\nmax_backfills = 256\nmax_backfills_per_broker = 64\n"
	}
	for _, b := range c.brokers {
		b.cfg = filepath.Join(root, fmt.Sprintf("b%d.toml", b.id))
		b.logPath = filepath.Join(root, fmt.Sprintf("b%d.log", b.id))
		auth := fmt.Sprintf("certs_dir = %q", c.certs.BrokerDir(meta.BrokerID(b.id)))
		if o.insecure {
			auth = "insecure = true"
		}
		toml := fmt.Sprintf(`id = %d
data_dir = %q
%s
admin_listen = %q
raft_listen = %q
peers = [%s]
replication_factor = %d
fault_injection = true
log_level = "info"

[raft]
heartbeat_timeout = "300ms"
election_timeout = "300ms"
leader_lease_timeout = "250ms"

[heal]
enabled = %v
rpc_listen = %q
data_listen = %q
tick = %q
grace = %q
%s
`, b.id, b.dir, auth, b.admin, b.raft, strings.Join(peers, ", "), o.rf, o.heal, b.rpc, b.data, o.tick, o.grace, extra)
		if err := os.WriteFile(b.cfg, []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, b := range c.brokers {
			c.kill(b.id)
		}
		if t.Failed() {
			for _, b := range c.brokers {
				logTail(t, b)
			}
		}
	})
	for _, b := range c.brokers {
		c.start(b.id)
	}
	c.waitLeader(20 * time.Second)
	c.waitRegistered(20 * time.Second)
	return c
}

// makeCerts writes a CA, the certificates of brokers 1..n (valid for
// 127.0.0.1 and localhost) and the operator and viewer clients under dir,
// and makes the cluster's clients with the operator's.
func (c *cluster) makeCerts(dir string, n int) {
	c.t.Helper()
	ids := make([]meta.BrokerID, n)
	for i := range ids {
		ids[i] = meta.BrokerID(i + 1)
	}
	l, err := pki.CreateLocal(dir, ids, []string{"127.0.0.1", "localhost"})
	if err != nil {
		c.t.Fatal(err)
	}
	op, err := pki.LoadClient(l.ClientDir(), string(pki.RoleOperator))
	if err != nil {
		c.t.Fatal(err)
	}
	c.certs = l
	c.rpc = rpc.NewClient(op, nil, 10*time.Second)
	c.slow = rpc.NewClient(op, nil, 5*time.Minute)
	c.t.Cleanup(func() { c.rpc.Close(); c.slow.Close() })
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
		c.t.Fatalf("broker %d exited: %v", id, c.b(id).exit)
	}
}

// launch runs broker id's process (appending to its log) and returns at
// once.
func (c *cluster) launch(id int) {
	c.t.Helper()
	b := c.b(id)
	logf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	b.cmd = exec.Command(binary, "--config", b.cfg)
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	if err := b.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	b.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		b.exit = cmd.Wait()
		logf.Close()
		close(done)
	}(b.cmd, b.done)
}

// kill sends SIGKILL to broker id and waits for it to exit.
func (c *cluster) kill(id int) {
	b := c.b(id)
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	select {
	case <-b.done:
		return
	default:
	}
	_ = b.cmd.Process.Kill()
	<-b.done
}

// term sends SIGTERM and waits; it returns the exit error.
func (c *cluster) term(id int) error {
	b := c.b(id)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
		return b.exit
	case <-time.After(15 * time.Second):
		c.t.Fatalf("broker %d did not exit 15s after SIGTERM", id)
		return nil
	}
}

func (c *cluster) alive(id int) bool {
	b := c.b(id)
	if b.done == nil {
		return false
	}
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

type health struct {
	ID       int    `json:"id"`
	Leader   int    `json:"leader"`
	IsLeader bool   `json:"is_leader"`
	Index    uint64 `json:"index"`
}

// get calls GET path on broker id's admin API as the operator.
func (c *cluster) get(id int, path string, v any) error {
	if err := c.rpc.Call(context.Background(), http.MethodGet, c.b(id).admin, path, nil, v); err != nil {
		return fmt.Errorf("broker %d: %w", id, err)
	}
	return nil
}

// post calls POST path on broker id's admin API as the operator.
func (c *cluster) post(id int, path string, req, v any) error {
	rc := c.rpc
	if path == "/v1/load" {
		rc = c.slow
	}
	if err := rc.Call(context.Background(), http.MethodPost, c.b(id).admin, path, req, v); err != nil {
		return fmt.Errorf("broker %d: %w", id, err)
	}
	return nil
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

// leader returns the leader as seen by the live brokers (0 if none agree).
func (c *cluster) leader() int {
	for _, b := range c.brokers {
		if !c.alive(b.id) {
			continue
		}
		var h health
		if c.get(b.id, "/v1/health", &h) == nil && h.IsLeader {
			return b.id
		}
	}
	return 0
}

func (c *cluster) waitLeader(timeout time.Duration) int {
	c.t.Helper()
	var l int
	c.eventually(timeout, "a raft leader", func() bool { l = c.leader(); return l != 0 })
	return l
}

// waitRegistered waits until every live broker is in the metadata.
func (c *cluster) waitRegistered(timeout time.Duration) {
	c.t.Helper()
	c.eventually(timeout, "every broker registered", func() bool {
		snap, err := c.metadata(c.anyAlive())
		if err != nil {
			return false
		}
		for _, b := range c.brokers {
			if _, ok := snap.Broker(meta.BrokerID(b.id)); !ok && c.alive(b.id) {
				return false
			}
		}
		return true
	})
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
}

// healStatus is the part of the plugin's /status the tests read.
type healStatus struct {
	Leader   bool         `json:"leader"`
	Passes   uint64       `json:"passes"`
	LastPass *heal.Report `json:"last_pass"`
}

func (c *cluster) status(id int) (healStatus, error) {
	var s healStatus
	err := c.get(id, "/v1/status", &s)
	return s, err
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
// of every segment it is assigned.
func (c *cluster) checkCopies(snap meta.Snapshot) {
	c.t.Helper()
	byBroker := map[int]map[string]copyInfo{}
	for _, s := range snap.Segments {
		for _, r := range s.Replicas {
			id := int(r)
			if !c.alive(id) {
				continue
			}
			if byBroker[id] == nil {
				byBroker[id] = c.copies(id)
			}
			ci, ok := byBroker[id][string(s.ID)]
			if !ok || !ci.Sealed || ci.Latched || ci.Size != s.ByteSize+40 {
				c.t.Errorf("segment %s on broker %d: copy %+v (present %v), want sealed, unlatched, %d bytes", s.ID, id, ci, ok, s.ByteSize+40)
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
