// Package pebblelog routes Pebble's log messages to zerolog, so that no
// Pebble instance of ours writes to stderr on its own.
//
// Invariants:
//  1. Every message goes to the zerolog.Logger given to New, with
//     component=pebble and pebble_store naming the store; nothing is
//     written to stderr or to a global logger.
//  2. A message is trimmed of surrounding white space (Pebble ends most
//     with a newline).
//  3. Fatalf calls the OnFatal hook (if set), logs at fatal level and then
//     panics; it never calls os.Exit, so the host decides what a broken
//     Pebble invariant costs.
//  4. It is the project's only pebble.Logger: the store's confirmations,
//     the cluster's raft log and the scrubber all open Pebble with one.
//     The logger given to New carries no "component" (the host's logger,
//     not a package's), so each line names its component once.
//
// The logger holds no state of its own and is safe for concurrent use.
package pebblelog
