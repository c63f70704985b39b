// Package meta holds the values of cluster metadata: brokers, segments, the
// snapshot a heal pass reads, and the commands the control plane applies.
//
// The package does no I/O and keeps no state: every function is pure, so the
// decision core (heal), the control plane (cluster) and the tests share one
// definition of what a valid segment and a valid command are.
//
// Invariants:
//
//  1. A BrokerID is never zero; zero is reserved for "no broker".
//  2. A SegmentID is a single path element: it can name a file under a data
//     directory and never escape it (see SegmentID.Validate).
//  3. A replica set never names a broker twice and never names broker zero.
//  4. A sealed segment carries a checksum; its offset range
//     [StartOffset, StartOffset+Length), ByteSize and Checksum never change
//     again: Table.Apply refuses any command that would change them (or
//     unseal it) with ErrSealed, naming the field and both values, and
//     Table.CheckRestore refuses such a snapshot. Sealing again with the
//     same values changes nothing.
//  5. Every change to a segment increments its Version; SetSegmentReplicas is
//     a compare-and-set on the replica set it expects to replace, so a stale
//     command is refused with ErrStaleReplicas and changes nothing.
package meta
