// Package deploy holds what an operator loads next to the brokers, shipped
// and tested with the code; it has no Go API, only tests:
//
//   - prometheus/malachi-alerts.yml: Prometheus alerting rules (lost
//     segments, under-replicated too long, the mass-failure hold, no heal
//     leader, certificate expiry, corrupt copies, a stalled decommission),
//     each annotated with what to run.
//   - prometheus/malachi-alerts_test.yml: promtool unit tests of every rule,
//     firing and not firing.
//   - grafana/malachi.json: a Grafana dashboard of the same metrics.
//
// Invariants:
//
//  1. `promtool check rules` and `promtool test rules` pass (this package's
//     test runs them; it skips, saying so, only where promtool is not
//     installed: .ci/run installs it from Debian's prometheus package).
//  2. Every metric a rule or a dashboard query names is one the plugin
//     registers (plugin's TestDeployQueriesNameRegisteredMetrics parses
//     every expression with the PromQL parser and checks it against the
//     plugin's registry).
package deploy
