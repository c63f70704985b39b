// Command malachi is the operator CLI of Malachi heal.
//
//	malachi demo   [--brokers 5] [--rf 3] [--segments 300] [--segment-size 1MiB] [--json] [--keep] [--insecure]
//	malachi status --admin host:port [--json]
//	malachi plan   --admin host:port [--json]
//	malachi load   --admin host:port --segments N --records R --size B [--prefix p]
//	malachi release --admin host:port
//	malachi decommission ID [--cancel] --admin host:port
//	malachi maintenance ID --for 30m | --end --admin host:port
//	malachi cert   create-ca | create-broker | create-client | list
//
// status, plan, load, release, decommission and maintenance call the admin API through internal/rpc
// over mutual TLS with a client certificate (--certs-dir, --user), or in
// plaintext with --insecure; a refusal says what was missing (no client
// certificate, the role the route needs). The demo makes its own CA,
// broker and client certificates under its directory (certs/, outside
// every data_dir, so restarted and swapped brokers keep them), gives each
// broker its certs_dir and calls every broker as "operator"; --insecure
// runs it the old plaintext way (insecure = true).
//
// status prints one section per function (statusSections in status.go):
// every health count is the leader's last pass report, shown with its
// index and age and marked STALE when it is not current; the totals since
// that leader started; NO QUORUM when the broker asked hears neither a
// leader nor a majority; each latched copy with the error that latched it.
// load numbers its segments on after the prefix's highest (a second load
// makes new ids).
//
// demo is testbed/demo (the stages are testbed/stage's, whose doc lists
// them and their invariants); cmd/malachi hands it the command line and
// its own binary, through which the lifecycle stages give the operator's
// commands (decommission, maintenance, status) and judge what they print.
//
// Exit status: 0 success and -h/--help on every command, 1 failure or a demo that did not heal, 2 a bad
// command line. Errors name the flag and value, or the broker and address,
// and carry the "malachi:" prefix once.
package main
