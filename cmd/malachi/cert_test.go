package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/pki"
)

func TestCertCommands(t *testing.T) {
	dir := t.TempDir()
	runOK := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("malachi %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
		}
		return out.String()
	}
	runOK("cert", "create-ca", "--certs-dir", dir)
	runOK("cert", "create-broker", "3", "--host", "127.0.0.1", "--host", "b3.example", "--certs-dir", dir)
	runOK("cert", "create-client", "alice", "--role", "operator", "--certs-dir", dir)
	runOK("cert", "create-client", "carol", "--role", "client", "--certs-dir", dir)
	t.Setenv(certsDirEnv, dir)
	list := runOK("cert", "list")
	for _, want := range []string{"broker 3", `operator "alice"`, `client "carol"`, "ca.crt"} {
		if !strings.Contains(list, want) {
			t.Errorf("cert list lacks %q:\n%s", want, list)
		}
	}
	b, err := pki.LoadBroker(dir)
	if err != nil || b.Identity().Broker != 3 {
		t.Fatalf("the broker pair: %v %v", b, err)
	}
	for _, k := range []string{pki.CAKey, pki.BrokerKey, pki.ClientKey("alice")} {
		if st, err := os.Stat(filepath.Join(dir, k)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", k, st.Mode(), err)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, pki.BrokerKey))
	for _, bad := range [][]string{
		{"cert", "create-ca", "--certs-dir", dir},                                 // exists
		{"cert", "create-broker", "3", "--host", "127.0.0.1", "--certs-dir", dir}, // exists
		{"cert", "create-broker", "0", "--host", "h", "--certs-dir", dir},         // id 0
		{"cert", "create-broker", "4", "--certs-dir", dir},                        // no host
		{"cert", "create-client", "bob", "--role", "admin", "--certs-dir", dir},   // role
		{"cert", "create-client", "--role", "viewer"},                             // no name
		{"cert", "frobnicate"},
	} {
		var out, errb bytes.Buffer
		if code := run(bad, &out, &errb); code == 0 || errb.Len() == 0 {
			t.Errorf("malachi %s: exit %d, stderr %q; want a failure that says why", strings.Join(bad, " "), code, errb.String())
		}
	}
	after, _ := os.ReadFile(filepath.Join(dir, pki.BrokerKey))
	if !bytes.Equal(before, after) {
		t.Fatal("a refused command changed the broker key")
	}
}
