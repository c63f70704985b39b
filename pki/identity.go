package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"github.com/malachi-log/malachi/meta"
)

// Errors of the package. Match them with errors.Is.
var (
	// ErrNoIdentity: a certificate names no (or more than one) holder.
	ErrNoIdentity = errors.New("pki: certificate names no identity")
	// ErrUntrusted: a certificate does not chain to the cluster CA, has
	// expired, or is used for what it was not issued for.
	ErrUntrusted = errors.New("pki: certificate not trusted")
	// ErrExists: a file to be written exists; nothing was overwritten.
	ErrExists = errors.New("pki: file exists")
	// ErrFiles: a certs directory lacks a file or holds a bad one.
	ErrFiles = errors.New("pki: certs directory")
)

// Role is what a certificate's holder may do.
type Role string

// The roles. Broker is a member of the cluster; Operator may change state
// through the admin API; Viewer may only read; Client is a Kafka client
// (produce and consume on the Kafka listener, nothing on the admin API).
const (
	RoleBroker   Role = "broker"
	RoleOperator Role = "operator"
	RoleViewer   Role = "viewer"
	RoleClient   Role = "client"
)

// ClientRoles are the roles a client certificate may carry, as a person
// names them.
var ClientRoles = []Role{RoleOperator, RoleViewer, RoleClient}

// ParseRole checks a role given by a person (a flag).
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleOperator, RoleViewer, RoleClient:
		return r, nil
	}
	return "", fmt.Errorf("pki: role %q: want %q, %q or %q", s, RoleOperator, RoleViewer, RoleClient)
}

// Identity is who a certificate names.
type Identity struct {
	Role Role
	// Broker is set for RoleBroker, zero otherwise.
	Broker meta.BrokerID
	// Name is the client's name; "broker-ID" for a broker.
	Name string
}

func (id Identity) String() string {
	if id.Role == RoleBroker {
		return fmt.Sprintf("broker %d", id.Broker)
	}
	return fmt.Sprintf("%s %q", id.Role, id.Name)
}

// uriScheme is the scheme of the identity SAN.
const uriScheme = "malachi"

// uri returns the identity SAN of id.
func (id Identity) uri() *url.URL {
	name := id.Name
	if id.Role == RoleBroker {
		name = strconv.FormatUint(uint64(id.Broker), 10)
	}
	return &url.URL{Scheme: uriScheme, Host: string(id.Role), Path: "/" + name}
}

// IdentityOf reads the identity SAN of cert (see the package invariants).
// It checks no signature: call it on verified chains only.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var found []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == uriScheme {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		return Identity{}, fmt.Errorf("%w: %q has %d malachi:// URI SANs, want 1", ErrNoIdentity, cert.Subject.CommonName, len(found))
	}
	u := found[0]
	name := u.Path
	if len(name) < 2 || name[0] != '/' {
		return Identity{}, fmt.Errorf("%w: %q: URI %s has no name", ErrNoIdentity, cert.Subject.CommonName, u)
	}
	name = name[1:]
	switch r := Role(u.Host); r {
	case RoleBroker:
		n, err := strconv.ParseUint(name, 10, 32)
		if err != nil || n == 0 {
			return Identity{}, fmt.Errorf("%w: %q: URI %s: broker id %q is not a positive integer", ErrNoIdentity, cert.Subject.CommonName, u, name)
		}
		return Identity{Role: r, Broker: meta.BrokerID(n), Name: "broker-" + name}, nil
	case RoleOperator, RoleViewer, RoleClient:
		if err := checkName(name); err != nil {
			return Identity{}, fmt.Errorf("%w: %q: URI %s: %v", ErrNoIdentity, cert.Subject.CommonName, u, err)
		}
		return Identity{Role: r, Name: name}, nil
	default:
		return Identity{}, fmt.Errorf("%w: %q: URI %s: unknown role %q", ErrNoIdentity, cert.Subject.CommonName, u, u.Host)
	}
}

// checkName accepts client names that are safe in file names and URIs.
func checkName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("name %q: want 1 to 64 characters", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("name %q: character %q is not a letter, digit, '-', '_' or '.'", name, c)
		}
	}
	if name[0] == '.' {
		return fmt.Errorf("name %q: must not start with '.'", name)
	}
	return nil
}
