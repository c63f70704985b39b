package pki

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/malachi-log/malachi/meta"
)

// Local is the layout CreateLocal writes for a cluster on one machine (the
// demo, the end-to-end tests, the fault suite):
//
//	Root/ca.crt, Root/ca.key
//	Root/broker-ID/{ca.crt, broker.crt, broker.key}   one per broker
//	Root/client/{ca.crt, client.operator.crt/.key, client.viewer.crt/.key,
//	             client.client.crt/.key}
type Local struct {
	Root string
}

// BrokerDir is the certs directory of broker id.
func (l Local) BrokerDir(id meta.BrokerID) string {
	return filepath.Join(l.Root, "broker-"+strconv.FormatUint(uint64(id), 10))
}

// ClientDir is the certs directory of the clients "operator" (role
// operator), "viewer" (role viewer) and "client" (role client).
func (l Local) ClientDir() string { return filepath.Join(l.Root, "client") }

// CreateLocal writes a new CA under root, a broker certificate for each of
// ids valid for hosts, and the operator, viewer and client clients (each
// named as its role). It refuses to overwrite anything.
func CreateLocal(root string, ids []meta.BrokerID, hosts []string) (Local, error) {
	l := Local{Root: root}
	if err := CreateCA(Options{Dir: root}); err != nil {
		return l, err
	}
	ca := Options{CACert: filepath.Join(root, CACert), CAKey: filepath.Join(root, CAKey)}
	for _, id := range ids {
		o := ca
		o.Dir = l.BrokerDir(id)
		if err := copyCA(root, o.Dir); err != nil {
			return l, err
		}
		if err := CreateBroker(o, id, hosts); err != nil {
			return l, err
		}
	}
	o := ca
	o.Dir = l.ClientDir()
	if err := copyCA(root, o.Dir); err != nil {
		return l, err
	}
	for _, r := range ClientRoles {
		if err := CreateClient(o, string(r), r); err != nil {
			return l, err
		}
	}
	return l, nil
}

// copyCA puts a copy of root's ca.crt into dir.
func copyCA(root, dir string) error {
	b, err := os.ReadFile(filepath.Join(root, CACert))
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return writeExcl(filepath.Join(dir, CACert), 0o644, b)
}
