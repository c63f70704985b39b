package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func validConfig(t *testing.T) Config {
	c := DefaultConfig()
	c.Enabled = true
	c.DataDir = t.TempDir()
	c.Secret = "0123456789abcdef"
	return c
}

func TestConfigDisabledIsValid(t *testing.T) {
	var c Config
	if err := c.Validate(); err != nil {
		t.Fatalf("zero (disabled) config: %v", err)
	}
	if DefaultConfig().Enabled {
		t.Fatal("DefaultConfig enables the plugin")
	}
}

func TestConfigValidateNamesKeyAndValue(t *testing.T) {
	if err := validConfig(t).Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"rpc listen", func(c *Config) { c.RPCListen = "nope" }, `heal.rpc_listen = "nope"`},
		{"data listen", func(c *Config) { c.DataListen = "" }, `heal.data_listen = ""`},
		{"same listen", func(c *Config) { c.DataListen = c.RPCListen }, `heal.data_listen = "127.0.0.1:7201": must differ`},
		{"no dir", func(c *Config) { c.DataDir = "" }, `heal.data_dir = ""`},
		{"no secret", func(c *Config) { c.Secret = "" }, `heal.secret = ""`},
		{"short secret", func(c *Config) { c.Secret = "abc" }, `heal.secret = <3 bytes>`},
		{"both secrets", func(c *Config) { c.SecretFile = "/x" }, `heal.secret_file = "/x"`},
		{"tick", func(c *Config) { c.Tick = 0 }, `heal.tick = "0s"`},
		{"grace", func(c *Config) { c.Grace = -time.Second }, `heal.grace = "-1s"`},
		{"probe deadline", func(c *Config) { c.ProbeDeadline = 0 }, `heal.probe_deadline = "0s"`},
		{"settle batch", func(c *Config) { c.SettleBatch = 0 }, `heal.settle_batch = 0`},
		{"max backfills", func(c *Config) { c.MaxBackfills = -2 }, `heal.max_backfills = -2`},
		{"per broker", func(c *Config) { c.MaxBackfillsPerBroker = 0 }, `heal.max_backfills_per_broker = 0`},
		{"rate", func(c *Config) { c.BackfillBytesPerSecond = -1 }, `heal.backfill_bytes_per_second = -1`},
		{"engine", func(c *Config) { c.ProbeEngine = "epoll" }, `heal.probe_engine = "epoll"`},
		{"fsync engine", func(c *Config) { c.FsyncEngine = "" }, `heal.fsync_engine = ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.mod(&c)
			err := c.Validate()
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrConfig naming %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "0123456789abcdef") {
				t.Fatalf("error leaks the secret: %v", err)
			}
		})
	}
}

func TestConfigSecretFile(t *testing.T) {
	c := validConfig(t)
	c.Secret = ""
	c.SecretFile = filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(c.SecretFile, []byte("fedcba9876543210\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := c.secret()
	if err != nil || string(s) != "fedcba9876543210" {
		t.Fatalf("secret() = %q, %v", s, err)
	}
	if err := os.WriteFile(c.SecretFile, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.secret(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "5 bytes") {
		t.Fatalf("short secret file: %v", err)
	}
}
