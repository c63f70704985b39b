package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/meta"
)

func mustLocal(t *testing.T, ids ...meta.BrokerID) Local {
	t.Helper()
	l, err := CreateLocal(t.TempDir(), ids, []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCreateLocalIdentitiesAndModes(t *testing.T) {
	l := mustLocal(t, 1, 3)
	b, err := LoadBroker(l.BrokerDir(3))
	if err != nil {
		t.Fatal(err)
	}
	if id := b.Identity(); id.Role != RoleBroker || id.Broker != 3 {
		t.Fatalf("broker 3's certificate names %v", id)
	}
	for _, name := range []string{"operator", "viewer", "client"} {
		c, err := LoadClient(l.ClientDir(), name)
		if err != nil {
			t.Fatal(err)
		}
		if id := c.Identity(); string(id.Role) != name || id.Name != name {
			t.Fatalf("client %s names %v", name, id)
		}
	}
	if _, err := LoadClient(l.ClientDir(), ""); err == nil || !strings.Contains(err.Error(), "operator, viewer") {
		t.Fatalf("LoadClient without a name in a dir of three: %v, want the names listed", err)
	}
	for _, p := range []string{filepath.Join(l.Root, CAKey), filepath.Join(l.BrokerDir(1), BrokerKey), filepath.Join(l.ClientDir(), ClientKey("viewer"))} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, st.Mode().Perm())
		}
	}
}

func TestCreateRefusesToOverwrite(t *testing.T) {
	l := mustLocal(t, 1)
	before, _ := os.ReadFile(filepath.Join(l.Root, CAKey))
	if err := CreateCA(Options{Dir: l.Root}); !errors.Is(err, ErrExists) {
		t.Fatalf("CreateCA over an existing CA: %v, want ErrExists", err)
	}
	o := Options{Dir: l.BrokerDir(1), CAKey: filepath.Join(l.Root, CAKey)}
	if err := CreateBroker(o, 1, []string{"h"}); !errors.Is(err, ErrExists) {
		t.Fatalf("CreateBroker over an existing pair: %v, want ErrExists", err)
	}
	after, _ := os.ReadFile(filepath.Join(l.Root, CAKey))
	if string(before) != string(after) {
		t.Fatal("the CA key changed")
	}
}

func TestCreateClientRejectsBadInput(t *testing.T) {
	l := mustLocal(t)
	o := Options{Dir: l.ClientDir(), CAKey: filepath.Join(l.Root, CAKey)}
	if err := CreateClient(o, "../x", RoleOperator); err == nil {
		t.Fatal("a client name with a slash was accepted")
	}
	if err := CreateClient(o, "x", RoleBroker); err == nil {
		t.Fatal("a client with role broker was accepted")
	}
	if _, err := ParseRole("admin"); err == nil {
		t.Fatal("role admin was accepted")
	}
}

// handshake runs one TLS handshake between a server of srv and a client
// of cli and returns the server's view of the client's chain and the
// client's error.
func handshake(t *testing.T, srv, cli *tls.Config, serverName string) (tls.ConnectionState, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan tls.ConnectionState, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(got)
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if tc.Handshake() == nil {
			got <- tc.ConnectionState()
			_, _ = io.Copy(io.Discard, c)
		}
		close(got)
	}()
	cfg := cli.Clone()
	cfg.ServerName = serverName
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	return <-got, nil
}

func TestTLSVerifiesBothSides(t *testing.T) {
	l := mustLocal(t, 1, 2)
	other := mustLocal(t, 9)
	b1, _ := LoadBroker(l.BrokerDir(1))
	b2, _ := LoadBroker(l.BrokerDir(2))
	stranger, _ := LoadBroker(other.BrokerDir(9))
	viewer, _ := LoadClient(l.ClientDir(), "viewer")

	cs, err := handshake(t, b1.ServerConfig(), b2.ClientConfig(), "127.0.0.1")
	if err != nil {
		t.Fatalf("broker 2 → broker 1: %v", err)
	}
	if id, err := b1.VerifyPeer(cs.PeerCertificates); err != nil || id.Broker != 2 {
		t.Fatalf("broker 1 sees %v, %v; want broker 2", id, err)
	}
	// A broker of another CA refuses broker 1's certificate as a server.
	if _, err := handshake(t, b1.ServerConfig(), stranger.ClientConfig(), "127.0.0.1"); err == nil {
		t.Fatal("a broker of another CA accepted broker 1's certificate")
	}
	cli := viewer.ClientConfig()
	cs, err = handshake(t, b1.ServerConfig(), cli, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := b1.VerifyPeer(cs.PeerCertificates); err != nil || id.Role != RoleViewer {
		t.Fatalf("viewer: %v, %v", id, err)
	}
	// The client side refuses a server of another CA, and a wrong host.
	if _, err := handshake(t, stranger.ServerConfig(), cli, "127.0.0.1"); err == nil || !strings.Contains(err.Error(), "another CA") {
		t.Fatalf("client to a server of another CA: %v, want refused naming the CA", err)
	}
	if _, err := handshake(t, b1.ServerConfig(), cli, "elsewhere.example"); err == nil {
		t.Fatal("client accepted a certificate not valid for the dialed host")
	}
	// A server asked for nothing gets no chain: VerifyPeer names it.
	if _, err := b1.VerifyPeer(nil); err == nil || !strings.Contains(err.Error(), "no client certificate") {
		t.Fatalf("VerifyPeer(nil): %v", err)
	}
	if _, err := stranger.VerifyPeer(cs.PeerCertificates); err == nil || !strings.Contains(err.Error(), "another CA") {
		t.Fatalf("a viewer of another CA: %v", err)
	}
}

func TestExpiredAndClientAsServer(t *testing.T) {
	l := mustLocal(t, 1)
	o := Options{Dir: filepath.Join(l.Root, "old"), CACert: filepath.Join(l.Root, CACert), CAKey: filepath.Join(l.Root, CAKey),
		Now: time.Now().Add(-48 * time.Hour), Lifetime: 24 * time.Hour}
	if err := CreateBroker(o, 2, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	old, err := tls.LoadX509KeyPair(filepath.Join(o.Dir, BrokerCert), filepath.Join(o.Dir, BrokerKey))
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := LoadBroker(l.BrokerDir(1))
	if _, err := b1.VerifyPeer([]*x509.Certificate{old.Leaf}); err == nil || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("expired certificate: %v, want 'expired at'", err)
	}
	if err := copyCA(l.Root, o.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadBroker(o.Dir); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("loading an expired broker certificate: %v", err)
	}
	// A viewer's certificate is not valid for server authentication.
	viewer, _ := LoadClient(l.ClientDir(), "viewer")
	srv := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{viewer.material().pair}}
	if _, err := handshake(t, srv, b1.ClientConfig(), "127.0.0.1"); err == nil || !strings.Contains(err.Error(), "not issued for this use") {
		t.Fatalf("a viewer acting as a server: %v", err)
	}
}

func TestReloadSwapsOrKeeps(t *testing.T) {
	l := mustLocal(t, 1)
	b, _ := LoadBroker(l.BrokerDir(1))
	before := b.Expiries()
	// Replace broker 1's pair by a new one from the same CA.
	dir := l.BrokerDir(1)
	os.Remove(filepath.Join(dir, BrokerCert))
	os.Remove(filepath.Join(dir, BrokerKey))
	o := Options{Dir: dir, CAKey: filepath.Join(l.Root, CAKey), Lifetime: 48 * time.Hour}
	if err := CreateBroker(o, 1, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	after := b.Expiries()
	if !after[len(after)-1].NotAfter.Before(before[len(before)-1].NotAfter) {
		t.Fatalf("reload kept the old certificate: %v then %v", before, after)
	}
	// A broken file: Reload fails and keeps the material.
	if err := os.WriteFile(filepath.Join(dir, BrokerCert), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(); err == nil {
		t.Fatal("reload of a garbage certificate succeeded")
	}
	if got := b.Expiries(); got[len(got)-1] != after[len(after)-1] {
		t.Fatal("a failed reload changed the material")
	}
}

func TestTicketSignature(t *testing.T) {
	l := mustLocal(t, 1, 2)
	other := mustLocal(t, 1)
	b1, _ := LoadBroker(l.BrokerDir(1))
	b2, _ := LoadBroker(l.BrokerDir(2))
	forger, _ := LoadBroker(other.BrokerDir(1))
	payload := []byte("segment s-1 bytes [0, 100) from 2 to 3")
	sig, der, err := b1.SignTicket(payload)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := b2.VerifyTicket(payload, sig, der); err != nil || id != 1 {
		t.Fatalf("VerifyTicket: %v, %v", id, err)
	}
	if _, err := b2.VerifyTicket(append(payload, 'x'), sig, der); err == nil {
		t.Fatal("a changed payload verified")
	}
	fsig, fder, _ := forger.SignTicket(payload)
	if _, err := b2.VerifyTicket(payload, fsig, fder); err == nil || !strings.Contains(err.Error(), "another CA") {
		t.Fatalf("a ticket of another CA: %v", err)
	}
	// A real broker certificate with a signature by another key.
	if _, err := b2.VerifyTicket(payload, fsig, der); err == nil {
		t.Fatal("a signature by another key verified")
	}
}
