//go:build linux

package fsync

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Filesystems whose syncfs(2) commits the journal that holds every
// directory entry made before it (sync_fs forces and waits for a commit),
// ext4 only with a journal (see journaled).
const (
	ext4Magic = 0xEF53
	xfsMagic  = 0x58465342
)

// fsSyncSupported says why syncfs(2) may not stand in for directory fsyncs
// on this kernel, or "". Before Linux 5.8 syncfs did not report writeback
// errors (errseq on the superblock), so a failed write could pass unseen.
func fsSyncSupported() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "uname: " + err.Error()
	}
	rel := unix.ByteSliceToString(u.Release[:])
	major, minor, ok := kernelVersion(rel)
	if !ok {
		return fmt.Sprintf("kernel release %q not understood", rel)
	}
	if major < 5 || major == 5 && minor < 8 {
		return fmt.Sprintf("kernel %s: syncfs reports writeback errors from Linux 5.8", rel)
	}
	return ""
}

// kernelVersion parses the "6.18" of "6.18.44-fc-v1098".
func kernelVersion(rel string) (major, minor int, ok bool) {
	if _, err := fmt.Sscanf(rel, "%d.%d", &major, &minor); err != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// dirDevice returns the device of the directory at path, or ok false when
// it is not a directory that stat can see (the per-path sync then reports
// what is wrong with it).
func dirDevice(path string) (dev uint64, ok bool) {
	var st unix.Stat_t
	for {
		err := unix.Stat(path, &st)
		if err == unix.EINTR {
			continue
		}
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return 0, false
		}
		return st.Dev, true
	}
}

// journaled says whether the filesystem holding the directory path is one
// where a syncfs persists directory entries: XFS, or ext4 (ext3) with a
// journal. ext2, ext3 and ext4 share one superblock magic, and ext4
// without a journal (mkfs -O ^has_journal, or an ext2 mounted by the ext4
// driver) commits no directory entry on syncfs that a directory fsync
// would: there the Syncer syncs each directory.
func journaled(path string) bool {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return false
	}
	switch fs.Type {
	case xfsMagic:
		return true
	case ext4Magic:
		dev, ok := dirDevice(path)
		return ok && hasJBD2(dev)
	}
	return false
}

// hasJBD2 says whether the block device dev runs a jbd2 journal: the
// kernel lists each journal in /proc/fs/jbd2 as <device name>-<journal
// inode> (8 for an internal one). The name is that of /sys/dev/block's
// link for the device's major:minor.
func hasJBD2(dev uint64) bool {
	link, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(dev), unix.Minor(dev)))
	if err != nil {
		return false
	}
	m, _ := filepath.Glob(filepath.Join("/proc/fs/jbd2", filepath.Base(link)+"-*"))
	return len(m) > 0
}

// syncFilesystem commits the filesystem holding dir with one syncfs(2).
// The descriptor is opened here, so the error covers the writeback done
// from now on, as a directory fsync's would.
func syncFilesystem(dir string) error {
	fd, err := openForSync(dir, true)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer closeFD(fd)
	for {
		err := unix.Syncfs(fd)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("syncfs: %w", err)
		}
		return nil
	}
}

// dirtyBytes is the machine's page cache waiting for or under writeback
// (/proc/meminfo Dirty + Writeback): about what a syncfs may have to write
// before its commit.
func dirtyBytes() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	var total int64
	found := 0
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		for _, name := range [][]byte{[]byte("Dirty:"), []byte("Writeback:")} {
			rest, ok := bytes.CutPrefix(line, name)
			if !ok {
				continue
			}
			f := bytes.Fields(rest)
			if len(f) != 2 || string(f[1]) != "kB" {
				return 0, fmt.Errorf("/proc/meminfo: %q not understood", line)
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: %q: %w", line, err)
			}
			total += kb << 10
			found++
		}
	}
	if found != 2 {
		return 0, fmt.Errorf("/proc/meminfo: Dirty or Writeback missing")
	}
	return total, nil
}
