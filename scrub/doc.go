// Package scrub is the background scrubber of one broker: it verifies the
// checksums of the broker's sealed copies at a rate the operator sets, so
// that in-place corruption that keeps a copy's byte size — out of reach of
// the stat probe by construction — is found and the copy treated as lost.
//
// Usage: Open, then Run in a goroutine until its context ends; the replication
// server asks Corrupt for each copy it reports, and reports a corrupt copy as
// lost (never a catch-up source, replaced by the heal pass). Close when done.
//
// Invariants:
//
//  1. The scrubber only reads: it never changes, truncates or deletes a copy.
//     What to do about a corrupt copy is the heal pass's decision.
//  2. Reading is paced by a token bucket of BytesPerSecond, paid before each
//     copy is read, so the scrubber never takes more than its share of the
//     disk averaged over any copy-sized window.
//  3. A finding names the file identity (device, inode, sealed size) it was
//     made on. It applies to that file only: a copy replaced by a backfill
//     is a new file and is not corrupt until verified corrupt itself.
//  4. Progress (the last copy verified) and findings are kept in Pebble and
//     survive a restart: a restarted broker resumes after the last copy it
//     verified and still knows which copies are corrupt.
//
// Concurrency: Run is one goroutine; Corrupt, Findings and Stats are safe to
// call from any goroutine at any time.
package scrub
