// Package ratelog bounds how often one peer can make a log line: a refused
// connection or request is logged at most once per key (a peer's address
// or identity) per interval, with the count of the refusals not logged
// since, so a flood of garbage or forged requests costs one line a minute.
//
// Invariants: Allow is safe for concurrent use; its memory is bounded by
// the keys seen within one interval (older keys are dropped as new ones
// arrive), and never by the rate of refusals.
package ratelog
