package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pki"
)

// A secure cluster gets its certificates under Root/certs, outside every
// data_dir, and each broker's config names its own; an insecure one gets
// insecure = true and no certificates.
func TestClusterConfigModes(t *testing.T) {
	root := t.TempDir()
	c, err := New(Config{Root: root, Brokers: 3, RF: 3, Tick: time.Second, Raft: DemoRaft(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range c.Brokers() {
		dir := c.certs.BrokerDir(b.ID)
		certs, err := pki.LoadBroker(dir)
		if err != nil {
			t.Fatalf("broker %d: %v", b.ID, err)
		}
		if id := certs.Identity(); id.Broker != b.ID {
			t.Errorf("broker %d's certificate names %s", b.ID, id)
		}
		if rel, err := filepath.Rel(b.Dir, dir); err != nil || !strings.HasPrefix(rel, "..") {
			t.Errorf("broker %d: certs %s inside data_dir %s: a swapped data directory would lose them", b.ID, dir, b.Dir)
		}
		cfg := c.configText(b)
		if !strings.Contains(cfg, "certs_dir = \""+dir+"\"\n") || strings.Contains(cfg, "insecure") {
			t.Errorf("broker %d's config:\n%s\nwant certs_dir = %q and no insecure", b.ID, cfg, dir)
		}
	}
	if want := []string{"--certs-dir", filepath.Join(root, "certs", "client"), "--user", "operator"}; strings.Join(c.CLIFlags(), " ") != strings.Join(want, " ") {
		t.Errorf("cliFlags = %q, want %q", c.CLIFlags(), want)
	}
	if sub := c.Without(1); sub.rpc != c.rpc || sub.certs != c.certs {
		t.Errorf("without: the sub-cluster lost the certificates or the client")
	}
	// The directory is the cluster's: a second cluster there refuses to
	// overwrite its CA.
	if _, err := New(Config{Root: root, Brokers: 1, RF: 1}); err == nil {
		t.Error("a second cluster in the same root overwrote the first one's certificates")
	}

	root = t.TempDir()
	c, err = New(Config{Root: root, Brokers: 2, RF: 1, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range c.Brokers() {
		cfg := c.configText(b)
		if !strings.Contains(cfg, "insecure = true\n") || strings.Contains(cfg, "certs_dir") {
			t.Errorf("insecure broker %d's config:\n%s", b.ID, cfg)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "certs")); !os.IsNotExist(err) {
		t.Errorf("insecure cluster: %s/certs: %v, want none", root, err)
	}
	if got := c.CLIFlags(); len(got) != 1 || got[0] != "--insecure" {
		t.Errorf("insecure cliFlags = %q", got)
	}
}
