// Command malachi-demo is the showcase of Malachi heal, part of the
// scaffolding: it starts a cluster of real malachid processes on loopback,
// loads it, breaks it stage by stage (testbed/stage) and reports how it
// healed, as text or with --json as a JSON report (testbed/demo, whose doc
// lists the flags' meaning and the invariants).
//
//	malachi-demo [--brokers 5] [--rf 3] [--segments 300] [--segment-size 1MiB] [--json] [--keep]
//	             [--malachid path] [--malachi path] [--faults list] [--insecure] ...
//
// --malachid and --malachi name the broker and the operator CLI binaries
// (default: each built from this module into the demo's directory); the
// lifecycle stages give the operator's commands (decommission,
// maintenance, status) through the CLI and judge what it prints. make demo
// builds the three binaries into bin/ and runs this one.
//
// Exit status: 0 when every stage healed and -h/--help, 1 a failure or a
// demo that did not heal (also after SIGINT, SIGTERM or SIGHUP, which stop
// the brokers), 2 a bad command line. A usage error carries the
// "malachi-demo:" prefix once.
package main
