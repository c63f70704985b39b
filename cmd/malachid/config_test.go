package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/broker"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

func writeTOML(t *testing.T, s string) string {
	p := filepath.Join(t.TempDir(), "b.toml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodTOML = `
id = 2
data_dir = "/tmp/x/b2"
admin_listen = "127.0.0.1:7002"
raft_listen = "127.0.0.1:7102"
peers = ["1=127.0.0.1:7101", "2=127.0.0.1:7102"]
replication_factor = 2
insecure = true
[raft]
heartbeat_timeout = "100ms"
leader_lease_timeout = "50ms"
[heal]
enabled = false
tick = "250ms"
`

func TestLoadConfigFileThenFlags(t *testing.T) {
	p := writeTOML(t, goodTOML)
	cfg, err := loadConfig([]string{"--config", p, "--heal.enabled", "--heal.grace=1s", "--peers=1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != 2 || !cfg.Heal.Enabled || cfg.Heal.Grace != time.Second || cfg.Heal.Tick != 250*time.Millisecond ||
		cfg.Raft.HeartbeatTimeout != 100*time.Millisecond || len(cfg.Peers) != 3 || cfg.Heal.DataDir != "/tmp/x/b2" {
		t.Fatalf("config: %+v", cfg)
	}
	// A flag wins over the file even when the flag comes first.
	cfg, err = loadConfig([]string{"--heal.enabled=false", "--config", p}, io.Discard)
	if err != nil || cfg.Heal.Enabled {
		t.Fatalf("enabled=false: %+v %v", cfg.Heal.Enabled, err)
	}
}

// TestCertificatesNameThisBroker: a broker refuses another broker's
// certificate, and starts with its own.
func TestCertificatesNameThisBroker(t *testing.T) {
	l, err := pki.CreateLocal(t.TempDir(), []meta.BrokerID{1, 2}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	p := writeTOML(t, goodTOML)
	_, err = loadConfig([]string{"--config", p, "--insecure=false", "--certs_dir", l.BrokerDir(1)}, io.Discard)
	if !errors.Is(err, broker.ErrConfig) || !strings.Contains(err.Error(), "names broker 1, but this is broker 2") {
		t.Fatalf("broker 2 with broker 1's certificate: %v", err)
	}
	if _, err := loadConfig([]string{"--config", p, "--insecure=false", "--certs_dir", l.BrokerDir(2)}, io.Discard); err != nil {
		t.Fatalf("broker 2 with its own certificate: %v", err)
	}
}

func TestLoadConfigErrorsNameKeyAndValue(t *testing.T) {
	for _, tc := range []struct {
		toml string
		args []string
		want string
	}{
		{goodTOML + "bogus = 1\n", nil, `unknown key "heal.bogus"`},
		{goodTOML, []string{"--heal.enabled", "--heal.tick=0s"}, `heal.tick = "0s"`},
		{goodTOML, []string{"--heal.tick=soon"}, `--heal.tick = "soon"`},
		{goodTOML, []string{"--id=0"}, "id = 0"},
		{goodTOML, []string{"--replication_factor=-1"}, "replication_factor = -1"},
		{goodTOML, []string{"--peers=1=127.0.0.1:7101"}, "does not list this broker (id 2)"},
		{goodTOML, []string{"--peers=x"}, `peers[0] = "x"`},
		{goodTOML, []string{"--admin_listen=nowhere"}, `admin_listen = "nowhere"`},
		{goodTOML, []string{"--log_level=loud"}, `log_level = "loud"`},
		{goodTOML, []string{"--heal.enabled=maybe"}, `--heal.enabled = "maybe"`},
		{"id = \"two\"\n", nil, "id"},
		{goodTOML, []string{"--insecure=false"}, `certs_dir = "/tmp/x/b2/certs"`},
		{goodTOML, []string{"--admin_listen=10.1.2.3:7002"}, `insecure = true with admin_listen = "10.1.2.3:7002"`},
		{goodTOML, []string{"--raft_listen=10.1.2.3:7102", "--peers="}, `insecure = true with raft_listen = "10.1.2.3:7102"`},
	} {
		p := writeTOML(t, tc.toml)
		_, err := loadConfig(append([]string{"--config", p}, tc.args...), io.Discard)
		if !errors.Is(err, broker.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want broker.ErrConfig containing %q", tc.args, err, tc.want)
		}
	}
}

// brokenTOML is a valid broker file with heal enabled, but for its %[1]s
// (data_dir), %[2]s (extra top-level keys), %[3]s (extra [raft] keys) and
// %[4]s (extra [heal] keys).
const brokenTOML = `
id = 2
data_dir = %[1]q
admin_listen = "127.0.0.1:7002"
raft_listen = "127.0.0.1:7102"
peers = ["1=127.0.0.1:7101", "2=127.0.0.1:7102"]
%[2]s
insecure = true
[raft]
heartbeat_timeout = "100ms"
leader_lease_timeout = "50ms"
%[3]s
[heal]
enabled = true
rpc_listen = "127.0.0.1:7202"
data_listen = "127.0.0.1:7302"
%[4]s
`

// TestMalformedConfigFilesChangeNothing runs the broker's main on broken
// files: each exits 2 with an error naming the key and the value (and the
// line of a syntax error), and data_dir does not exist afterwards.
func TestMalformedConfigFilesChangeNothing(t *testing.T) {
	const secret = `data_encryption = false` // a valid [heal] line
	secrets := t.TempDir()
	emptyCerts := filepath.Join(secrets, "certs")
	if err := os.MkdirAll(emptyCerts, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name            string
		top, raft, heal string
		dataDir         string // "" for a fresh one under the test's directory
		raw             string // the whole file instead of brokenTOML
		path            string // the --config path instead of the file
		want            []string
	}{
		{name: "syntax error", raw: "id = 2\ndata_dir = \"%s\"\nadmin_listen = \n", want: []string{"line 3", "admin_listen"}},
		{name: "unknown key", top: "rack = \"r1\"\nbogus = 1", heal: secret, want: []string{`unknown key "bogus"`}},
		{name: "unknown heal key", heal: secret + "\nsecrte = \"x\"", want: []string{`unknown key "heal.secrte"`}},
		{name: "the removed secret", heal: `secret = "0123456789abcdef"`, want: []string{`unknown key "heal.secret"`}},
		{name: "wrong type", top: "replication_factor = \"three\"", heal: secret, want: []string{"replication_factor", "string"}},
		{name: "id negative", raw: "id = -1\n", want: []string{"id", "-1"}},
		{name: "huge number", top: "preallocate = 99999999999999999999", heal: secret, want: []string{"line 7", "99999999999999999999"}},
		{name: "bad duration", heal: secret + "\ntick = \"soon\"", want: []string{"tick", "soon"}},
		{name: "zero duration", heal: secret + "\ntick = \"0s\"", want: []string{`heal.tick = "0s"`}},
		{name: "raft timings", raft: `election_timeout = "1ms"`, heal: secret, want: []string{`raft.election_timeout = "1ms"`}},
		{name: "lease over heartbeat", raw: "id = 1\ndata_dir = \"%s\"\n[raft]\nheartbeat_timeout = \"100ms\"\n", want: []string{`raft.leader_lease_timeout = "300ms"`, "at most raft.heartbeat_timeout (100ms)"}},
		{name: "commit timeout 0", raft: `commit_timeout = "0s"`, heal: secret, want: []string{`raft.commit_timeout = "0s"`}},
		{name: "negative preallocate", top: "preallocate = -1", heal: secret, want: []string{"preallocate = -1"}},
		{name: "negative settle batch", heal: secret + "\nsettle_batch = -3", want: []string{"heal.settle_batch = -3"}},
		{name: "negative rate", heal: secret + "\nbackfill_bytes_per_second = -1", want: []string{"heal.backfill_bytes_per_second = -1"}},
		{name: "replication factor 0", top: "replication_factor = 0", heal: secret, want: []string{"replication_factor = 0"}},
		{name: "key set twice", top: `admin_listen = "127.0.0.1:1"`, heal: secret, want: []string{"line 7", "admin_listen", "already been defined"}},
		{name: "bad admin address", raw: "id = 1\ndata_dir = \"%s\"\nadmin_listen = \"nowhere\"\n", want: []string{`admin_listen = "nowhere"`, "host:port"}},
		{name: "bad rpc address", raw: "id = 1\ndata_dir = \"%s\"\ninsecure = true\n[heal]\nenabled = true\nrpc_listen = \"127.0.0.1\"\n", want: []string{`heal.rpc_listen = "127.0.0.1"`, "host:port"}},
		{name: "raft port 0", raw: "id = 1\ndata_dir = \"%s\"\nraft_listen = \"127.0.0.1:0\"\n", want: []string{`raft_listen = "127.0.0.1:0"`, "port"}},
		{name: "unspecified peer", raw: "id = 1\ndata_dir = \"%s\"\nraft_listen = \"127.0.0.1:7101\"\npeers = [\"1=127.0.0.1:7101\", \"2=0.0.0.0:7102\"]\n", want: []string{`peers[1] = "2=0.0.0.0:7102"`, "unspecified"}},
		{name: "duplicate peers", raw: "id = 1\ndata_dir = \"%s\"\nraft_listen = \"127.0.0.1:7101\"\npeers = [\"1=127.0.0.1:7101\", \"1=127.0.0.1:7103\"]\n", want: []string{`peers[1] = "1=127.0.0.1:7103"`, "listed twice"}},
		{name: "id 0", raw: "id = 0\ndata_dir = \"%s\"\n", want: []string{"id = 0"}},
		{name: "empty data_dir", raw: "id = 1\ndata_dir = \"\"\n", dataDir: "-", want: []string{`data_dir = ""`}},
		{name: "no certificates", raw: "id = 1\ndata_dir = \"%s\"\n", want: []string{`certs_dir = "`, "ca.crt", "malachi cert"}},
		{name: "empty certs dir", raw: fmt.Sprintf("id = 1\ndata_dir = \"%%s\"\ncerts_dir = %q\n", emptyCerts), want: []string{fmt.Sprintf("certs_dir = %q", emptyCerts), "no such file"}},
		{name: "insecure off loopback", raw: "id = 1\ndata_dir = \"%s\"\ninsecure = true\nadmin_listen = \"10.9.8.7:7001\"\n", want: []string{`insecure = true with admin_listen = "10.9.8.7:7001"`, "loopback"}},
		{name: "config missing", path: filepath.Join(secrets, "nope.toml"), want: []string{"nope.toml", "no such file"}},
		{name: "config is a directory", path: secrets, want: []string{secrets, "is a directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			text := fmt.Sprintf(brokenTOML, dataDir, tc.top, tc.raft, tc.heal)
			if tc.raw != "" {
				text = tc.raw
				if strings.Contains(text, "%s") {
					text = fmt.Sprintf(text, dataDir)
				}
			}
			path := tc.path
			if path == "" {
				path = writeTOML(t, text)
			}
			args := []string{"--config", path}
			if _, err := loadConfig(args, io.Discard); err == nil {
				t.Fatalf("loadConfig accepted:\n%s", text) // run would start a broker
			}
			var stderr bytes.Buffer
			if code := run(args, &stderr); code != 2 {
				t.Errorf("exit %d, want 2: %s", code, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("error %q does not name %q", strings.TrimSpace(stderr.String()), w)
				}
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("data_dir %s exists after a refused config (%v)", dataDir, err)
			}
		})
	}
}

// TestHelpAndOnePrefix: --help prints the usage and exits 0; a refused
// configuration names the command once.
func TestHelpAndOnePrefix(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"--help"}, &stderr); code != 0 || !strings.Contains(stderr.String(), "-heal.enabled") {
		t.Fatalf("--help: exit %d, usage %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"--id", "0"}, &stderr); code != 2 || strings.Count(stderr.String(), "malachid:") != 1 {
		t.Fatalf("--id 0: exit %d, %q: want 2 and one prefix", code, stderr.String())
	}
}
