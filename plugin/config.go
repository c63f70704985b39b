package plugin

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// ErrConfig marks a configuration the plugin refuses. The message names the
// key (as written in a broker's TOML file, under [heal]) and the bad value.
var ErrConfig = errors.New("plugin: bad config")

// Config is what a broker's configuration gives the plugin. The zero value is
// a disabled plugin; DefaultConfig gives the documented defaults. TOML keys
// are the ones in the struct tags (under the broker's [heal] table).
type Config struct {
	// Enabled turns the plugin on. When false, Start creates no goroutine,
	// no listener and no file, and the broker runs as if it were not linked.
	Enabled bool `toml:"enabled"`
	// RPCListen is the control RPC listener (host:port): the replication
	// server, /metrics and /status.
	RPCListen string `toml:"rpc_listen"`
	// DataListen is the catch-up data listener (host:port).
	DataListen string `toml:"data_listen"`
	// DataDir is the broker's data directory: copies/ and confirm/ live
	// under it. It belongs to the broker's store; the plugin creates nothing
	// there itself.
	DataDir string `toml:"data_dir"`
	// DataEncryption carries catch-up bytes over TLS 1.3 (userspace
	// copies, both sides authenticated by their broker certificates)
	// instead of the zero-copy plain TCP path, for networks that need
	// confidentiality. Each transfer is authorized by its ticket either
	// way.
	DataEncryption bool `toml:"data_encryption"`
	// Tick is the period of the heal pass run by the leader's coordinator.
	// A pass also starts early when membership changes.
	Tick time.Duration `toml:"tick"`
	// Grace is how long a broker may miss heartbeats before it counts as
	// dead and its replicas are replaced.
	Grace time.Duration `toml:"grace"`
	// SettleBatch bounds the overrun copies settled per pass (round-robin).
	SettleBatch int `toml:"settle_batch"`
	// LeftoverDelay is how long a copy held outside its segment's replica
	// set must have been seen before heal deletes it (and only once its
	// segment is at its factor with every member confirmed); 0 means
	// heal's default, 2 minutes.
	LeftoverDelay time.Duration `toml:"leftover_delay"`
	// ProbeDeadline bounds one broker's probe of all its sealed copies; a
	// copy not answered in time is reported timed out, never confirmed.
	ProbeDeadline time.Duration `toml:"probe_deadline"`
	// RPCTimeout bounds one control RPC other than a probe or a backfill.
	RPCTimeout time.Duration `toml:"rpc_timeout"`
	// MaxBackfills bounds the backfills running at once in the cluster;
	// MaxBackfillsPerBroker bounds those a broker takes part in (as source
	// or target).
	MaxBackfills          int `toml:"max_backfills"`
	MaxBackfillsPerBroker int `toml:"max_backfills_per_broker"`
	// MaxTransfersPerBroker bounds the catch-up transfers that move bytes
	// at once on a broker in each direction (receiving, sending); a broker's
	// other backfills queue for a slot, up to BackfillTimeout
	// (catchup.Limits.MaxTransfers). One stream per direction reaches the
	// disk's floor; more only crowd the clients.
	MaxTransfersPerBroker int `toml:"max_transfers_per_broker"`
	// PassBackfills bounds the backfills one pass plans: the commands of a
	// pass are applied once its backfills are done, so this bounds the
	// time to the first recorded replica set when much is lost at once.
	PassBackfills int `toml:"pass_backfills"`
	// BackfillBytesPerSecond throttles each broker's catch-up traffic:
	// RateAuto (the default) paces it from the broker's client latency and
	// the machine's pressure (package pace), between
	// BackfillFloorBytesPerSecond and BackfillCeilingBytesPerSecond (0: no
	// ceiling, then no cap while nothing pushes back); a number pins it
	// (0: unlimited, else at least 4096).
	BackfillBytesPerSecond        Rate  `toml:"backfill_bytes_per_second"`
	BackfillFloorBytesPerSecond   int64 `toml:"backfill_floor_bytes_per_second"`
	BackfillCeilingBytesPerSecond int64 `toml:"backfill_ceiling_bytes_per_second"`
	// BackfillAutoScope is what an "auto" rate paces: AutoScopeTarget (the
	// default) the copies the broker receives only, what it sends going
	// through a throttle of its own without a byte cap, so that each copy
	// is paced by its target alone and a broker's clients' latency holds
	// back only the copies written on it; AutoScopeBroker everything the
	// broker sends and receives, through one throttle, so that a busy
	// partition leader holds back every copy it sends or receives. A
	// broker's client latency (ClientLatency) counts, on a follower, what
	// the clients of the partitions it replicates wait on (their leader's
	// replication round), so a target no client talks to still paces what
	// it receives by them. bench/README.md ("Heal pacing under client
	// load") compares the two. A pinned rate always paces both directions
	// through one throttle.
	BackfillAutoScope string `toml:"backfill_auto_scope"`
	// BackfillBackground moves catch-up bytes at background priority: on
	// threads of the lowest CPU priority (nice 19) and the lowest
	// best-effort I/O priority, so that on a busy machine the broker's
	// work for its clients runs first (catchup.Limits.Background).
	BackfillBackground bool `toml:"backfill_background"`
	// HoldShare is the mass-failure brake: when more than this share of
	// the brokers (and at least two) go missing within one grace delay of
	// each other, placement of new replicas is held until they return or
	// an operator releases the hold. 0 means heal.DefaultHoldShare (0.25);
	// a negative value disables the brake.
	HoldShare float64 `toml:"hold_share"`
	// MaxMaintenance bounds the brokers in maintenance at once: the
	// admin API refuses `malachi maintenance` for one more (the metadata's
	// state machine decides, meta.SetBrokerMode).
	MaxMaintenance int `toml:"max_maintenance"`
	// Rebalance turns on the rebalancer: with nothing more urgent to do,
	// replicas move (add, verify, record, drop) from the most to the least
	// loaded brokers until each is within 10% of the mean by count and by
	// bytes; RebalanceMoves bounds its moves per pass (at least 1).
	Rebalance      bool `toml:"rebalance"`
	RebalanceMoves int  `toml:"rebalance_moves"`
	// BackfillTimeout bounds one backfill transfer.
	BackfillTimeout time.Duration `toml:"backfill_timeout"`
	// ScrubInterval is the pause between two full scrub cycles, each
	// verifying every sealed copy of this broker (frames, footer,
	// checksum) to find the in-place corruption the size probe cannot
	// see; 0 disables the scrubber. ScrubBytesPerSecond bounds its reads
	// (0: unlimited).
	ScrubInterval       time.Duration `toml:"scrub_interval"`
	ScrubBytesPerSecond int64         `toml:"scrub_bytes_per_second"`
	// ProbeEngine and FsyncEngine choose the I/O engine: "auto" (io_uring
	// when the kernel allows it, else syscalls), "uring" or "syscall".
	ProbeEngine string `toml:"probe_engine"`
	FsyncEngine string `toml:"fsync_engine"`
}

// DefaultConfig returns the defaults documented in the README. The plugin is
// disabled until the broker sets Enabled.
func DefaultConfig() Config {
	return Config{
		Enabled:                     false,
		RPCListen:                   "127.0.0.1:7201",
		DataListen:                  "127.0.0.1:7301",
		Tick:                        2 * time.Second,
		Grace:                       10 * time.Second,
		SettleBatch:                 512,
		LeftoverDelay:               2 * time.Minute,
		ProbeDeadline:               2 * time.Second,
		RPCTimeout:                  5 * time.Second,
		MaxBackfills:                64,
		MaxBackfillsPerBroker:       16,
		MaxTransfersPerBroker:       1,
		PassBackfills:               1024,
		BackfillBytesPerSecond:      RateAuto,
		BackfillFloorBytesPerSecond: 1 << 20,
		BackfillAutoScope:           AutoScopeTarget,
		BackfillBackground:          true,
		BackfillTimeout:             2 * time.Minute,
		MaxMaintenance:              1,
		Rebalance:                   true,
		RebalanceMoves:              8, // heal.DefaultRebalanceMoves
		ScrubInterval:               time.Hour,
		ScrubBytesPerSecond:         32 << 20,
		ProbeEngine:                 "auto",
		FsyncEngine:                 "auto",
	}
}

// Validate checks c and returns an error wrapping ErrConfig that names the
// first bad key and its value. A disabled config is always valid: nothing of
// it will be used.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	bad := func(key string, val any, why string) error {
		return fmt.Errorf("%w: heal.%s = %v: %s", ErrConfig, key, val, why)
	}
	for _, a := range []struct{ key, val string }{{"rpc_listen", c.RPCListen}, {"data_listen", c.DataListen}} {
		if _, _, err := net.SplitHostPort(a.val); err != nil || a.val == "" {
			return bad(a.key, fmt.Sprintf("%q", a.val), "want host:port")
		}
	}
	if c.RPCListen == c.DataListen {
		return bad("data_listen", fmt.Sprintf("%q", c.DataListen), "must differ from heal.rpc_listen")
	}
	if c.DataDir == "" {
		return bad("data_dir", `""`, "want the broker's data directory")
	}
	durs := []struct {
		key string
		v   time.Duration
		min time.Duration
	}{
		{"tick", c.Tick, time.Millisecond},
		{"grace", c.Grace, 0},
		{"leftover_delay", c.LeftoverDelay, 0},
		{"probe_deadline", c.ProbeDeadline, time.Millisecond},
		{"rpc_timeout", c.RPCTimeout, time.Millisecond},
		{"backfill_timeout", c.BackfillTimeout, time.Millisecond},
	}
	for _, d := range durs {
		if d.v < d.min {
			return bad(d.key, fmt.Sprintf("%q", d.v), fmt.Sprintf("want at least %v", d.min))
		}
	}
	ints := []struct {
		key string
		v   int
	}{{"settle_batch", c.SettleBatch}, {"max_backfills", c.MaxBackfills}, {"max_backfills_per_broker", c.MaxBackfillsPerBroker}, {"max_transfers_per_broker", c.MaxTransfersPerBroker}, {"pass_backfills", c.PassBackfills}, {"max_maintenance", c.MaxMaintenance}, {"rebalance_moves", c.RebalanceMoves}}
	for _, n := range ints {
		if n.v < 1 {
			return bad(n.key, n.v, "want at least 1")
		}
	}
	if err := c.validateBackfillRate(); err != nil {
		return err
	}
	if c.ScrubInterval < 0 {
		return bad("scrub_interval", fmt.Sprintf("%q", c.ScrubInterval), "want 0 (off) or more")
	}
	if c.ScrubBytesPerSecond < 0 || c.ScrubBytesPerSecond > 0 && c.ScrubBytesPerSecond < 4096 {
		return bad("scrub_bytes_per_second", c.ScrubBytesPerSecond, "want 0 (unlimited) or at least 4096")
	}
	if c.HoldShare > 1 {
		return bad("hold_share", c.HoldShare, "want at most 1 (0 for the default, negative to disable)")
	}
	for _, e := range []struct{ key, v string }{{"probe_engine", c.ProbeEngine}, {"fsync_engine", c.FsyncEngine}} {
		switch e.v {
		case "auto", "uring", "syscall":
		default:
			return bad(e.key, fmt.Sprintf("%q", e.v), `want "auto", "uring" or "syscall"`)
		}
	}
	return nil
}

// Rate is a byte rate as a config key gives it: RateAuto, or a whole
// number of bytes per second. In TOML it is a string or an integer
// (backfill_bytes_per_second = "auto", = 8388608 or = "8388608"); as a
// flag, its text.
type Rate string

// RateAuto is the rate a controller sets (package pace).
const RateAuto Rate = "auto"

// UnmarshalText keeps the text as written; Config.Validate judges it.
func (r *Rate) UnmarshalText(b []byte) error {
	*r = Rate(b)
	return nil
}

// Auto reports whether r is RateAuto.
func (r Rate) Auto() bool { return r == RateAuto }

// Bytes is the number r pins, for a rate that is not RateAuto: an error
// when it is not a whole number.
func (r Rate) Bytes() (int64, error) {
	n, err := strconv.ParseInt(string(r), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("plugin: rate %q: want \"auto\" or a whole number of bytes per second", string(r))
	}
	return n, nil
}

// validateBackfillRate checks backfill_bytes_per_second and its floor and
// ceiling, naming the key and the value.
func (c Config) validateBackfillRate() error {
	bad := func(key string, val any, why string) error {
		return fmt.Errorf("%w: heal.%s = %v: %s", ErrConfig, key, val, why)
	}
	const key = "backfill_bytes_per_second"
	if !c.BackfillBytesPerSecond.Auto() {
		n, err := c.BackfillBytesPerSecond.Bytes()
		if err != nil {
			return bad(key, fmt.Sprintf("%q", string(c.BackfillBytesPerSecond)), `want "auto" or a number of bytes per second (0: unlimited, else at least 4096)`)
		}
		if n < 0 || n > 0 && n < 4096 {
			return bad(key, n, `want "auto", 0 (unlimited) or at least 4096`)
		}
	}
	if c.BackfillAutoScope != AutoScopeTarget && c.BackfillAutoScope != AutoScopeBroker {
		return bad("backfill_auto_scope", fmt.Sprintf("%q", c.BackfillAutoScope), fmt.Sprintf("want %q or %q", AutoScopeTarget, AutoScopeBroker))
	}
	floor, ceiling := c.BackfillFloorBytesPerSecond, c.BackfillCeilingBytesPerSecond
	if floor < 4096 {
		return bad("backfill_floor_bytes_per_second", floor, "want at least 4096")
	}
	if ceiling != 0 && ceiling < floor {
		return bad("backfill_ceiling_bytes_per_second", ceiling, fmt.Sprintf("want 0 (none) or at least heal.backfill_floor_bytes_per_second (%d)", floor))
	}
	return nil
}

// The values of heal.backfill_auto_scope.
const (
	AutoScopeTarget = "target"
	AutoScopeBroker = "broker"
)

// pacesSends reports whether the broker's rate paces what it sends: a
// pinned rate, or "auto" over the broker scope.
func (c Config) pacesSends() bool {
	return !c.BackfillBytesPerSecond.Auto() || c.BackfillAutoScope == AutoScopeBroker
}

// pinnedBackfillRate is the number backfill_bytes_per_second pins, 0 for
// RateAuto (and for an invalid rate, which Validate refuses).
func (c Config) pinnedBackfillRate() int64 {
	if c.BackfillBytesPerSecond.Auto() {
		return 0
	}
	n, _ := c.BackfillBytesPerSecond.Bytes()
	return n
}
