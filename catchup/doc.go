// Package catchup moves a byte range of a sealed copy from a source broker
// to a target broker over TCP, zero-copy at both ends: sendfile(2) from the
// copy file into the socket on the source, splice(2) from the socket
// through a pipe into the copy file at the right offset on the target. It
// decides nothing: the heal pass says what to copy from where. Mode selects
// the plain read/write path instead, at either end.
//
// # Usage
//
// Every broker runs a Server on its dedicated data listener and keeps one
// Client:
//
//	th, _ := catchup.NewThrottle(catchup.DefaultLimits())
//	srv := &catchup.Server{Source: catchup.StoreSource{DB: db}, Secret: secret, Throttle: th, Logger: log}
//	go srv.Serve(ln)
//	cl := &catchup.Client{Secret: secret, Throttle: th}
//	res, err := cl.Fetch(ctx, sourceDataAddr, seg, catchup.StoreSink{DB: db}, bar.Progress)
//
// Fetch opens the target copy (the Sink cuts it back to its durable end),
// requests exactly [Resume, ByteSize+FooterSize), writes the bytes at
// offset Resume, and commits: the Sink verifies every frame's CRC, the
// contiguous offsets, the footer and the checksum against seg, then syncs
// file and directory. On any error the target is aborted back to its
// durable end and the caller simply calls Fetch again later (from the same
// or another source): it resumes where the valid bytes end.
//
// # Protocol
//
// One request per connection (see protocol.go for the layout): a 80-byte
// fixed header (version, range, the target's expectation of the sealed copy:
// start offset, length, byte size, checksum; a timestamp and a nonce), the
// segment id, and an HMAC-SHA256 over all of it keyed with the cluster
// secret. The server answers a 16-byte status, either CodeOK with the count
// of raw bytes that follow or a Code naming the refusal with a message.
// Requests are refused, each with its own Code, when unauthenticated
// (signature, clock skew, replayed nonce), malformed, of another version,
// for a segment name that fails meta.SegmentID.Validate, out of range, for
// an unknown, unsealed or latched copy, for a copy that does not match the
// expectation, or when the broker is busy.
//
// # Invariants
//
//  1. Nothing about a segment is looked at, opened or logged before its
//     request is authenticated; no length read from the wire sizes an
//     allocation (both headers have fixed bounds checked before reading
//     on).
//  2. A segment name reaches the Source only after meta.SegmentID.Validate
//     accepted it, so it cannot name a path outside the data directory.
//  3. A server sends exactly the announced count of bytes from within the
//     sealed copy, or closes the connection early; never other bytes.
//  4. A target is written only at [Resume, Size) and only by one transfer
//     at a time (the Sink holds it exclusively). A transfer that does not
//     commit leaves the copy at its durable end: never past a damaged
//     frame, never cut below bytes that were already valid.
//     The zero-copy target writes the file in aligned units (writeAlign)
//     and may hold less than one unit in its pipe between writes; when a
//     transfer stops for any reason, what the pipe holds is written
//     before the error is returned, so a cut keeps every byte that
//     arrived. It first reserves the blocks of [Resume, Size)
//     with fallocate(2) FALLOC_FL_KEEP_SIZE (best effort): the file's size
//     grows only as bytes land, and a cut transfer's reserved blocks past
//     the end are the copy's own, reused by the resuming transfer or freed
//     when the Sink cuts or removes the copy.
//  5. A Fetch reports success only after the Sink verified the whole copy
//     against the metadata and synced file and directory.
//  6. All transfers sharing a Throttle together take at most
//     BytesPerSecond tokens per second (in chunks of at most 1 MiB) and
//     hold at most MaxTransfers slots.
//
// # Concurrency and crashes
//
// Server and Client are safe for concurrent use; each transfer runs in its
// own goroutine (server) or the caller's (client) and has its own
// connection, pipe and deadline. The socket's deadline is pushed one idle
// timeout ahead before every chunk (and on the zero-copy target as bytes
// land within one), so a stalled peer ends the transfer after
// IdleTimeout; cancelling the context ends it at once. A target process
// killed mid-transfer leaves unsynced bytes that the store's durable-end
// scan judges on the next OpenTarget, exactly like a cut
// connection. The source side holds nothing but an open read-only
// descriptor per transfer.
package catchup
