package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
[raft]
heartbeat_timeout = "100ms"
[heal]
enabled = false
secret = "0123456789abcdef"
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
	} {
		p := writeTOML(t, tc.toml)
		_, err := loadConfig(append([]string{"--config", p}, tc.args...), io.Discard)
		if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want errConfig containing %q", tc.args, err, tc.want)
		}
	}
}
