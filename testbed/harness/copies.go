package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// ErrNoCopy: the broker holds no file for the segment.
var ErrNoCopy = errors.New("harness: no copy file")

// CopiesDir is broker b's directory of copies (<data_dir>/copies): what
// a loop disk is mounted on. Where in it a copy's file lies is
// CopyFiles's business.
func (b *Broker) CopiesDir() string { return filepath.Join(b.Dir, "copies") }

// copyFileID returns the segment a file in the copies tree holds, false
// for anything that is not a copy (lost+found, a stage's filler file).
func copyFileID(name string) (meta.SegmentID, bool) {
	id, ok := strings.CutSuffix(name, ".seg")
	return meta.SegmentID(id), ok && id != ""
}

// CopyFiles walks broker b's copies directory, at any depth (the store
// may shard it into subdirectories), and returns the path of every copy
// file by segment. It is the one place that knows the copies' layout; a
// missing directory is no copies.
func (b *Broker) CopyFiles() (map[meta.SegmentID]string, error) {
	out := map[meta.SegmentID]string{}
	err := filepath.WalkDir(b.CopiesDir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if id, ok := copyFileID(d.Name()); ok {
				out[id] = path
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("harness: broker %d's copies: %w", b.ID, err)
	}
	return out, nil
}

// CopyPath returns the path of broker b's copy of segment id, where the
// store's layout puts it (store.CopyPath); the error wraps ErrNoCopy when
// no file is there.
func (b *Broker) CopyPath(id meta.SegmentID) (string, error) {
	p := store.CopyPath(b.Dir, id)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: broker %d, segment %s, at %s", ErrNoCopy, b.ID, id, p)
	}
	return p, nil
}

// SealedSize is the size of a whole sealed copy of seg on disk: its
// frames and the footer.
func SealedSize(seg meta.Segment) int64 { return seg.ByteSize + footerSize }

// CopySizes returns the size of every copy file of broker b, by segment.
func (b *Broker) CopySizes() (map[meta.SegmentID]int64, error) {
	files, err := b.CopyFiles()
	if err != nil {
		return nil, err
	}
	out := make(map[meta.SegmentID]int64, len(files))
	for id, p := range files {
		if fi, err := os.Stat(p); err == nil {
			out[id] = fi.Size()
		}
	}
	return out, nil
}

// CopySizes returns the size of every copy file of every running broker
// (Broker.CopySizes), a broker that could not be read left out.
func (c *Cluster) CopySizes() map[meta.BrokerID]map[meta.SegmentID]int64 {
	out := map[meta.BrokerID]map[meta.SegmentID]int64{}
	for _, b := range c.Running() {
		if m, err := b.CopySizes(); err == nil {
			out[b.ID] = m
		}
	}
	return out
}
