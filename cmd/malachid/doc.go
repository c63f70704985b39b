// Command malachid is the reference broker of Malachi heal: one process
// per broker, running package broker (its doc lists what a broker holds,
// its admin API and its invariants). This command reads the
// configuration, builds the logger and calls broker.Run.
//
// # Configuration
//
// A TOML file (--config) and flags: every key of broker.Config is also a
// flag named by its dotted path (--heal.enabled, --heal.grace=1s,
// --raft.heartbeat_timeout=300ms, --peers=1=127.0.0.1:7101,2=...); a flag
// wins over the file (flags.go). malachid.example.toml sets every key,
// commented (TestExampleConfigSetsEveryKey fails when a key of Config is
// not in it). A bad configuration (syntax, unknown key, bad value,
// missing or foreign certificates, insecure = true off loopback) prints an
// error naming the key and the value and exits with status 2, before
// anything is created under data_dir (-h, --help and help print the flags
// and exit 0; an error names the command once). SIGINT/SIGTERM shut down
// cleanly (exit 0; 1 when the shutdown fails); SIGHUP reloads the
// certificates (a failed reload keeps the old ones).
package main
