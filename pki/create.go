package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/malachi-log/malachi/meta"
)

// File names in a certs directory (see the package doc).
const (
	CACert     = "ca.crt"
	CAKey      = "ca.key"
	BrokerCert = "broker.crt"
	BrokerKey  = "broker.key"
)

// ClientCert and ClientKey are the file names of client name's pair.
func ClientCert(name string) string { return "client." + name + ".crt" }

// ClientKey: see ClientCert.
func ClientKey(name string) string { return "client." + name + ".key" }

// Default lifetimes, as cockroach's: the CA ten years, the others five.
const (
	DefaultCALifetime   = 10 * 365 * 24 * time.Hour
	DefaultCertLifetime = 5 * 365 * 24 * time.Hour
)

// Options say where and for how long a certificate is made. Zero values
// take the defaults.
type Options struct {
	// Dir is the certs directory written to. Required.
	Dir string
	// CACert and CAKey are the CA's files; "" means Dir/ca.crt and
	// Dir/ca.key. Unused by CreateCA.
	CACert, CAKey string
	// Lifetime is how long the certificate is valid from now.
	Lifetime time.Duration
	// Now is the issue time; zero means time.Now (tests make expired
	// certificates with it).
	Now time.Time
}

func (o Options) now() time.Time {
	if o.Now.IsZero() {
		return time.Now()
	}
	return o.Now
}

func (o Options) lifetime(def time.Duration) time.Duration {
	if o.Lifetime > 0 {
		return o.Lifetime
	}
	return def
}

func (o Options) caFiles() (string, string) {
	crt, key := o.CACert, o.CAKey
	if crt == "" {
		crt = filepath.Join(o.Dir, CACert)
	}
	if key == "" {
		key = filepath.Join(o.Dir, CAKey)
	}
	return crt, key
}

// CreateCA writes a new cluster CA, Dir/ca.crt and Dir/ca.key (0600),
// refusing (ErrExists) if either exists.
func CreateCA(o Options) error {
	if o.Dir == "" {
		return fmt.Errorf("%w: no directory given", ErrFiles)
	}
	crtPath, keyPath := filepath.Join(o.Dir, CACert), filepath.Join(o.Dir, CAKey)
	if err := refuseExisting(crtPath, keyPath); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: CA key: %w", err)
	}
	now := o.now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Malachi heal cluster CA", Organization: []string{"Malachi"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(o.lifetime(DefaultCALifetime)),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := sign(tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	return writePair(o.Dir, crtPath, keyPath, der, key)
}

// CreateBroker writes Dir/broker.crt and Dir/broker.key for broker id,
// valid for the given host names and addresses (what peers dial), signed
// by the CA. It refuses (ErrExists) to overwrite either file.
func CreateBroker(o Options, id meta.BrokerID, hosts []string) error {
	if id == 0 {
		return fmt.Errorf("pki: broker id 0 is reserved")
	}
	if len(hosts) == 0 {
		return fmt.Errorf("pki: broker %d: no --host given: list every name and address peers dial", id)
	}
	ident := Identity{Role: RoleBroker, Broker: id}
	tmpl := leafTemplate(o, ident, fmt.Sprintf("broker %d", id), x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return createLeaf(o, tmpl, BrokerCert, BrokerKey)
}

// CreateClient writes Dir/client.NAME.crt and .key for a person or tool
// with role, signed by the CA. It refuses (ErrExists) to overwrite.
func CreateClient(o Options, name string, role Role) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("pki: client %w", err)
	}
	if _, err := ParseRole(string(role)); err != nil {
		return err
	}
	tmpl := leafTemplate(o, Identity{Role: role, Name: name}, name, x509.ExtKeyUsageClientAuth)
	return createLeaf(o, tmpl, ClientCert(name), ClientKey(name))
}

func leafTemplate(o Options, id Identity, cn string, usage ...x509.ExtKeyUsage) *x509.Certificate {
	now := o.now()
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: []string{"Malachi"}, OrganizationalUnit: []string{string(id.Role)}},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(o.lifetime(DefaultCertLifetime)),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: usage,
		URIs:        []*url.URL{id.uri()},
	}
}

func createLeaf(o Options, tmpl *x509.Certificate, crtName, keyName string) error {
	if o.Dir == "" {
		return fmt.Errorf("%w: no directory given", ErrFiles)
	}
	crtPath, keyPath := filepath.Join(o.Dir, crtName), filepath.Join(o.Dir, keyName)
	if err := refuseExisting(crtPath, keyPath); err != nil {
		return err
	}
	caCrtPath, caKeyPath := o.caFiles()
	caCert, err := readCert(caCrtPath)
	if err != nil {
		return err
	}
	caKey, err := readKey(caKeyPath)
	if err != nil {
		return err
	}
	if !caCert.IsCA {
		return fmt.Errorf("%w: %s is not a CA certificate", ErrFiles, caCrtPath)
	}
	if tmpl.NotAfter.After(caCert.NotAfter) {
		tmpl.NotAfter = caCert.NotAfter
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: key: %w", err)
	}
	der, err := sign(tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return writePair(o.Dir, crtPath, keyPath, der, key)
}

// sign fills the serial number and signs tmpl with parent's key.
func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, priv crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("pki: sign %q: %w", tmpl.Subject.CommonName, err)
	}
	return der, nil
}

func refuseExisting(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%w: %s: refusing to overwrite", ErrExists, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pki: %w", err)
		}
	}
	return nil
}

// writePair writes the certificate (0644) and the key (0600), each with
// O_EXCL; on failure it removes what it wrote.
func writePair(dir, crtPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: certs directory: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: encode key: %w", err)
	}
	if err := writeExcl(keyPath, 0o600, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return err
	}
	if err := writeExcl(crtPath, 0o644, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		_ = os.Remove(keyPath)
		return err
	}
	return nil
}

func writeExcl(path string, perm os.FileMode, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s: refusing to overwrite", ErrExists, path)
		}
		return fmt.Errorf("pki: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("pki: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("pki: close %s: %w", path, err)
	}
	return nil
}

func readCert(path string) (*x509.Certificate, error) {
	certs, err := readCerts(path)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

// readCerts reads every CERTIFICATE block of a PEM file (at least one).
func readCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFiles, err)
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrFiles, path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no PEM CERTIFICATE", ErrFiles, path)
	}
	return out, nil
}

func readKey(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFiles, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%w: %s holds no PEM key", ErrFiles, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		if ek, err2 := x509.ParseECPrivateKey(blk.Bytes); err2 == nil {
			return ek, nil
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrFiles, path, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: %s: key type %T cannot sign", ErrFiles, path, k)
	}
	return s, nil
}

// ReadCertificate reads the first certificate of a PEM file.
func ReadCertificate(path string) (*x509.Certificate, error) { return readCert(path) }
