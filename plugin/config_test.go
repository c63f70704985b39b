package plugin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func validConfig(t *testing.T) Config {
	c := DefaultConfig()
	c.Enabled = true
	c.DataDir = t.TempDir()
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
		{"tick", func(c *Config) { c.Tick = 0 }, `heal.tick = "0s"`},
		{"grace", func(c *Config) { c.Grace = -time.Second }, `heal.grace = "-1s"`},
		{"probe deadline", func(c *Config) { c.ProbeDeadline = 0 }, `heal.probe_deadline = "0s"`},
		{"settle batch", func(c *Config) { c.SettleBatch = 0 }, `heal.settle_batch = 0`},
		{"max backfills", func(c *Config) { c.MaxBackfills = -2 }, `heal.max_backfills = -2`},
		{"per broker", func(c *Config) { c.MaxBackfillsPerBroker = 0 }, `heal.max_backfills_per_broker = 0`},
		{"rate", func(c *Config) { c.BackfillBytesPerSecond = "-1" }, `heal.backfill_bytes_per_second = -1: want "auto", 0 (unlimited) or at least 4096`},
		{"small rate", func(c *Config) { c.BackfillBytesPerSecond = "4095" }, `heal.backfill_bytes_per_second = 4095`},
		{"rate word", func(c *Config) { c.BackfillBytesPerSecond = "fast" }, `heal.backfill_bytes_per_second = "fast": want "auto" or a number`},
		{"rate empty", func(c *Config) { c.BackfillBytesPerSecond = "" }, `heal.backfill_bytes_per_second = ""`},
		{"floor", func(c *Config) { c.BackfillFloorBytesPerSecond = 0 }, `heal.backfill_floor_bytes_per_second = 0: want at least 4096`},
		{"ceiling", func(c *Config) { c.BackfillCeilingBytesPerSecond = 4096 }, `heal.backfill_ceiling_bytes_per_second = 4096: want 0 (none) or at least heal.backfill_floor_bytes_per_second (1048576)`},
		{"auto scope", func(c *Config) { c.BackfillAutoScope = "link" }, `heal.backfill_auto_scope = "link": want "target" or "broker"`},
		{"engine", func(c *Config) { c.ProbeEngine = "epoll" }, `heal.probe_engine = "epoll"`},
		{"fsync engine", func(c *Config) { c.FsyncEngine = "" }, `heal.fsync_engine = ""`},
		{"max maintenance", func(c *Config) { c.MaxMaintenance = 0 }, `heal.max_maintenance = 0: want at least 1`},
		{"rebalance moves", func(c *Config) { c.RebalanceMoves = 0 }, `heal.rebalance_moves = 0: want at least 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.mod(&c)
			err := c.Validate()
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrConfig naming %s", err, tc.want)
			}
		})
	}
}

// backfill_bytes_per_second is "auto" or a number, as a TOML string or
// integer; a number pins the throttle exactly as before "auto" existed.
func TestConfigBackfillRateTOML(t *testing.T) {
	for _, c := range []struct {
		toml   string
		auto   bool
		pinned int64
	}{
		{``, true, 0},
		{`backfill_bytes_per_second = "auto"`, true, 0},
		{`backfill_bytes_per_second = 0`, false, 0},
		{`backfill_bytes_per_second = 8388608`, false, 8 << 20},
		{`backfill_bytes_per_second = "65536"`, false, 65536},
	} {
		cfg := validConfig(t)
		if _, err := toml.Decode(c.toml, &cfg); err != nil {
			t.Fatalf("%s: %v", c.toml, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", c.toml, err)
		}
		if cfg.BackfillBytesPerSecond.Auto() != c.auto || cfg.pinnedBackfillRate() != c.pinned {
			t.Fatalf("%s: auto %v, pinned %d; want %v, %d", c.toml, cfg.BackfillBytesPerSecond.Auto(), cfg.pinnedBackfillRate(), c.auto, c.pinned)
		}
	}
	for text, want := range map[string]string{
		`backfill_bytes_per_second = -1`:     `heal.backfill_bytes_per_second = -1`,
		`backfill_bytes_per_second = "fast"`: `heal.backfill_bytes_per_second = "fast"`,
		`backfill_bytes_per_second = 1.5`:    `heal.backfill_bytes_per_second = "1.500000"`,
	} {
		cfg := validConfig(t)
		if _, err := toml.Decode(text, &cfg); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: Validate() = %v, want ErrConfig naming %s", text, err, want)
		}
	}
}
