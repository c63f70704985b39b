// Package store keeps one broker's copies of segments on disk: record
// framing, append with preallocation, seal, durable end, truncate, settle
// (truncate + fence), verify, the in-memory storage-failure latch, the
// read and write ends of a catch-up transfer, and the local confirmation
// state in Pebble.
//
// # Layout
//
// A DB owns a directory (format 2, FormatVersion):
//
//	<dir>/FORMAT                          "malachi store format 2\n"
//	<dir>/LOCK                            flock: one DB per directory
//	<dir>/copies/<shard>/<segment-id>.seg one copy per file
//	<dir>/confirm/                        Pebble DB of confirmations
//
// <shard> is one of 256 directories "00".."ff": the low 8 bits of the
// 32-bit FNV-1a hash of the id's bytes, in two lower-case hex digits
// (Shard, CopyPath), so that no directory grows past ~copies/256 entries.
// A copy is a sequence of frames from byte 0:
//
//	crc32c(u32) | payload_len(u32) | offset(u64) | payload
//
// little-endian, the CRC32C (Castagnoli) covering everything after the CRC
// field. A sealed copy ends with a FooterSize-byte seal footer:
//
//	magic "MLCHSEAL" | start_offset(u64) | length(u64) | byte_size(u64) |
//	crc32c of the frames [0,byte_size) (u32) | crc32c of the previous 36 bytes (u32)
//
// so a settled copy measures byte_size+FooterSize. meta.Segment.ByteSize
// counts the frames only and meta.Segment.Checksum is meta.CRC32C of the
// frames' CRC.
//
// # Format version and migration
//
// FORMAT is written atomically (a temporary file written and fsynced,
// renamed over FORMAT, the store directory fsynced). Open refuses a FORMAT
// newer than FormatVersion, or one it cannot read, with ErrFormat naming
// both versions, before it changes anything. No FORMAT is format 1: every
// copy directly in <dir>/copies/<id>.seg. Open migrates it: it creates the
// shard directories (then fsyncs copies/ and <dir>), renames each
// <id>.seg of copies/ into its shard (a partial backfill is a .seg file
// like any other and moves as it is), fsyncs every shard that received one
// and then copies/, and writes FORMAT last. A rename moves one file: a
// crash at any point leaves each copy under its old name or its new one,
// and with no FORMAT the next Open runs the same steps again over what is
// left. A copy found under both names (a rename cut between its link and
// its unlink) is one file: the old name is removed; two different files
// are never both registered (the shard's is the copy, the other is left
// with a warning). Files that are no copy (other suffixes, names that are
// no segment id) stay where they are, ignored as before. Renames keep
// inodes, so confirmations (keyed by inode) survive the migration. Open of
// a format-2 store also moves any <id>.seg found directly in copies/. A
// build older than format 2 sees a migrated store as empty: downgrades
// are not supported.
//
// # Probe
//
// OpenStatDirs opens the shard directories (O_PATH) for one batch of
// stats and StatDirs.Target gives, without allocating or locking, the
// descriptor of a copy's shard and its file name, for a stat relative to
// it; ProbeFacts gives the latch and the confirmed identity from memory
// (after LoadConfirmations). The descriptors are the caller's, opened per
// batch and closed after it: a batch sees the directories the paths name
// at its start (a disk mounted over copies/ while the broker runs
// included), and Close of the DB never races a stat.
//
// # Leftovers
//
// CopiesVersion changes whenever the store gains or loses a copy, so a
// caller keeps a list derived from List until it moves. Tail gives a
// copy's size and whether a valid seal footer ends it, reading at most
// FooterSize bytes without loading or latching the copy (for copies
// outside their replica set, which the probe reports).
//
// # Usage
//
//	db, _ := store.Open(dir, store.Options{Logger: log, Preallocate: 64 << 20})
//	db.Create(id, start)            // the active segment
//	off, _ := db.Append(id, record) // many times (AppendAt: only at offset want)
//	db.Sync(id)                     // frames appended before are acknowledged
//	seal, _ := db.Seal(id)          // footer, fenced; seal goes to the metadata
//	...
//	db.Settle(id, seg)              // heal: bring a copy to the sealed segment
//	db.SettleBatch(ctx, segs, r, e) // ... a batch, one SyncDirs for its shards
//	db.Verify(id, seg)              // scrub
//	t, _ := db.OpenTarget(id, seg)  // catch-up: write [t.Resume(), size) then
//	t.Commit()                      // verify, sync, fence
//
// # Invariants
//
//  1. Frames start at byte 0 and their offsets are contiguous from the
//     copy's start offset; the durable end (End) is the end of the last frame
//     that is whole, passes its CRC and continues the offsets. A scan never
//     reports a durable end past a damaged frame.
//  2. A frame is acknowledged once a Sync that followed its Append returned
//     nil. The store cuts frames only when asked to (Truncate, Settle to a
//     shorter seal, a failed Commit; never against the copy's own seal, 8);
//     on its own it cuts only what lies past the durable end (a torn frame,
//     a preallocated tail).
//  3. A copy with a valid footer agreeing with its frames is sealed and
//     fenced: it refuses appends (ErrSealed), after a restart as well.
//  4. An I/O error on a copy latches it in memory: every later request on
//     it returns an error wrapping ErrLatched and the cause, except Delete.
//     Only a new Open clears the latch.
//  5. Settle never fences a copy whose frames end short of the segment's
//     byte_size (ErrShort) or disagree with its checksum (ErrCorrupt).
//  6. A confirmation is keyed by segment and file identity (device, inode,
//     size): a replaced or resized file is not confirmed. A segment has at
//     most one confirmation key; Confirmed answers from a mirror of them in
//     memory that changes only after a durable write to Pebble.
//  7. All file access goes through Options.FS (the seam store/errorfs
//     wraps and store/crashfs implements), except the O_PATH shard
//     descriptors of OpenStatDirs, through which the store itself never
//     reads or writes, and the flock of LOCK; Pebble runs on the FS's
//     PebbleFS when it has one (PebbleFSer), else on the operating
//     system's, and logs only through Options.Logger.
//  8. The store never cuts the frames that a copy's own valid seal footer
//     covers on the word of the caller's metadata: when that footer (agreeing
//     with the frames and their checksum) disagrees with the segment passed
//     to Settle or OpenTarget (start offset, length, byte_size, checksum),
//     they refuse with ErrSealConflict and leave the file byte for byte as
//     it is, unlatched. A copy without such a footer follows the metadata.
//  9. A copy of id is registered only from its CopyPath shard, once (a file
//     in another shard is ignored); every directory sync made for it is of
//     that shard; a DB serves only a store whose FORMAT says FormatVersion
//     (migrated first when older, refused when newer).
//  10. The store says sealed, settled or confirmed only of bytes it made
//     durable in this process: a copy found sealed after Open (whose
//     footer may be in the page cache only, written by a process that
//     died before its fsync or kept after a failed fsync) has its footer
//     rewritten and fsynced, and its directory synced, by the first Seal,
//     Settle or Confirm that relies on it; later ones in the process do
//     not sync again. Delete removes the confirmation (durably) before the
//     file, so no confirmation outlives its file. Open syncs the parent of
//     every directory it creates.
//
// # Concurrency and crashes
//
// A DB is safe for concurrent use. Requests on one copy are serialised by
// the copy's lock; requests on different copies run in parallel. A Target
// holds its copy exclusively until Commit or Abort. Sealed copies hold no
// file descriptor: each request opens the file for its duration, so a
// broker with 10^6 copies costs no descriptor in steady state. Open reads
// only the directory; a copy's file is scanned on first use.
//
// After a power loss a copy holds every acknowledged frame, perhaps followed by
// a torn frame or a zero (preallocated) tail; the durable end finds the
// acknowledged frames and an append after the restart first cuts what
// follows them. Create, Seal, Settle, Commit and Delete sync the copy's
// own shard directory, and only it (through Options.DirSyncer when set):
// concurrent settles of copies in many shards reach the DirSyncer as many
// distinct directories, which fsync.Syncer coalesces (one syncfs for a
// batch of at least FilesystemSyncMin of them); SettleBatch hands them over
// in one SyncDirs. A copy this process sealed, received or settled keeps a
// mark (inode, size, ctime): settling it again while a stat finds it
// unchanged reads nothing (see settledMark for what a mark cannot see).
// ConfirmBatch writes a batch's confirmations in one durable Pebble write.
//
// The confirmation DB is opened on first use and not written with less
// than Options.ConfirmMinFree bytes free: Pebble treats a failed write as
// fatal (see openConfirm), and the store must keep serving, and
// latching, copies on a full disk.
package store
