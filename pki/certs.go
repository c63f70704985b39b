package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// Certs is a loaded certs directory: the cluster CA and the holder's own
// certificate and key. It is safe for concurrent use; Reload swaps the
// material under the TLS configs it built.
type Certs struct {
	dir              string
	crtName, keyName string

	mu  sync.RWMutex
	mat *material // protected by mu; never nil after Load
}

// material is one consistent load of the files.
type material struct {
	pool *x509.CertPool
	cas  []*x509.Certificate
	pair tls.Certificate // Leaf set
	key  crypto.Signer
	id   Identity
}

// LoadBroker loads dir/ca.crt, dir/broker.crt and dir/broker.key.
func LoadBroker(dir string) (*Certs, error) {
	c := &Certs{dir: dir, crtName: BrokerCert, keyName: BrokerKey}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	if c.Identity().Role != RoleBroker {
		return nil, fmt.Errorf("%w: %s names %s, not a broker", ErrFiles, filepath.Join(dir, BrokerCert), c.Identity())
	}
	return c, nil
}

// LoadClient loads dir/ca.crt and the pair of client name; name "" takes
// the only client pair in dir (an error lists them when there are
// several).
func LoadClient(dir, name string) (*Certs, error) {
	if name == "" {
		names, err := ClientNames(dir)
		if err != nil {
			return nil, err
		}
		switch len(names) {
		case 0:
			return nil, fmt.Errorf("%w: %s holds no client.NAME.crt (make one with `malachi cert create-client NAME --role viewer`)", ErrFiles, dir)
		case 1:
			name = names[0]
		default:
			return nil, fmt.Errorf("%w: %s holds client certificates for %s: choose one with --user", ErrFiles, dir, strings.Join(names, ", "))
		}
	}
	c := &Certs{dir: dir, crtName: ClientCert(name), keyName: ClientKey(name)}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// ClientNames lists the names of the client pairs in dir, sorted.
func ClientNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFiles, err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, "client.") && strings.HasSuffix(n, ".crt") {
			names = append(names, strings.TrimSuffix(strings.TrimPrefix(n, "client."), ".crt"))
		}
	}
	sort.Strings(names)
	return names, nil
}

// Dir is the certs directory.
func (c *Certs) Dir() string { return c.dir }

// Reload reads the files again. On any error it keeps the material it had
// and says which file was wrong.
func (c *Certs) Reload() error {
	caPath := filepath.Join(c.dir, CACert)
	cas, err := readCerts(caPath)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	for _, ca := range cas {
		if !ca.IsCA {
			return fmt.Errorf("%w: %s: %q is not a CA certificate", ErrFiles, caPath, ca.Subject.CommonName)
		}
		pool.AddCert(ca)
	}
	crtPath, keyPath := filepath.Join(c.dir, c.crtName), filepath.Join(c.dir, c.keyName)
	pair, err := tls.LoadX509KeyPair(crtPath, keyPath)
	if err != nil {
		return fmt.Errorf("%w: %s and %s: %v", ErrFiles, crtPath, keyPath, err)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return fmt.Errorf("%w: %s: key type %T cannot sign", ErrFiles, keyPath, pair.PrivateKey)
	}
	m := &material{pool: pool, cas: cas, pair: pair, key: key}
	if m.id, err = IdentityOf(pair.Leaf); err != nil {
		return fmt.Errorf("%s: %w", crtPath, err)
	}
	if _, err := m.verify(pair.Leaf, nil, time.Now(), x509.ExtKeyUsageClientAuth); err != nil {
		return fmt.Errorf("%s: %w", crtPath, err)
	}
	c.mu.Lock()
	old := c.mat
	if old != nil && old.id != m.id {
		c.mu.Unlock()
		return fmt.Errorf("%w: %s now names %s, was %s: an identity does not change by reload", ErrFiles, crtPath, m.id, old.id)
	}
	c.mat = m
	c.mu.Unlock()
	return nil
}

func (c *Certs) material() *material {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mat
}

// Identity is who the loaded certificate names.
func (c *Certs) Identity() Identity { return c.material().id }

// Expiry is one certificate's end of validity.
type Expiry struct {
	// File is the certificate's file name in the certs directory.
	File string
	// Serial is the certificate's serial number in hex: ca.crt may hold
	// several CAs (while one is rotated in).
	Serial   string
	NotAfter time.Time
}

// Expiries lists when the CA certificates and the own certificate expire.
func (c *Certs) Expiries() []Expiry {
	m := c.material()
	out := make([]Expiry, 0, len(m.cas)+1)
	for _, ca := range m.cas {
		out = append(out, Expiry{File: CACert, Serial: ca.SerialNumber.Text(16), NotAfter: ca.NotAfter})
	}
	return append(out, Expiry{File: c.crtName, Serial: m.pair.Leaf.SerialNumber.Text(16), NotAfter: m.pair.Leaf.NotAfter})
}

// verify checks leaf (with intermediates) against the CA pool at now for
// usage and returns its identity.
func (m *material) verify(leaf *x509.Certificate, intermediates []*x509.Certificate, now time.Time, usage x509.ExtKeyUsage) (Identity, error) {
	opts := x509.VerifyOptions{Roots: m.pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}, Intermediates: x509.NewCertPool()}
	for _, c := range intermediates {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return Identity{}, fmt.Errorf("%w: %q: %s", ErrUntrusted, leaf.Subject.CommonName, describe(err, leaf, now))
	}
	return IdentityOf(leaf)
}

// describe says in words why verification failed.
func describe(err error, leaf *x509.Certificate, now time.Time) string {
	var inv x509.CertificateInvalidError
	var unk x509.UnknownAuthorityError
	switch {
	case errors.As(err, &inv) && inv.Reason == x509.Expired:
		if now.After(leaf.NotAfter) {
			return fmt.Sprintf("expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if now.Before(leaf.NotBefore) {
			return fmt.Sprintf("not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339))
		}
		return "outside its validity (or its CA's)"
	case errors.As(err, &inv) && inv.Reason == x509.IncompatibleUsage:
		return "not issued for this use (a client certificate cannot act as a broker)"
	case errors.As(err, &unk):
		return "signed by another CA (unknown authority)"
	}
	return err.Error()
}

// VerifyPeer checks a certificate chain a peer presented (leaf first)
// against the cluster CA for client authentication and returns who it
// names. No certificate at all is an error wrapping ErrUntrusted that
// says so.
func (c *Certs) VerifyPeer(chain []*x509.Certificate) (Identity, error) {
	if len(chain) == 0 {
		return Identity{}, fmt.Errorf("%w: no client certificate presented (connect with a certificate of the cluster CA)", ErrUntrusted)
	}
	return c.material().verify(chain[0], chain[1:], time.Now(), x509.ExtKeyUsageClientAuth)
}

// ServerConfig is the TLS 1.3 config of a listener: it presents the own
// certificate (reloaded) and asks for a client certificate without
// verifying it during the handshake: the caller verifies it with
// VerifyPeer and refuses with a message that says why (an HTTP 401, a
// closed raft connection), where a failed handshake would say nothing.
func (c *Certs) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequestClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			p := c.material().pair
			return &p, nil
		},
	}
}

// ClientConfig is the TLS 1.3 config of a dialer: it presents the own
// certificate (reloaded) and accepts only a server whose certificate
// chains to the cluster CA, is valid for the dialed host name, and names
// a broker.
func (c *Certs) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // VerifyConnection verifies against the reloadable pool
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			p := c.material().pair
			return &p, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := c.VerifyServer(cs)
			return err
		},
	}
}

// VerifyServer checks the certificate a server presented in cs: chain to
// the CA for server authentication, host name cs.ServerName, and a broker
// identity, which it returns.
func (c *Certs) VerifyServer(cs tls.ConnectionState) (Identity, error) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, fmt.Errorf("%w: the server presented no certificate", ErrUntrusted)
	}
	leaf := cs.PeerCertificates[0]
	id, err := c.material().verify(leaf, cs.PeerCertificates[1:], time.Now(), x509.ExtKeyUsageServerAuth)
	if err != nil {
		return Identity{}, err
	}
	if cs.ServerName != "" {
		if err := leaf.VerifyHostname(cs.ServerName); err != nil {
			return Identity{}, fmt.Errorf("%w: %s: %v", ErrUntrusted, id, err)
		}
	}
	if id.Role != RoleBroker {
		return Identity{}, fmt.Errorf("%w: the server's certificate names %s, not a broker", ErrUntrusted, id)
	}
	return id, nil
}

// SignTicket signs payload with the own key (ECDSA over SHA-256) and
// returns the signature and the own certificate's DER, for a catch-up
// ticket.
func (c *Certs) SignTicket(payload []byte) (sig, certDER []byte, err error) {
	m := c.material()
	sum := sha256.Sum256(payload)
	sig, err = m.key.Sign(rand.Reader, sum[:], crypto.SHA256)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: sign ticket: %w", err)
	}
	return sig, m.pair.Leaf.Raw, nil
}

// VerifyTicket checks that certDER chains to the cluster CA and names a
// broker, and that sig is its key's signature over payload. It returns the
// broker.
func (c *Certs) VerifyTicket(payload, sig, certDER []byte) (meta.BrokerID, error) {
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return 0, fmt.Errorf("%w: ticket issuer certificate: %v", ErrUntrusted, err)
	}
	id, err := c.material().verify(cert, nil, time.Now(), x509.ExtKeyUsageClientAuth)
	if err != nil {
		return 0, fmt.Errorf("ticket issuer: %w", err)
	}
	if id.Role != RoleBroker {
		return 0, fmt.Errorf("%w: ticket issued by %s, not a broker", ErrUntrusted, id)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return 0, fmt.Errorf("%w: ticket issuer %s has a %T key, want ECDSA", ErrUntrusted, id, cert.PublicKey)
	}
	sum := sha256.Sum256(payload)
	if !ecdsa.VerifyASN1(pub, sum[:], sig) {
		return 0, fmt.Errorf("%w: ticket signature does not match %s's key", ErrUntrusted, id)
	}
	return id.Broker, nil
}
