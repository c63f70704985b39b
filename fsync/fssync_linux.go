//go:build linux

package fsync

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Filesystems whose syncfs(2) commits the journal that holds every
// directory entry made before it (sync_fs forces and waits for a commit).
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

// journaled says whether the filesystem holding path is ext4 or XFS.
func journaled(path string) bool {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return false
	}
	return fs.Type == ext4Magic || fs.Type == xfsMagic
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
