//go:build linux

package fsync

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/malachi-log/malachi/testbed/loopdisk"
)

// syncfs batching is taken only where syncfs persists directory entries:
// ext4 with a journal, not ext4 without one nor ext2 (one superblock magic
// for all three). Each is a loop disk formatted anew and mounted by the
// ext4 driver. Root only (loop devices); it skips elsewhere with why.
func TestJournaledOnlyWithAJournal(t *testing.T) {
	if why := loopdisk.Unavailable(); why != "" {
		t.Skip(why)
	}
	for _, c := range []struct {
		name string
		mkfs []string // nil: loopdisk's own ext4
		want bool
	}{
		{"ext4", nil, true},
		{"ext4 without a journal", []string{"mkfs.ext4", "-q", "-F", "-O", "^has_journal"}, false},
		{"ext2", []string{"mkfs.ext2", "-q", "-F"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			l, err := loopdisk.Create(filepath.Join(base, "img"), filepath.Join(base, "mnt"), 16<<20)
			if err != nil {
				t.Skipf("no loop disk: %v", err)
			}
			t.Cleanup(func() { l.Close() })
			if c.mkfs != nil {
				if _, err := exec.LookPath(c.mkfs[0]); err != nil {
					t.Skipf("needs %s (e2fsprogs): %v", c.mkfs[0], err)
				}
				if err := l.Unmount(); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command(c.mkfs[0], append(c.mkfs[1:], l.Dev)...).CombinedOutput(); err != nil {
					t.Fatalf("%v: %v: %s", c.mkfs, err, out)
				}
				if err := l.Mount(); err != nil {
					t.Fatal(err)
				}
			}
			if got := journaled(l.Dir); got != c.want {
				t.Fatalf("journaled(%s on %s) = %v, want %v", c.name, l.Dev, got, c.want)
			}
		})
	}
}
