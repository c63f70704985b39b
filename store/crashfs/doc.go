// Package crashfs is an in-memory store.FS that loses, at a power loss,
// what was not synced, modelled on Pebble's strict MemFS
// (vfs.NewCrashableMem): a test runs a store on it, calls Crash at any
// point and reopens the store on what Crash returns.
//
// Usage:
//
//	fsys, _ := crashfs.ForStore(dir)           // dir and its parents exist, durably
//	db, _ := store.Open(dir, store.Options{FS: fsys})
//	... // create, append, seal, settle, confirm
//	after := fsys.Crash(rng)                   // the power is lost now
//	db.Close()                                 // still works, on fsys
//	db, _ = store.Open(dir, store.Options{FS: after})
//
// Invariants (what a Crash keeps):
//
//  1. A directory's entries are those of its last SyncDir: an unsynced
//     create, rename, remove or mkdir is undone (a removed file comes back
//     with its synced bytes; a created one is gone). Each directory keeps
//     its own entries, so a rename synced in one directory only may leave
//     the file under both names (one inode) or under its old name.
//  2. A file's bytes and size are those of its last Sync or Datasync (with
//     rng nil); with rng, per file, either those, or all it holds now, or
//     a torn mix (a prefix of what it holds now over the synced bytes, the
//     size either).
//  3. A sync that SetSyncError fails behaves as Linux's fsync after a
//     write-back error: the dirty bytes stay readable but are never
//     written back, by a later sync or a crash, unless written again.
//  4. Inode numbers survive a crash; ctimes move forward.
//  5. PebbleFS is Pebble's crashable MemFS, crashed by the same Crash
//     (each unsynced block or entry kept with a random probability when
//     rng is given, none without).
//
// What it cannot model: raw descriptors (Fd is not one, so splice and
// sendfile cannot run on it) and the store's LOCK file, which the store
// takes with flock on the operating system's directory.
//
// An FS and its Files are safe for concurrent use (one mutex).
package crashfs
