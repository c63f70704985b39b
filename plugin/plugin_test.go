package plugin

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/store"
)

// memCP is an in-memory ControlPlane over meta.Table, for the layer-above
// tests of the plugin: the stores, listeners and RPCs are real.
type memCP struct {
	pkiOnce sync.Once
	pki     pki.Local // the test's CA and certificates (certs)
	mu      sync.Mutex
	t       *meta.Table
	index   uint64
	leader  bool
	ch      chan bool
}

func newMemCP() *memCP { return &memCP{t: meta.NewTable(3), ch: make(chan bool, 1)} }

func (m *memCP) View() *meta.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t.View()
}

// Snapshot is the flat form, for the tests' own checks.
func (m *memCP) Snapshot() meta.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t.Snapshot()
}
func (m *memCP) Barrier(ctx context.Context) error { return nil }
func (m *memCP) Apply(ctx context.Context, c meta.Command) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.index++
	return m.index, m.t.Apply(m.index, c)
}
func (m *memCP) IsLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leader
}
func (m *memCP) LeaderCh() <-chan bool { return m.ch }
func (m *memCP) setLeader(v bool) {
	m.mu.Lock()
	m.leader = v
	m.mu.Unlock()
	select {
	case m.ch <- v:
	default:
	}
}

func (m *memCP) must(t *testing.T, c meta.Command) {
	t.Helper()
	if _, err := m.Apply(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// certs loads broker id's certificates of the test's CA (made at first
// use: brokers 1 to 9, valid for 127.0.0.1 and 127.0.0.2).
func (m *memCP) certs(tb testing.TB, id meta.BrokerID) *pki.Certs {
	tb.Helper()
	m.makePKI(tb)
	c, err := pki.LoadBroker(m.pki.BrokerDir(id))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// client loads the test CA's client "operator" or "viewer".
func (m *memCP) client(tb testing.TB, name string) *pki.Certs {
	tb.Helper()
	m.makePKI(tb)
	c, err := pki.LoadClient(m.pki.ClientDir(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func (m *memCP) makePKI(tb testing.TB) {
	m.pkiOnce.Do(func() {
		l, err := pki.CreateLocal(tb.TempDir(), []meta.BrokerID{1, 2, 3, 4, 5, 6, 7, 8, 9}, []string{"127.0.0.1", "127.0.0.2"})
		if err != nil {
			tb.Fatal(err)
		}
		m.pki = l
	})
}

// otherCA is broker 1 of a CA of its own.
func otherCA(tb testing.TB) *pki.Certs {
	tb.Helper()
	l, err := pki.CreateLocal(tb.TempDir(), []meta.BrokerID{1}, []string{"127.0.0.1"})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := pki.LoadBroker(l.BrokerDir(1))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// chainOf is the certificate chain c presents.
func chainOf(tb testing.TB, c *pki.Certs) []*x509.Certificate {
	tb.Helper()
	cert, err := c.ClientConfig().GetClientCertificate(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return []*x509.Certificate{cert.Leaf}
}

type instance struct {
	id meta.BrokerID
	db *store.DB
	p  *Plugin
}

// startInstance opens a store and an enabled plugin on ephemeral ports and
// registers the broker in cp.
func startInstance(t *testing.T, cp *memCP, id meta.BrokerID, mod func(*Config)) *instance {
	t.Helper()
	return startInstanceWith(t, cp, id, store.Options{}, mod)
}

// startInstanceWith is startInstance over a store opened with opts.
func startInstanceWith(t *testing.T, cp *memCP, id meta.BrokerID, opts store.Options, mod func(*Config)) *instance {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg := DefaultConfig()
	cfg.Enabled, cfg.DataDir = true, dir
	cfg.RPCListen, cfg.DataListen = "127.0.0.1:0", "127.0.0.2:0"
	cfg.Tick, cfg.Grace, cfg.ProbeDeadline = 20*time.Millisecond, 200*time.Millisecond, time.Second
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg, Deps{Self: id, Store: db, Control: cp, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		Certs: cp.certs(t, id)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	st := p.Status()
	cp.must(t, meta.RegisterBroker{Broker: meta.Broker{ID: id, RPCAddr: st.RPCAddr, DataAddr: st.DataAddr}})
	return &instance{id: id, db: db, p: p}
}

// sealedCopy writes n records into a new copy and seals it; it returns the
// segment as the metadata records it.
func sealedCopy(t *testing.T, db *store.DB, id meta.SegmentID, n int, replicas ...meta.BrokerID) meta.Segment {
	t.Helper()
	if err := db.Create(id, 100); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := db.Append(id, []byte(strings.Repeat("x", 100+i))); err != nil {
			t.Fatal(err)
		}
	}
	s, err := db.Seal(id)
	if err != nil {
		t.Fatal(err)
	}
	return meta.Segment{ID: id, StartOffset: s.StartOffset, Length: s.Length, ByteSize: s.ByteSize, Checksum: s.Checksum, Sealed: true, Replicas: replicas}
}

func addSegment(t *testing.T, cp *memCP, seg meta.Segment) {
	t.Helper()
	active := seg
	active.Sealed, active.Length, active.ByteSize, active.Checksum = false, 0, 0, meta.NoChecksum
	cp.must(t, meta.CreateSegment{Segment: active})
	if seg.Sealed {
		cp.must(t, meta.SealSegment{ID: seg.ID, Length: seg.Length, ByteSize: seg.ByteSize, Checksum: seg.Checksum})
	}
}

// anomalies classifies the report's facts against the metadata, as the
// planner does.
func anomalies(cp *memCP, r heal.ProbeReport) map[meta.SegmentID]heal.Anomaly {
	view := cp.View()
	m := map[meta.SegmentID]heal.Anomaly{}
	for i := range r.Facts {
		f := &r.Facts[i]
		if seg, ok := view.Segment(f.Segment); ok {
			m[f.Segment] = heal.Classify(seg, f)
		}
	}
	return m
}

func TestProbeReportsAnomaliesAndCounts(t *testing.T) {
	cp := newMemCP()
	in := startInstance(t, cp, 1, nil)
	cl := in.p.Client()
	ctx := context.Background()

	a := sealedCopy(t, in.db, "a", 5, 1, 2)
	b := sealedCopy(t, in.db, "b", 3, 1)
	d := sealedCopy(t, in.db, "d", 8, 1)
	other := sealedCopy(t, in.db, "o", 2, 2) // assigned to broker 2 only
	for _, s := range []meta.Segment{a, b, d, other} {
		addSegment(t, cp, s)
	}
	addSegment(t, cp, meta.Segment{ID: "c", StartOffset: 0, Length: 1, ByteSize: 50, Sealed: true, Checksum: meta.CRC32C(1), Replicas: []meta.BrokerID{1}})
	addSegment(t, cp, meta.Segment{ID: "f", Replicas: []meta.BrokerID{1}}) // active
	if err := os.Truncate(in.db.Path("d"), d.ByteSize/2); err != nil {
		t.Fatal(err)
	}
	// Confirm a: it then measures intact and is not listed.
	if err := settleOne(ctx, cl, 1, a); err != nil {
		t.Fatal(err)
	}
	if err := confirmOne(ctx, cl, 1, a); err != nil {
		t.Fatal(err)
	}
	rep, err := cl.Probe(ctx, 1, cp.Snapshot().Index)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Copies != 4 {
		t.Errorf("copies = %d, want 4 (a, b, c, d)", rep.Copies)
	}
	got := anomalies(cp, rep)
	if len(got) != 3 {
		t.Errorf("anomalies %+v, want exactly b, c, d", rep.Facts)
	}
	if x := got["b"]; x.Kind != heal.Overrun || x.Size != b.ByteSize+store.FooterSize {
		t.Errorf("b: %+v, want overrun of %d", x, b.ByteSize+store.FooterSize)
	}
	if x := got["c"]; x.Kind != heal.Missing {
		t.Errorf("c: %+v, want missing", x)
	}
	if x := got["d"]; x.Kind != heal.Short || x.Size != d.ByteSize/2 {
		t.Errorf("d: %+v, want short at %d", x, d.ByteSize/2)
	}
	// Settling and confirming b removes it; a short copy refuses both.
	if err := settleOne(ctx, cl, 1, b); err != nil {
		t.Fatal(err)
	}
	if err := confirmOne(ctx, cl, 1, b); err != nil {
		t.Fatal(err)
	}
	if err := settleOne(ctx, cl, 1, d); !errors.Is(err, store.ErrShort) {
		t.Errorf("settle of a short copy: %v, want store.ErrShort across the wire", err)
	}
	if err := confirmOne(ctx, cl, 1, d); err == nil {
		t.Error("confirm of a short copy succeeded")
	}
	rep, err = cl.Probe(ctx, 1, cp.Snapshot().Index)
	if err != nil {
		t.Fatal(err)
	}
	if got := anomalies(cp, rep); len(got) != 2 || got["b"].Kind != heal.KindUnknown {
		t.Errorf("after confirming b: %+v", rep.Facts)
	}
	// An index the broker has not applied: it waits half the caller's
	// deadline, then says so while the caller still listens (an answer the
	// coordinator counts as seen: heal.ErrBehind).
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cl.Probe(cctx, 1, cp.Snapshot().Index+100); !errors.Is(err, ErrLagging) || !errors.Is(err, heal.ErrBehind) {
		t.Errorf("probe at a future index: %v, want ErrLagging wrapping heal.ErrBehind", err)
	}
}

// TestRPCRefusesAnotherCA: a client of another CA is refused, over a real
// socket, and the error is one the coordinator reports as auth_failed.
func TestRPCRefusesAnotherCA(t *testing.T) {
	cp := newMemCP()
	in := startInstance(t, cp, 1, nil)
	resolve := func(id meta.BrokerID) (meta.Broker, bool) {
		snap := cp.Snapshot()
		return snap.Broker(id)
	}
	bad := NewClient(otherCA(t), 1, resolve, time.Second)
	defer bad.Close()
	_, err := bad.Probe(context.Background(), 1, 0)
	if !errors.Is(err, heal.ErrUnauthenticated) || !strings.Contains(err.Error(), "another CA") {
		t.Fatalf("probe from another CA: %v, want heal.ErrUnauthenticated naming the CA", err)
	}
	if _, err := bad.Latched(context.Background(), 1); !errors.Is(err, heal.ErrUnauthenticated) {
		t.Fatalf("latched from another CA: %v", err)
	}
	// A viewer's certificate is valid but may not call the RPC.
	viewer := NewClient(cp.client(t, "viewer"), 1, resolve, time.Second)
	defer viewer.Close()
	if _, err := viewer.Latched(context.Background(), 1); !errors.Is(err, rpc.ErrForbidden) || !strings.Contains(err.Error(), "needs a certificate of role broker") {
		t.Fatalf("latched as a viewer: %v, want forbidden naming the role", err)
	}
	// The right CA, but the certificate of broker 3 answering for 1.
	wrong := NewClient(cp.certs(t, 2), 2, func(meta.BrokerID) (meta.Broker, bool) { return resolve(1) }, time.Second)
	defer wrong.Close()
	if _, err := wrong.Latched(context.Background(), 3); !errors.Is(err, heal.ErrUnauthenticated) || !errors.Is(err, rpc.ErrWrongPeer) {
		t.Fatalf("broker 1 answering for broker 3: %v, want ErrWrongPeer", err)
	}
	_ = in
}

func TestBackfillBetweenInstances(t *testing.T) {
	cp := newMemCP()
	src := startInstance(t, cp, 1, nil)
	dst := startInstance(t, cp, 2, nil)
	ctx := context.Background()
	seg := sealedCopy(t, src.db, "s1", 50, 1)
	addSegment(t, cp, seg)
	cl := dst.p.Client()
	n, err := cl.Backfill(ctx, 2, 1, seg) // no copy yet: from byte 0
	if err != nil {
		t.Fatal(err)
	}
	if n != seg.ByteSize+store.FooterSize {
		t.Errorf("backfill moved %d bytes, want %d", n, seg.ByteSize+store.FooterSize)
	}
	if got := testutil.ToFloat64(dst.p.metrics.backfillArrived); got != float64(n) {
		t.Errorf("the target counted %v bytes arrived, want the %d it received", got, n)
	}
	if got := testutil.ToFloat64(src.p.metrics.backfillArrived); got != 0 {
		t.Errorf("the source counted %v bytes arrived, want 0 (it sent them)", got)
	}
	if err := dst.db.Verify("s1", seg); err != nil {
		t.Fatalf("backfilled copy does not verify: %v", err)
	}
	// Cut the target back into the frames: the next backfill resumes there.
	cut := seg.ByteSize / 3
	if err := os.Truncate(dst.db.Path("s1"), cut); err != nil {
		t.Fatal(err)
	}
	de, err := dst.db.DurableEnd("s1")
	end := de.Bytes
	if err != nil || end > cut || end == 0 {
		t.Fatalf("durable end after a cut at %d: %d, %v", cut, end, err)
	}
	n, err = cl.Backfill(ctx, 2, 1, seg) // the target resumes at its durable end
	if err != nil {
		t.Fatal(err)
	}
	if n != seg.ByteSize+store.FooterSize-end {
		t.Errorf("resumed backfill moved %d bytes, want %d", n, seg.ByteSize+store.FooterSize-end)
	}
	if got, want := testutil.ToFloat64(dst.p.metrics.backfillArrived), float64(2*(seg.ByteSize+store.FooterSize)-end); got != want {
		t.Errorf("after a resumed backfill the target counted %v bytes arrived, want %v (the resumed part counted from where it resumed)", got, want)
	}
	if err := dst.db.Verify("s1", seg); err != nil {
		t.Fatal(err)
	}
	// A source that does not hold the segment refuses; nothing is committed.
	ghost := seg
	ghost.ID = "ghost"
	if _, err := cl.Backfill(ctx, 2, 1, ghost); !errors.Is(err, heal.ErrSourceRefused) {
		t.Errorf("backfill from a source without the copy: %v, want heal.ErrSourceRefused", err)
	}
	if err := cl.Delete(ctx, 2, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, 2, "s1"); err != nil {
		t.Errorf("second delete: %v, want nil", err)
	}
	if _, err := os.Stat(dst.db.Path("s1")); !os.IsNotExist(err) {
		t.Errorf("copy still on disk after delete: %v", err)
	}
}

func TestCoordinatorFollowsLeadership(t *testing.T) {
	cp := newMemCP()
	in := startInstance(t, cp, 1, nil)
	wait := func(what string, cond func(Status) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond(in.p.Status()) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, in.p.Status())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if st := in.p.Status(); st.Leader || st.Passes != 0 {
		t.Fatalf("not leader, yet the coordinator ran: %+v", st)
	}
	if _, err := in.p.DryRun(context.Background()); !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("dry run on a follower: %v", err)
	}
	cp.setLeader(true)
	wait("leadership and a pass", func(s Status) bool { return s.Leader && s.Passes > 0 })
	plan, err := in.p.DryRun(context.Background())
	if err != nil || plan.Actions == nil {
		t.Fatalf("dry run on the leader: %+v, %v", plan, err)
	}
	cp.setLeader(false)
	wait("leadership lost", func(s Status) bool { return !s.Leader })
	n := in.p.Status().Passes
	time.Sleep(150 * time.Millisecond)
	if m := in.p.Status().Passes; m != n {
		t.Fatalf("passes ran after leadership was lost: %d -> %d", n, m)
	}
}

func TestDisabledStartsNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	before := runtime.NumGoroutine()
	cfg := DefaultConfig()
	cfg.RPCListen, cfg.DataListen = addr, "127.0.0.1:1"
	p, err := New(cfg, Deps{}) // no store, no control plane: nothing is used
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("a disabled plugin listens")
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("goroutines %d -> %d after starting a disabled plugin", before, after)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if p.Enabled() || p.Client() != nil {
		t.Fatal("disabled plugin has a client")
	}
}

func TestScrubberFindsInPlaceCorruption(t *testing.T) {
	cp := newMemCP()
	in := startInstance(t, cp, 1, func(c *Config) { c.ScrubInterval, c.ScrubBytesPerSecond = 20*time.Millisecond, 0 })
	ctx := context.Background()
	good := sealedCopy(t, in.db, "good", 20, 1)
	bad := sealedCopy(t, in.db, "bad", 20, 1)
	addSegment(t, cp, good)
	addSegment(t, cp, bad)
	// Flip one bit inside a record: the size stays, the probe alone sees
	// nothing wrong.
	f, err := os.OpenFile(in.db.Path("bad"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	at := bad.ByteSize / 2
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x04
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cl := in.p.Client()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rep, err := cl.Probe(ctx, 1, cp.Snapshot().Index)
		if err != nil {
			t.Fatal(err)
		}
		got := anomalies(cp, rep)
		if got["bad"].Kind == heal.Corrupt {
			if got["good"].Kind == heal.Corrupt {
				t.Fatal("intact copy reported corrupt")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("corruption not reported: %+v, status %+v", rep.Facts, in.p.Status().Scrub)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := in.p.Status().Scrub; st == nil || len(st.Corrupt) != 1 || st.Corrupt[0] != "bad" || st.Verified == 0 {
		t.Fatalf("scrub status: %+v", st)
	}
	if err := cl.Delete(ctx, 1, "bad"); err != nil {
		t.Fatal(err)
	}
	if st := in.p.Status().Scrub; len(st.Corrupt) != 0 {
		t.Fatalf("deleted copy still marked: %+v", st)
	}
}

// TestCertificateExpiryMetric: every certificate of the certs directory is
// a series, also when ca.crt holds two CAs (one being rotated in), and a
// reload shows at the next scrape.
func TestCertificateExpiryMetric(t *testing.T) {
	cp := newMemCP()
	cp.makePKI(t)
	dir := cp.pki.BrokerDir(1)
	other := t.TempDir()
	if err := pki.CreateCA(pki.Options{Dir: other}); err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(filepath.Join(other, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, pki.CACert), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(second)
	f.Close()
	certs := cp.certs(t, 1)
	reg := prometheus.NewRegistry()
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := DefaultConfig()
	cfg.Enabled, cfg.DataDir = true, t.TempDir()
	if _, err := New(cfg, Deps{Self: 1, Store: db, Control: cp, Certs: certs, Registry: reg}); err != nil {
		t.Fatal(err)
	}
	series := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "malachi_heal_certificate_expiry_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				key := ""
				for _, l := range m.GetLabel() {
					key += l.GetName() + "=" + l.GetValue() + " "
				}
				out[key] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	got := series()
	cas, brokers := 0, 0
	for k, v := range got {
		switch {
		case strings.Contains(k, "file=ca.crt"):
			cas++
		case strings.Contains(k, "file=broker.crt"):
			brokers++
		}
		if v < 365*24*3600 {
			t.Errorf("%s expires in %v s, want years", k, v)
		}
	}
	if cas != 2 || brokers != 1 {
		t.Fatalf("series %v, want two ca.crt and one broker.crt", got)
	}
	// A new broker certificate of 2 days, reloaded: the next scrape says so.
	os.Remove(filepath.Join(dir, pki.BrokerCert))
	os.Remove(filepath.Join(dir, pki.BrokerKey))
	if err := pki.CreateBroker(pki.Options{Dir: dir, CAKey: filepath.Join(cp.pki.Root, pki.CAKey), CACert: filepath.Join(cp.pki.Root, pki.CACert), Lifetime: 48 * time.Hour}, 1, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if err := certs.Reload(); err != nil {
		t.Fatal(err)
	}
	for k, v := range series() {
		if strings.Contains(k, "file=broker.crt") && v > 48*3600 {
			t.Fatalf("after the reload %s expires in %v s, want under 2 days", k, v)
		}
	}
}

// switchingStatter is a statter whose engine changes, as auto's may.
type switchingStatter struct {
	statter
	engine string
}

func (s *switchingStatter) Engine() string { return s.engine }

// TestEngineMetricFollowsAuto: after the probe's engine switches, the
// engine_info metric and /status name the new one, and only it.
func TestEngineMetricFollowsAuto(t *testing.T) {
	cp := newMemCP()
	in := startInstance(t, cp, 1, nil)
	sw := &switchingStatter{statter: in.p.srv.stat, engine: "syscall"}
	in.p.mu.Lock()
	in.p.srv.stat, in.p.engines.stat = sw, sw
	in.p.mu.Unlock()
	ctx := context.Background()
	for _, want := range []string{"syscall", "uring"} {
		sw.engine = want
		if _, err := in.p.Client().Probe(ctx, 1, 0); err != nil {
			t.Fatal(err)
		}
		mfs, err := in.p.metrics.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var probes []string
		for _, mf := range mfs {
			if mf.GetName() != "malachi_heal_engine_info" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["kind"] == "probe" {
					probes = append(probes, labels["engine"])
				}
			}
		}
		if len(probes) != 1 || probes[0] != want {
			t.Fatalf("engine_info for the probe after a switch to %s: %v", want, probes)
		}
		if got := in.p.Status().ProbeEngine; got != want {
			t.Fatalf("status probe_engine %q, want %q", got, want)
		}
	}
}

// settleOne settles one copy through the batch RPC.
func settleOne(ctx context.Context, cl *Client, b meta.BrokerID, seg meta.Segment) error {
	errs := make([]error, 1)
	if err := cl.Settle(ctx, b, []meta.Segment{seg}, errs); err != nil {
		return err
	}
	return errs[0]
}

// confirmOne confirms one copy through the batch RPC.
func confirmOne(ctx context.Context, cl *Client, b meta.BrokerID, seg meta.Segment) error {
	errs := make([]error, 1)
	if err := cl.Confirm(ctx, b, []meta.Segment{seg}, errs); err != nil {
		return err
	}
	return errs[0]
}
