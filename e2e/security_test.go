package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/rpc"
	"github.com/malachi-log/malachi/testbed/harness"
	"github.com/malachi-log/malachi/testbed/raftwire"
)

// outsider is a caller of a raft port that must not reach raft: how it
// connects, and the reason the broker logs when it refuses it.
type outsider struct {
	name, reason string
	tls          *tls.Config // nil: plaintext TCP
	src          net.Addr
}

// outsiders are the callers claiming to be broker claimed: plaintext, TLS
// without a certificate, claimed's certificate of another CA, an expired
// one of the cluster CA, member holder's valid certificate, and a valid
// certificate of broker 9 (a non-member made with the cluster CA). Each
// dials from its own address of srcs.
func (c *cluster) outsiders(claimed, holder int, other pki.Local, srcs []net.Addr) []outsider {
	c.t.Helper()
	ca := pki.Options{CACert: filepath.Join(c.certs.Root, pki.CACert), CAKey: filepath.Join(c.certs.Root, pki.CAKey)}
	expired, nine := ca, ca
	expired.Dir, expired.Now, expired.Lifetime = c.t.TempDir(), time.Now().Add(-48*time.Hour), 24*time.Hour
	nine.Dir = c.t.TempDir()
	hosts := []string{"127.0.0.1", "localhost"}
	if err := pki.CreateBroker(expired, meta.BrokerID(claimed), hosts); err != nil {
		c.t.Fatal(err)
	}
	if err := pki.CreateBroker(nine, 9, hosts); err != nil {
		c.t.Fatal(err)
	}
	anon, err := raftwire.ClientConfig("", "")
	if err != nil {
		c.t.Fatal(err)
	}
	forged := func(by int) string {
		return fmt.Sprintf(`the certificate names broker %d, the RPC claims server id \"%d\"`, by, claimed)
	}
	return []outsider{
		{"plaintext TCP", "first record does not look like a TLS handshake", nil, srcs[0]},
		{"TLS without a certificate", "no client certificate presented", anon, srcs[1]},
		{"a broker certificate of another CA", "signed by another CA", c.pairTLS(other.BrokerDir(meta.BrokerID(claimed)), pki.BrokerCert, pki.BrokerKey), srcs[2]},
		{"an expired broker certificate of the cluster CA", "expired at", c.pairTLS(expired.Dir, pki.BrokerCert, pki.BrokerKey), srcs[3]},
		{fmt.Sprintf("broker %d's valid certificate", holder), forged(holder), c.brokerTLS(holder), srcs[4]},
		{"a valid certificate of broker 9, not a member", forged(9), c.pairTLS(nine.Dir, pki.BrokerCert, pki.BrokerKey), srcs[5]},
	}
}

// rawRPC is one crafted raft RPC.
type rawRPC struct {
	name string
	typ  uint8
	req  any
	tail []byte
}

// attacks are the RPCs that, read by target's raft as coming from member
// claimed, would change the cluster: a takeover vote (last term), an
// AppendEntries committing a set_segment_replicas that moves seg, and an
// InstallSnapshot of the real metadata with three sealed segments at
// byte_size 0. The AppendEntries and the snapshot are one term ahead of
// target's and follow its last log entry, as its own raft reports them,
// so that they win over whatever the leader appended since.
func (c *cluster) attacks(target, claimed int, snap meta.Snapshot, seg meta.Segment) []rawRPC {
	c.t.Helper()
	term, last := c.raftPosition(target)
	addr := c.b(claimed).raft
	var others []meta.BrokerID
	for _, b := range c.brokers {
		if !seg.HasReplica(meta.BrokerID(b.id)) {
			others = append(others, meta.BrokerID(b.id))
		}
	}
	move := meta.SetSegmentReplicas{ID: seg.ID, Expected: seg.Replicas, Replicas: append(others, seg.Replicas[0])}
	cmd, err := meta.EncodeCommand(move)
	if err != nil {
		c.t.Fatal(err)
	}
	// The FSM would apply it: it decodes, and its compare-and-set holds.
	if dec, err := meta.DecodeCommand(cmd); err != nil {
		c.t.Fatalf("the crafted command does not decode: %v", err)
	} else if _, err := dec.(meta.SetSegmentReplicas).ApplyTo(seg); err != nil {
		c.t.Fatalf("the crafted command would be refused by the FSM: %v", err)
	}
	ae := raftwire.WithLeader(&raft.AppendEntriesRequest{RPCHeader: raftwire.Header(meta.BrokerID(claimed).String(), addr),
		Term: term + 1, PrevLogEntry: last, PrevLogTerm: term, LeaderCommitIndex: last + 1,
		Entries: []*raft.Log{{Index: last + 1, Term: term + 1, Type: raft.LogCommand, Data: cmd}}}, addr)

	forged := snap
	forged.Segments = append([]meta.Segment(nil), snap.Segments...)
	zeroed := 0
	for i := range forged.Segments {
		if forged.Segments[i].Sealed && zeroed < 3 {
			forged.Segments[i].ByteSize = 0
			zeroed++
		}
	}
	forged.Index = last + 100
	data, err := json.Marshal(forged) // the FSM's snapshot format: meta.Snapshot's JSON
	if err != nil {
		c.t.Fatal(err)
	}
	is := &raft.InstallSnapshotRequest{RPCHeader: raftwire.Header(meta.BrokerID(claimed).String(), addr), SnapshotVersion: 1,
		Term: term + 1, Leader: []byte(addr), LastLogIndex: last + 100, LastLogTerm: term + 1,
		Configuration: raft.EncodeConfiguration(c.raftConfiguration()), ConfigurationIndex: 1, Size: int64(len(data))}
	return []rawRPC{
		{"a takeover RequestVote (LeadershipTransfer, term MaxUint64)", raftwire.RequestVote, raftwire.Takeover(meta.BrokerID(claimed), addr), nil},
		{fmt.Sprintf("an AppendEntries committing %s -> %v", seg.ID, move.Replicas), raftwire.AppendEntries, ae, nil},
		{"an InstallSnapshot with three sealed segments at byte_size 0", raftwire.InstallSnapshot, is, data},
	}
}

// clusterFacts is what an outsider must not change.
type clusterFacts struct {
	leader int
	terms  map[int]uint64
	meta   map[int]string // each broker's GET /v1/metadata
	copies map[string]string
}

func (c *cluster) facts() clusterFacts {
	c.t.Helper()
	f := clusterFacts{leader: c.waitLeader(10 * time.Second), terms: map[int]uint64{}, meta: map[int]string{}, copies: c.copyHashes()}
	for _, b := range c.brokers {
		c.mustRun(b.id)
		f.terms[b.id], _ = c.raftPosition(b.id)
		var raw json.RawMessage
		if err := c.get(b.id, "/v1/metadata", &raw); err != nil {
			c.t.Fatal(err)
		}
		f.meta[b.id] = string(raw)
		var h health
		if err := c.get(b.id, "/v1/health", &h); err != nil || int(h.Leader) != f.leader {
			c.t.Errorf("broker %d: health %+v, %v; want leader %d", b.id, h, err, f.leader)
		}
	}
	return f
}

// same reports every difference between before and now.
func (c *cluster) same(before, now clusterFacts) {
	c.t.Helper()
	if now.leader != before.leader {
		c.t.Errorf("the leader is broker %d, was %d", now.leader, before.leader)
	}
	for id, term := range before.terms {
		if now.terms[id] != term {
			c.t.Errorf("broker %d: raft term %d, was %d", id, now.terms[id], term)
		}
		if now.meta[id] != before.meta[id] {
			c.t.Errorf("broker %d: GET /v1/metadata changed:\n%s\nwas\n%s", id, now.meta[id], before.meta[id])
		}
	}
	if len(now.copies) != len(before.copies) {
		c.t.Errorf("%d copy files, were %d", len(now.copies), len(before.copies))
	}
	for f, h := range before.copies {
		if now.copies[f] != h {
			c.t.Errorf("%s: changed or gone", f)
		}
	}
}

// Outsiders change nothing (every defence of the raft port, and garbage
// on every port): plaintext, TLS without a certificate, another CA's
// certificate, an expired one, a member's valid certificate and a
// non-member's claiming another broker's id send a takeover vote, an
// AppendEntries committing a replica move and a snapshot zeroing three
// sealed segments to the leader's and a follower's raft port; random
// bytes and a plaintext HTTP request go to each one's raft, admin, heal
// rpc and data listeners. Every send reached its port and was closed
// unanswered, and the broker logged each caller's refusal with its
// reason. After it all the leader, every term, every broker's metadata
// and every copy file are as before, and a new batch loads.
func TestOutsiderChangesNothing(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 5, rf: 3, heal: true})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 6, 16, 1024, "o")
	c.waitConfirmed(6)
	snap, err := c.metadata(leader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.CreateLocal(filepath.Join(t.TempDir(), "other"), []meta.BrokerID{1, 2, 3, 4, 5}, []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	follower := c.followers(leader, 1)[0]
	holder := c.followers(leader, 2)[1]
	before := c.facts()
	srcs := c.loopbackSources(10, 6)
	logged := map[int][]outsider{}
	from := map[int]int64{}
	for _, target := range []int{leader, follower} {
		claimed := leader // to a follower, the leader is who to be
		if target == leader {
			claimed = follower
		}
		from[target] = c.logSize(target)
		logged[target] = c.outsiders(claimed, holder, other, srcs)
		for _, rpc := range c.attacks(target, claimed, snap, snap.Segments[0]) {
			for _, o := range logged[target] {
				if c.send(raftwire.Dialer{Local: o.src, TLS: o.tls}, c.b(target).raft, rpc.typ, rpc.req, rpc.tail, nil) {
					t.Errorf("broker %d answered %s from %s", target, rpc.name, o.name)
				}
			}
		}
	}
	c.same(before, c.facts())
	// Each caller reached raft's port: the broker logged why it refused
	// it (once per source address a minute).
	for target, callers := range logged {
		for _, o := range callers {
			ip := o.src.(*net.TCPAddr).IP.String()
			c.eventually(10*time.Second, fmt.Sprintf("broker %d logs refusing %s (%s)", target, o.name, o.reason), func() bool {
				return len(c.logLines(target, from[target], "cluster: raft connection refused", `"remote":"`+ip+`:`, o.reason)) > 0
			})
		}
	}
	c.garbage(leader)
	c.garbage(follower)
	c.same(before, c.facts())
	c.load(leader, 2, 16, 1024, "after")
	after, err := c.metadata(leader)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(after.Segments) - len(snap.Segments); n != 2 {
		t.Fatalf("%d new segments after the attacks, want 2", n)
	}
	c.checkCopies(after)
}

// garbage sends random bytes (some starting like a TLS handshake) and a
// plaintext HTTP request to every listener of broker id; each connection
// is accepted, and closed without a successful answer.
func (c *cluster) garbage(id int) {
	c.t.Helper()
	b := c.b(id)
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	src := c.loopbackSources(20, 1)[0]
	for _, l := range []struct{ name, addr string }{{"raft", b.raft}, {"admin_listen", b.admin}, {"heal.rpc_listen", b.rpc}, {"heal.data_listen", b.data}} {
		var payloads [][]byte
		for i := range 4 {
			junk := make([]byte, 1+rng.IntN(4096))
			for j := range junk {
				junk[j] = byte(rng.Uint32())
			}
			if i%2 == 1 && len(junk) > 3 {
				junk[0], junk[1], junk[2] = 0x16, 0x03, 0x01 // a TLS handshake record header
			}
			payloads = append(payloads, junk)
		}
		payloads = append(payloads, []byte("POST /v1/load HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"))
		for _, p := range payloads {
			reply := c.poke(src, l.addr, p)
			if bytes.Contains(reply, []byte(" 200 ")) || bytes.Contains(reply, []byte("\"ok\"")) {
				c.t.Errorf("broker %d %s answered %d bytes of garbage with %q", id, l.name, len(p), reply)
			}
		}
		c.mustRun(id)
	}
	c.eventually(10*time.Second, fmt.Sprintf("broker %d logs refusing the garbage on its raft port", id), func() bool {
		return len(c.logLines(id, 0, "cluster: raft connection refused", `"remote":"127.0.0.20:`, "TLS handshake")) > 0
	})
}

// swapCerts replaces the certs directory of broker id (stopped) by the
// files of dir: ca.crt, broker.crt and broker.key.
func (c *cluster) swapCerts(id int, dir string) {
	c.t.Helper()
	dst := c.certs.BrokerDir(meta.BrokerID(id))
	for _, f := range []string{pki.CACert, pki.BrokerCert, pki.BrokerKey} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			c.t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dst, f)); err != nil {
			c.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), data, 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
}

// authFailed returns the reason the report gives for broker id in
// auth_failed, and whether it is there.
func authFailed(r *heal.Report, id int) (string, bool) {
	if r == nil {
		return "", false
	}
	for _, a := range r.AuthFailed {
		if int(a.Broker) == id {
			return a.Reason, true
		}
	}
	return "", false
}

// A broker restarted with a certificate of another CA: the leader's next
// passes report it auth_failed, naming the CA (status, CLI and metric),
// and never count it dead: past the grace delay its replica sets still
// name it, and a new batch places nothing on it. Both sides log why.
func TestBrokerWithAnotherCA(t *testing.T) {
	const grace = 4 * time.Second // longer than a restart takes: broker 5 is never dead while down
	c := startCluster(t, clusterOpts{n: 5, rf: 3, heal: true, grace: grace.String()})
	leader := c.waitLeader(10 * time.Second)
	c.load(leader, 10, 16, 1024, "a")
	c.waitConfirmed(10)
	const v = 5
	before, err := c.metadata(leader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.CreateLocal(filepath.Join(t.TempDir(), "other"), []meta.BrokerID{v}, []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.term(v); err != nil {
		t.Fatalf("broker %d: SIGTERM: %v", v, err)
	}
	c.swapCerts(v, other.BrokerDir(v))
	leader = c.waitLeader(10 * time.Second) // a new one if broker 5 led
	fromLeader, fromV := c.logSize(leader), c.logSize(v)
	c.launch(v)
	// Broker 5 answers only its own CA's clients now.
	op, err := pki.LoadClient(other.ClientDir(), string(pki.RoleOperator))
	if err != nil {
		t.Fatal(err)
	}
	strangers := rpc.NewClient(op, nil, 5*time.Second)
	defer strangers.Close()
	c.eventually(15*time.Second, "broker 5 up with the other CA's certificate", func() bool {
		c.mustRun(v)
		return strangers.Call(context.Background(), "GET", c.b(v).admin, "/v1/health", nil, nil) == nil && dialable(c.b(v).rpc)
	})
	// Every pass of the leader's that started after broker 5 was up is
	// read from its history: the first reports it auth_failed, and none
	// counts it dead.
	up := time.Now()
	feed := harness.NewPassFeed(up)
	first := c.untilPass(feed, 20*time.Second, "a pass of the leader started after broker 5 was up", func(p *plugin.PassRecord) (bool, string) {
		c.notDead(p, v, up)
		return p.Started.After(up), passLine(p)
	})
	reason, ok := authFailed(&first.Report, v)
	if !ok || !strings.Contains(reason, "another CA") {
		t.Fatalf("pass %d of broker %d: auth_failed %+v, dead %v; want broker %d, for another CA", first.Seq, first.Broker, first.Report.AuthFailed, first.Report.Dead, v)
	}
	t.Logf("broker %d auth_failed: %s", v, reason)
	c.neverDead(feed, v, up, first, grace)
	after, err := c.metadata(leader)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range before.Segments {
		now, _ := after.Segment(s.ID)
		if !meta.SameReplicas(now.Replicas, s.Replicas) || now.Version != s.Version {
			t.Errorf("%s moved while broker %d failed authentication: %v v%d -> %v v%d", s.ID, v, s.Replicas, s.Version, now.Replicas, now.Version)
		}
	}
	c.load(leader, 6, 16, 1024, "n")
	loaded, err := c.metadata(leader)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range loaded.Segments {
		if strings.HasPrefix(string(s.ID), "n") && s.HasReplica(v) {
			t.Errorf("new segment %s placed on broker %d, which cannot be authenticated: %v", s.ID, v, s.Replicas)
		}
	}
	if got := c.metric(leader, "malachi_heal_auth_failed_brokers"); got != 1 {
		t.Errorf("leader %d: malachi_heal_auth_failed_brokers = %v, want 1", leader, got)
	}
	out := c.malachi(append([]string{"status", "--admin", c.b(leader).admin}, c.operatorFlags()...)...)
	if r := row(out, "5"); !strings.Contains(r, "AUTH_FAILED") || strings.Contains(r, "DOWN") || !strings.Contains(out, "broker 5: auth_failed: ") {
		t.Errorf("malachi status shows broker 5 as %q; want AUTH_FAILED with its reason:\n%s", r, out)
	}
	if l := c.logLines(leader, fromLeader, "heal: cannot authenticate broker", `"peer":5`, "another CA"); len(l) == 0 {
		t.Errorf("leader %d logged no \"cannot authenticate broker\" line for broker %d naming the CA", leader, v)
	}
	if l := c.logLines(v, fromV, "signed by another CA"); len(l) == 0 {
		t.Errorf("broker %d logged no line refusing its peers' certificates as of another CA", v)
	}
}

// notDead fails the test when pass p, started after up, counts broker id
// dead.
func (c *cluster) notDead(p *plugin.PassRecord, id int, up time.Time) {
	c.t.Helper()
	if p.Started.After(up) && slices.Contains(p.Report.Dead, meta.BrokerID(id)) {
		c.t.Fatalf("pass %d of broker %d counts broker %d dead (auth_failed %+v)", p.Seq, p.Broker, id, p.Report.AuthFailed)
	}
}

// neverDead reads feed's passes, every one, until one ends grace plus a
// second after first, the first that reported broker id auth_failed,
// failing if any of them that started after up counts it dead. (Not
// answering probes, it is also listed suspect: seen within grace.)
func (c *cluster) neverDead(feed *harness.PassFeed, id int, up time.Time, first plugin.PassRecord, grace time.Duration) {
	c.t.Helper()
	c.t.Logf("pass %d: broker %d auth_failed, and suspect %v", first.Seq, id, first.Report.Suspect)
	last := c.untilPass(feed, grace+30*time.Second, fmt.Sprintf("the leader's passes past grace (%v) with broker %d auth_failed", grace, id), func(p *plugin.PassRecord) (bool, string) {
		c.notDead(p, id, up)
		return p.Ended.After(first.Ended.Add(grace + time.Second)), passLine(p)
	})
	c.t.Logf("passes %d to %d in grace + 1s after broker %d first auth_failed (tick 200ms; %s)", first.Seq, last.Seq, id, feed.Summary())
}

// rotate replaces broker id's broker.crt and broker.key by new ones of
// the cluster CA valid for lifetime, sends it SIGHUP, and returns the new
// certificate.
func (c *cluster) rotate(id int, lifetime time.Duration) *x509.Certificate {
	c.t.Helper()
	dir := c.certs.BrokerDir(meta.BrokerID(id))
	for _, f := range []string{pki.BrokerCert, pki.BrokerKey} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			c.t.Fatal(err)
		}
	}
	o := pki.Options{Dir: dir, CACert: filepath.Join(c.certs.Root, pki.CACert), CAKey: filepath.Join(c.certs.Root, pki.CAKey), Lifetime: lifetime}
	if err := pki.CreateBroker(o, meta.BrokerID(id), []string{"127.0.0.1", "localhost"}); err != nil {
		c.t.Fatal(err)
	}
	cert, err := pki.ReadCertificate(filepath.Join(dir, pki.BrokerCert))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := c.b(id).Signal(syscall.SIGHUP); err != nil {
		c.t.Fatalf("broker %d: SIGHUP: %v", id, err)
	}
	return cert
}

// rotationRate is TestCertificateRotationSIGHUP's catch-up cap, a broker:
// the killed broker's 9 segments of 512 KiB move 3 to each survivor, each
// a source and a target of about 1.5 MiB, so the pass's transfers last
// about 12 s or more; the rotation, struck when bytes are seen moving,
// takes well under one.
const rotationRate = 128 << 10

// waitBytesMoving waits until a live broker outside the replica set (in
// before) of a segment of broker v holds a copy of it short of its sealed
// size that grew since the previous scan, and says which; it fails the
// test after timeout or when every such segment was recorded elsewhere
// first (the window missed).
func (c *cluster) waitBytesMoving(before meta.Snapshot, v int, timeout time.Duration) string {
	c.t.Helper()
	prev := map[string]int64{}
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		for _, s := range before.Segments {
			if !s.HasReplica(meta.BrokerID(v)) {
				continue
			}
			for _, b := range c.brokers {
				if b.id == v || s.HasReplica(meta.BrokerID(b.id)) || !c.alive(b.id) {
					continue
				}
				p, err := b.CopyPath(s.ID)
				if err != nil {
					continue
				}
				fi, err := os.Stat(p)
				if err != nil {
					continue
				}
				key, full := fmt.Sprintf("%d/%s", b.id, s.ID), s.ByteSize+40
				if was, ok := prev[key]; ok && fi.Size() > was && fi.Size() < full {
					return fmt.Sprintf("broker %d's copy of %s at %d of %d bytes, %d more than the scan before", b.id, s.ID, fi.Size(), full, fi.Size()-was)
				}
				prev[key] = fi.Size()
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no copy of broker %d's segments seen growing on a target within %v", v, timeout)
		}
		if i%20 == 19 {
			if snap, err := c.metadata(c.anyAlive(v)); err == nil {
				if ok, _ := c.fullyHealed(snap, 3, map[meta.BrokerID]bool{meta.BrokerID(v): true}); ok {
					c.t.Fatalf("MISSED the window: broker %d's segments were all recorded elsewhere before a scan saw bytes moving (catch-up at %d B/s a broker)", v, rotationRate)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// servedCert is the certificate a fresh TLS connection to addr sees.
func (c *cluster) servedCert(addr string) *x509.Certificate {
	c.t.Helper()
	cfg, err := raftwire.ClientConfig(filepath.Join(c.certs.ClientDir(), pki.ClientCert("operator")), filepath.Join(c.certs.ClientDir(), pki.ClientKey("operator")))
	if err != nil {
		c.t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		c.t.Fatalf("TLS to %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// Certificates rotated under a running heal: every surviving broker's
// broker.crt and broker.key are replaced (same CA, 20 days instead of five
// years) and SIGHUP sent while a heal pass backfills at a throttled rate.
// Each broker's status shows the new expiry, a fresh TLS connection to its
// admin and heal rpc ports gets the new certificate, `malachi status`
// warns of each (under 30 days), and the heal completes with nothing
// refused for credentials anywhere.
func TestCertificateRotationSIGHUP(t *testing.T) {
	c, leader, before := throttledClusterAt(t, rotationRate)
	v := victim(c, before, leader)
	c.kill(v)
	dead := map[meta.BrokerID]bool{meta.BrokerID(v): true}
	var live []int
	for _, b := range c.brokers {
		if b.id != v {
			live = append(live, b.id)
		}
	}
	from := map[int]int64{}
	for _, id := range live {
		from[id] = c.logSize(id)
	}
	// Strike while bytes move, never by luck of timing: the backfills
	// of a pass are recorded together when the last one is done, so a
	// committed backfill (backfill_bytes_total) comes at the very end.
	moving := c.waitBytesMoving(before, v, 60*time.Second)
	const lifetime = 20 * 24 * time.Hour
	rotated := map[int]*x509.Certificate{}
	for _, id := range live {
		rotated[id] = c.rotate(id, lifetime)
	}
	snap, err := c.metadata(c.anyAlive(v))
	if err != nil {
		t.Fatalf("the metadata after the rotation: %v", err)
	}
	pending := 0
	for _, s := range snap.Segments {
		if s.HasReplica(meta.BrokerID(v)) {
			pending++
		}
	}
	t.Logf("rotated while bytes moved (%s): %d segments still on the killed broker after the rotation", moving, pending)
	if ok, _ := c.fullyHealed(snap, 3, dead); ok {
		t.Fatalf("MISSED the window: the heal finished before the certificates were rotated (bytes seen moving: %s; catch-up at %d B/s a broker)", moving, rotationRate)
	}
	for _, id := range live {
		want := rotated[id]
		c.eventually(10*time.Second, fmt.Sprintf("broker %d's status shows its new certificate", id), func() bool {
			var st struct {
				Certificates []struct {
					File     string    `json:"file"`
					NotAfter time.Time `json:"not_after"`
				} `json:"certificates"`
			}
			if err := c.get(id, "/v1/status", &st); err != nil {
				return false
			}
			for _, cs := range st.Certificates {
				if cs.File == pki.BrokerCert {
					return cs.NotAfter.Equal(want.NotAfter)
				}
			}
			return false
		})
		for _, addr := range []string{c.b(id).admin, c.b(id).rpc} {
			if got := c.servedCert(addr); got.SerialNumber.Cmp(want.SerialNumber) != 0 || !got.NotAfter.Equal(want.NotAfter) {
				t.Errorf("broker %d at %s serves the certificate not after %v, want the new one (not after %v)", id, addr, got.NotAfter, want.NotAfter)
			}
		}
	}
	feed := harness.NewPassFeed(time.Now())
	var healed meta.Snapshot
	c.eventually(120*time.Second, "healed off the killed broker", func() bool {
		lb := c.h.Leader(context.Background())
		if lb == nil {
			return false
		}
		snap, err := c.metadata(int(lb.ID))
		full, _ := c.fullyHealed(snap, 3, dead)
		healed = snap
		return err == nil && full
	})
	c.untilPass(feed, 60*time.Second, "a pass over the healed metadata with every copy confirmed", func(p *plugin.PassRecord) (bool, string) {
		r := &p.Report
		return r.Index >= healed.Index && r.UnderReplicated == 0 && r.Anomalies == 0 && len(r.Unsettled) == 0 && len(r.Failed) == 0,
			fmt.Sprintf("%s; want index %d or later", passLine(p), healed.Index)
	})
	after, _ := c.metadata(c.waitLeader(10 * time.Second))
	c.checkCopies(after)
	out := c.malachi(append([]string{"status", "--admin", c.b(c.waitLeader(10 * time.Second)).admin}, c.operatorFlags()...)...)
	for _, id := range live {
		if !strings.Contains(out, fmt.Sprintf("WARNING: broker %d certificate broker.crt (not after %s)", id, rotated[id].NotAfter.UTC().Format(time.RFC3339))) {
			t.Errorf("malachi status does not warn of broker %d's certificate expiring in 20 days:\n%s", id, out)
		}
	}
	for _, id := range live {
		if n := c.metricSum(id, "malachi_heal_auth_refused_total"); n != 0 {
			t.Errorf("broker %d refused %v heal rpc requests for their credentials", id, n)
		}
		for _, what := range []string{"heal: cannot authenticate broker", "cluster: raft connection refused", "certificate not trusted"} {
			if l := c.logLines(id, from[id], what); len(l) > 0 {
				t.Errorf("broker %d logged %d lines %q, the first: %s", id, len(l), what, l[0])
			}
		}
	}
}

// A cluster in insecure mode says so everywhere an operator looks: each
// broker's log at start, malachi_heal_insecure 1 on /metrics, insecure in
// /v1/status, and `malachi status --insecure`. (That insecure mode refuses
// a listener off loopback, exit 2 naming the key, is TestBadConfigExit2's.)
func TestInsecureModeSaysSo(t *testing.T) {
	c := startCluster(t, clusterOpts{n: 3, rf: 3, heal: true, insecure: true})
	leader := c.waitLeader(10 * time.Second)
	for _, b := range c.brokers {
		if l := c.logLines(b.id, 0, `"level":"warn"`, "INSECURE MODE", "insecure = true"); len(l) != 1 {
			t.Errorf("broker %d logged %d INSECURE MODE warnings at start, want 1", b.id, len(l))
		}
		if got := c.metric(b.id, "malachi_heal_insecure"); got != 1 {
			t.Errorf("broker %d: malachi_heal_insecure = %v, want 1", b.id, got)
		}
		var st struct {
			Insecure     *bool           `json:"insecure"`
			Certificates json.RawMessage `json:"certificates"`
		}
		if err := c.get(b.id, "/v1/status", &st); err != nil || st.Insecure == nil || !*st.Insecure || st.Certificates != nil {
			t.Errorf("broker %d /v1/status: insecure %v, certificates %s, %v; want insecure true and no certificates", b.id, st.Insecure, st.Certificates, err)
		}
	}
	out := c.malachi("status", "--admin", c.b(leader).admin, "--insecure")
	if !strings.Contains(out, "INSECURE MODE: brokers [1 2 3] report insecure = true") {
		t.Errorf("malachi status --insecure does not name the insecure brokers:\n%s", out)
	}
}
