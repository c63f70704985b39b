// Package catchup moves a byte range of a sealed copy from a source broker
// to a target broker over TCP, zero-copy at both ends: sendfile(2) from the
// copy file into the socket on the source, splice(2) from the socket
// through a pipe into the copy file at the right offset on the target. It
// decides nothing: the heal pass says what to copy from where. Mode selects
// the plain read/write path instead, at either end; Server.TLS and
// Client.TLS an encrypted one (user-space copies). Each transfer is
// authorized by a single-use ticket the coordinator signs.
//
// # Usage
//
// Every broker runs a Server on its dedicated data listener and keeps one
// Client; the leader's coordinator issues one ticket per transfer:
//
//	th, _ := catchup.NewThrottle(catchup.DefaultLimits())
//	srv := &catchup.Server{Source: catchup.StoreSource{DB: db}, Self: self, Tickets: certs, Throttle: th, Logger: log}
//	go srv.Serve(ln)
//	// coordinator, per backfill:
//	ticket, _ := catchup.IssueTicket(certs, catchup.Ticket{Segment: seg, To: seg.ByteSize + store.FooterSize,
//		Source: src, Target: dst, Issuer: self, Expires: now.Add(time.Minute)})
//	// target, in the backfill RPC that carried the ticket:
//	cl := &catchup.Client{Throttle: th}
//	res, err := cl.Fetch(ctx, sourceDataAddr, seg, ticket, catchup.StoreSink{DB: db}, bar.Progress)
//
// Fetch opens the target copy (the Sink cuts it back to its durable end),
// requests exactly [Resume, ByteSize+FooterSize) over one connection,
// writes the bytes at offset Resume, and commits: the Sink verifies every
// frame's CRC, the contiguous offsets, the footer and the checksum against
// seg, then syncs file and directory. On any error the target is aborted
// back to its durable end and the caller calls Fetch again later, with a
// new ticket (from the same or another source): it resumes where the
// valid bytes end.
//
// # Protocol
//
// One request per connection (see protocol.go for the layout): a 64-byte
// fixed header (version, range, the target's expectation of the sealed
// copy: start offset, length, byte size, checksum; the ticket's length),
// the segment id and the ticket. The server answers a 16-byte status,
// either CodeOK with the count of raw bytes that follow or a Code naming
// the refusal with a message. Requests are refused, each with its own
// Code, when unauthenticated (no ticket, a ticket that is not one or whose
// signature or certificate does not verify), forbidden (a genuine ticket
// for another source, segment, expectation or range, expired, or spent),
// malformed or truncated, of another version, for a segment name that
// fails meta.SegmentID.Validate, out of range, for an unknown, unsealed or
// latched copy, for a copy that does not match the expectation, or when
// the broker is busy. A refusal is counted (Stats.Refused) and logged at
// most once per remote IP per minute.
//
// # Tickets and the threat model
//
// A ticket (ticket.go) binds a segment and its expectation, the byte
// range the holder may request, the source, target and issuing brokers,
// an expiry and a random nonce, signed by the issuer's broker key; the
// issuer's certificate travels in it and must chain to the cluster CA
// (TicketVerifier). It is a bearer token: the data connection is plain TCP
// so that bytes move zero-copy, and the target's identity is not verified
// on it. The ticket reaches the target only over the mutually
// authenticated backfill RPC; whoever captures it from the data
// connection can at most race the target for the one transfer it grants,
// and only before it expires. Without Server.TLS the copy's bytes cross
// the network in the clear: set Server.TLS and Client.TLS (TLS 1.3, both
// ends presenting broker certificates, user-space copies) where that
// matters. Server.Insecure and Client.Insecure serve and send requests
// without tickets, for clusters without certificates on loopback only.
//
// Single use: a ticket admits one request. The server spends it (keeps its
// nonce until the ticket expires) when it answers CodeOK, before the first
// byte of the copy; the transfer that follows may complete or be cut, and
// the ticket never admits another. A request refused for any reason
// leaves its ticket as it was. A Fetch opens exactly one connection, so a
// resume after a cut is a new Fetch with a new ticket from the
// coordinator (as the heal pass plans it: a new backfill). Tickets
// expiring more than MaxTicketLife after the source's clock are refused,
// so the spent set stays bounded; brokers' clocks must agree to well
// within a ticket's life.
//
// # Invariants
//
//  1. Nothing about a segment is compared with a copy, opened or logged
//     before its request's ticket verified (signature, a CA-issued
//     certificate naming the issuer broker) and was found to grant it:
//     this source, the segment and expectation, the range, unexpired,
//     unspent; on an Insecure server, a request without a ticket skips
//     this. No length read from the wire sizes an allocation: every
//     length field is checked against its fixed bound before reading on.
//  2. A ticket admits at most one request that is answered CodeOK: after
//     that, or after its expiry, it admits none, and it never admits a
//     request for another source, segment, expectation or range. A
//     refused request changes nothing but the refusal count and the log
//     limiter.
//  3. A segment name reaches the Source only after meta.SegmentID.Validate
//     accepted it, so it cannot name a path outside the data directory.
//  4. A server sends exactly the announced count of bytes from within the
//     sealed copy, or closes the connection early; never other bytes.
//  5. A target is written only at [Resume, Size) and only by one transfer
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
//  6. A Fetch reports success only after the Sink verified the whole copy
//     against the metadata and synced file and directory.
//  7. All transfers sharing a Throttle together take at most its current
//     rate in tokens per second (Limits.BytesPerSecond, then each
//     Throttle.SetRate from the transfers' next chunk on; in chunks of at
//     most 1 MiB) and hold at most MaxTransfers slots in each direction
//     (receiving, sending), which never wait on each other; a receiving
//     transfer holds its slot through its commit. Throttle.Moved
//     counts every byte they moved.
//  8. On Linux the target writes a transfer's bytes behind it
//     (writebehind.go): each DefaultWriteBehind window that lands has its
//     writeback started with sync_file_range(2), and the window before it
//     is waited for, so at most about two windows of a transfer are dirty
//     or under writeback and the Commit's fsync flushes little. A failed
//     sync_file_range is a failed write of the target (ErrTarget, the
//     Sink's Failer latches the copy); it never makes bytes durable on its
//     own, and invariant 5 holds as for any stopped transfer.
//     WriteLikeTarget writes a file in this same pattern (chunks, writes,
//     windows) without a transfer, so that a heal's limit is measured for
//     it (testbed/healrun).
//  9. With Limits.Background, on Linux, a transfer's bytes (and a
//     received copy's commit) move on a thread of its own at nice 19 and
//     best-effort I/O priority 7 (background_linux.go); no other
//     goroutine ever runs on that thread (it ends with the transfer), and
//     the caller's thread and the process's main thread keep their
//     priority. A priority the kernel
//     refuses leaves the transfer at the caller's: it never fails one.
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
