// Package loopdisk makes a small ext4 file system in a sparse image file,
// attached to a loop device and mounted with errors=remount-ro, and breaks
// it the way a real disk breaks: full (Fill), read-only under open files
// by an ext4 error (GoReadOnly). The demo's diskfull and readonly stages
// and the fault tests of store, catchup and fsync run on it.
//
// Usage:
//
//	if why := loopdisk.Unavailable(); why != "" { /* skip: not root, no tools */ }
//	d, err := loopdisk.Create(image, dir, 32<<20)
//	defer d.Close()
//	d.Fill(filepath.Join(d.Dir, "filler"), 16<<10)
//	d.GoReadOnly()
//	d.Unmount(); d.Fsck(); d.Mount() // the operator's recovery
//
// Invariants:
//
//  1. Create either returns a mounted Disk or leaves nothing behind: no
//     image, no attached loop device, no mount.
//  2. Close always unmounts (lazily when a plain umount keeps failing) and
//     detaches the loop device, then removes the image, whatever state the
//     Disk is in (mounted, unmounted, read-only, moved); a second Close does
//     nothing and returns nil.
//  3. The file system has 4 KiB blocks and no blocks reserved for root, so
//     a root writer can fill it.
//  4. Mounted and ReadOnly read /proc/self/mounts for Dev on Dir (octal
//     escapes undone); Dir follows MoveTo.
//
// Linux only: elsewhere Unavailable gives the reason and every operation
// fails with ErrUnsupported (disk_other.go), and Create with ErrNoDevice too.
//
// Concurrency: a Disk is used by one goroutine at a time. It runs losetup,
// mkfs.ext4, mount, umount and e2fsck, and needs root.
package loopdisk
