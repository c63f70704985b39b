package plugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/cluster"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/plugin"
	"github.com/malachi-log/malachi/store"
)

// Example links the plugin into a broker (it compiles with the tests; it
// does not run: it would serve until interrupted). README.md's "Linking
// the plugin into a broker" is the code between the README markers,
// verbatim (TestREADMEShowsTheExample).
func Example() {
	if err := runBroker(context.Background(), "data", "certs", zerolog.New(os.Stderr)); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// README:begin
// runBroker opens a broker's store, control plane and heal plugin under
// dir, with the broker certificates in certsDir, and serves until ctx ends.
func runBroker(ctx context.Context, dir, certsDir string, log zerolog.Logger) error {
	cfg := plugin.DefaultConfig() // then the broker's [heal] table
	cfg.Enabled, cfg.DataDir = true, dir
	if err := cfg.Validate(); err != nil {
		return err // wraps plugin.ErrConfig and names the key and value
	}
	certs, err := pki.LoadBroker(certsDir) // its certificate names the broker
	if err != nil {
		return err
	}
	self := certs.Identity().Broker
	ds, engine, closeDS, err := plugin.NewDirSyncer(cfg, log)
	if err != nil {
		return err
	}
	defer closeDS()
	db, err := store.Open(dir, store.Options{Logger: log, DirSyncer: ds})
	if err != nil {
		return err
	}
	defer db.Close()
	cc := cluster.DefaultConfig() // or any plugin.ControlPlane of your own
	cc.ID, cc.Dir, cc.Addr, cc.TLS, cc.Logger = self, filepath.Join(dir, "raft"), "127.0.0.1:7101", certs, log
	cc.Peers = []cluster.Peer{{ID: self, Addr: cc.Addr}}
	node, err := cluster.Open(cc)
	if err != nil {
		return err
	}
	defer node.Close()
	p, err := plugin.New(cfg, plugin.Deps{Self: self, Store: db, Control: node, Logger: log, FsyncEngine: engine, Certs: certs})
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer p.Stop()
	// Then register the broker's p.Status().RPCAddr and DataAddr in the
	// metadata (meta.RegisterBroker, applied through the leader), as
	// broker.Server does: the coordinator finds the instances there.
	<-ctx.Done()
	return nil
}

// README:end

// TestREADMEShowsTheExample: README.md carries the example above verbatim,
// indented by four spaces, so that the code it shows compiles.
func TestREADMEShowsTheExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	begin, end := strings.Index(s, "// README:begin\n"), strings.Index(s, "// README:end\n")
	if begin < 0 || end < begin {
		t.Fatal("example_test.go lost its README markers")
	}
	snippet := strings.TrimRight(s[begin+len("// README:begin\n"):end], "\n")
	var indented []string
	for _, l := range strings.Split(snippet, "\n") {
		if l == "" {
			indented = append(indented, "")
			continue
		}
		indented = append(indented, "    "+strings.ReplaceAll(l, "\t", "    "))
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(indented, "\n"); !strings.Contains(string(readme), want) {
		t.Fatalf("README.md does not show plugin/example_test.go's runBroker verbatim; paste this:\n%s", want)
	}
}
