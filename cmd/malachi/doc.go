// Command malachi is the operator CLI of Malachi heal.
//
//	malachi status --admin host:port [--json]
//	malachi plan   --admin host:port [--json]
//	malachi load   --admin host:port --segments N --records R --size B [--prefix p]
//	malachi release --admin host:port
//	malachi decommission ID [--cancel] --admin host:port
//	malachi maintenance ID --for 30m | --end --admin host:port
//	malachi cert   create-ca | create-broker | create-client | list
//
// status, plan, load, release, decommission and maintenance call the admin API through rpc
// over mutual TLS with a client certificate (--certs-dir, --user), or in
// plaintext with --insecure; a refusal says what was missing (no client
// certificate, the role the route needs).
//
// status prints one section per function (statusSections in status.go):
// every health count is the leader's last pass report, shown with its
// index and age and marked STALE when it is not current; the totals since
// that leader started; NO QUORUM when the broker asked hears neither a
// leader nor a majority; each latched copy with the error that latched it.
// load numbers its segments on after the prefix's highest (a second load
// makes new ids).
//
// The CLI imports nothing from testbed/: the showcase is the scaffolding's
// command malachi-demo (testbed/cmd/malachi-demo), whose lifecycle stages
// run this binary as an operator would.
//
// Exit status: 0 success and -h/--help on every command, 1 failure, 2 a bad
// command line. Errors name the flag and value, or the broker and address,
// and carry the "malachi:" prefix once.
package main
