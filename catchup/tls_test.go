package catchup

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// testPKI is a throwaway cluster CA (ECDSA P-256) with a certificate for
// the source and one for the target, and a second CA with a target
// certificate of its own: a stranger's.
type testPKI struct {
	pool, otherPool          *x509.CertPool
	server, client, stranger tls.Certificate
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	caCert, caKey := newCA(t, "cluster CA")
	otherCert, otherKey := newCA(t, "another CA")
	p := &testPKI{pool: x509.NewCertPool(), otherPool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	p.otherPool.AddCert(otherCert)
	p.server = newLeaf(t, "broker 2", caCert, caKey)
	p.client = newLeaf(t, "broker 3", caCert, caKey)
	p.stranger = newLeaf(t, "broker 3", otherCert, otherKey)
	return p
}

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// newLeaf is a broker certificate for 127.0.0.1, for both ends of a TLS
// connection, signed by ca.
func newLeaf(t testing.TB, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serverTLS is the source's config: its certificate, and only clients of
// the cluster CA. edit (may be nil) changes it.
func (p *testPKI) serverTLS(edit func(*tls.Config)) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	if edit != nil {
		edit(c)
	}
	return c
}

// clientTLS is a target's config presenting cert and trusting roots.
func clientTLS(cert tls.Certificate, roots *x509.CertPool) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots}
}

// newTLSFixture is newFixture's copy served over TLS by a new server,
// fetched by a client of the cluster CA.
func newTLSFixture(t *testing.T, p *testPKI) *fixture {
	fx := newFixture(t, 3<<20+12345, Limits{}, ModeZeroCopy, ModeZeroCopy)
	fx.srv = &Server{Source: fx.src, Self: testSource, Tickets: testCA, TLS: p.serverTLS(nil), Mode: ModeZeroCopy}
	fx.addr = startServer(t, fx.srv)
	fx.cl.TLS = clientTLS(p.client, p.pool)
	return fx
}

// Over TLS the copy arrives whole, with user-space copies at both ends
// (no sendfile, no splice), and the ticket is still checked.
func TestTLSTransfer(t *testing.T) {
	fx := newTLSFixture(t, newTestPKI(t))
	if _, err := fx.cl.Fetch(context.Background(), fx.addr, fx.seg, fx.ticket(t, nil), fx.sink, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fx.targetBytes(t), fx.data) {
		t.Fatal("target differs from the source")
	}
	waitFor(t, "the server to count its transfer", func() bool { return fx.srv.Stats().Transfers == 1 })
	ss, cs := fx.srv.Stats(), fx.cl.Stats()
	if ss.Transfers != 1 || ss.Sendfile != 0 || ss.Write == 0 {
		t.Errorf("server stats %+v: want one transfer by write, no sendfile", ss)
	}
	if cs.Transfers != 1 || cs.Splice != 0 || cs.Read == 0 {
		t.Errorf("client stats %+v: want one transfer by read, no splice", cs)
	}
	forged, err := IssueTicket(newFakeKey(testIssuer, 9), testTicket(fx.seg, int64(len(fx.data))))
	if err != nil {
		t.Fatal(err)
	}
	_, err = fx.cl.Fetch(context.Background(), fx.addr, fx.seg, forged, &fileSink{dir: t.TempDir(), want: fx.sink.want}, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != CodeUnauthenticated {
		t.Fatalf("a forged ticket over TLS: got %v, want a remote %v", err, ErrUnauthenticated)
	}
}

// A TLS data listener refuses a client whose certificate is not of the
// cluster CA, or that speaks no TLS; a client refuses a server it cannot
// verify, and a server that speaks no TLS. Nothing is opened or sent.
func TestTLSRefusals(t *testing.T) {
	p := newTestPKI(t)
	plain := newFixture(t, 1<<12, Limits{}, ModeDefault, ModeDefault)
	for _, c := range []struct {
		name    string
		cl      *Client
		plain   bool // against plain's server, without TLS
		want    error
		says    string
		refused uint64 // at least, by the TLS server
	}{
		{"client of another CA", &Client{TLS: clientTLS(p.stranger, p.pool)}, false, ErrUnauthenticated, "refused this broker's certificate", 1},
		{"client that does not trust the server", &Client{TLS: clientTLS(p.client, p.otherPool)}, false, ErrUnauthenticated, "the server's certificate", 0},
		{"client without TLS", &Client{}, false, ErrUnauthenticated, "speaks TLS: set Client.TLS", 1},
		{"server without TLS", &Client{TLS: clientTLS(p.client, p.pool)}, true, ErrMalformed, "does not speak TLS", 0},
	} {
		fx := newTLSFixture(t, p)
		addr := fx.addr
		if c.plain {
			addr = plain.addr
		}
		_, err := c.cl.Fetch(context.Background(), addr, fx.seg, fx.ticket(t, nil), fx.sink, nil)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want %v saying %q", c.name, err, c.want, c.says)
		}
		waitFor(t, c.name+": the refusal counted", func() bool { return fx.srv.Stats().Refused >= c.refused })
		if n := fx.src.opens.Load() + plain.src.opens.Load(); n != 0 {
			t.Fatalf("%s: the source was opened %d times", c.name, n)
		}
		if st := fx.srv.Stats(); st.Bytes != 0 || len(fx.targetBytes(t)) != 0 {
			t.Fatalf("%s: %d bytes sent, %d written", c.name, st.Bytes, len(fx.targetBytes(t)))
		}
	}
}
