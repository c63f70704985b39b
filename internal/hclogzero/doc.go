// Package hclogzero routes hclog (hashicorp/raft's logger) to zerolog, so
// that raft never writes to stderr on its own. It is the project's only
// hclog.Logger; internal/pebblelog is its twin for Pebble.
//
// Invariants:
//  1. Every message goes to the zerolog.Logger given to New, with
//     component set to the logger's name ("raft", "raft.net" after
//     Named("net")); key/value pairs become fields, an hclog.Fmt value its
//     formatted string.
//  2. A key that would repeat one of zerolog's own fields (time, level,
//     message) or one the host sets (component, broker) gets a trailing
//     "_", so no line carries a key twice. The logger given to New must
//     therefore carry neither "component" nor a field raft sets.
//  3. SetLevel is shared by a logger and every child made with With or
//     Named; a level below it, or below the zerolog logger's, is dropped.
package hclogzero
