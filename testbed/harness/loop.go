package harness

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/malachi-log/malachi/testbed/loopdisk"
)

// Loop returns the mounted loop disk and its broker, nils when none is.
func (c *Cluster) Loop() (*loopdisk.Disk, *Broker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loop, c.loopBroker
}

// LoopSkip says why Start could not mount the loop disk Config asked for
// ("" when it did or none was asked for).
func (c *Cluster) LoopSkip() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loopSkip
}

// LoopCloseErr is what unmounting the loop disk in Stop returned.
func (c *Cluster) LoopCloseErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loopCloseErr
}

// CopiesImage is where broker b's loop disk image lives: beside its
// data_dir, never inside the mount.
func (b *Broker) CopiesImage() string {
	return filepath.Join(b.Home, "copies.img")
}

// MountCopiesDisk mounts a loop ext4 of size bytes at b's copies
// directory, which must be empty or absent; b must not be running.
func (c *Cluster) MountCopiesDisk(b *Broker, size int64) error {
	if b.Alive() {
		return fmt.Errorf("broker %d runs: its copies disk is mounted before it starts", b.ID)
	}
	dir := b.CopiesDir()
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("broker %d: %s is not empty (%s): nothing is mounted over copies", b.ID, dir, ents[0].Name())
	}
	l, err := loopdisk.Create(b.CopiesImage(), dir, size)
	if err != nil {
		return fmt.Errorf("broker %d's copies disk: %w", b.ID, err)
	}
	c.mu.Lock()
	c.loop, c.loopBroker = l, b
	c.mu.Unlock()
	return nil
}

// MoveCopiesToDisk puts broker b's copies on a new loop ext4 of size
// bytes: the disk is mounted aside, the copies directory's tree is copied
// onto it (every file synced), and the mount is moved over it (mount
// --move); the old files stay under the mount point, hidden. b must not
// be running: a running broker keeps writing its active copies (a Kafka
// partition's frames) through descriptors of the old files, so the
// frames it wrote after their copy would be missing from the new disk
// (the copy would fall below what it acknowledged). The copies' file
// identities change, so their confirmations no longer apply: heal
// confirms them again. On an error nothing stays mounted.
func (c *Cluster) MoveCopiesToDisk(b *Broker, size int64) (files int, bytes int64, err error) {
	if b.Alive() {
		return 0, 0, fmt.Errorf("broker %d runs: its copies move onto a disk only while it is stopped", b.ID)
	}
	dir := b.CopiesDir()
	aside := filepath.Join(b.Home, "copies.mnt")
	l, err := loopdisk.Create(b.CopiesImage(), aside, size)
	if err != nil {
		return 0, 0, fmt.Errorf("broker %d's copies disk: %w", b.ID, err)
	}
	files, bytes, err = copyTree(dir, aside)
	if err == nil {
		if err = l.MoveTo(dir); err == nil {
			os.Remove(aside)
			c.mu.Lock()
			c.loop, c.loopBroker = l, b
			c.mu.Unlock()
			return files, bytes, nil
		}
	}
	l.Close()
	return 0, 0, fmt.Errorf("moving broker %d's copies onto its loop disk: %w", b.ID, err)
}

// copyTree copies the regular files and directories under from into to
// (which exists), each file and directory synced.
func copyTree(from, to string) (files int, bytes int64, err error) {
	err = filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil || rel == "." {
			return err
		}
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(dst, 0o755)
		case d.Type().IsRegular():
			n, err := copyFileSynced(path, dst)
			files++
			bytes += n
			return err
		}
		return nil
	})
	if err != nil {
		return files, bytes, err
	}
	err = filepath.WalkDir(to, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return SyncDir(path)
	})
	return files, bytes, err
}

func copyFileSynced(from, to string) (int64, error) {
	src, err := os.Open(from)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(dst, src)
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("copying %s to %s: %w", from, to, err)
	}
	return n, nil
}

// SyncDir fsyncs directory dir.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// closeLoop unmounts and detaches the loop disk; its brokers must have
// exited. The error is kept for LoopCloseErr.
func (c *Cluster) closeLoop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loop == nil {
		return
	}
	c.loopCloseErr = c.loop.Close()
	c.loop, c.loopBroker = nil, nil
}
