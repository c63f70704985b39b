package harness

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/malachi-log/malachi/meta"
)

// LogMarks are the brokers' log sizes at a moment, to read what they
// logged after it.
type LogMarks map[meta.BrokerID]int64

// MarkLogs notes every broker's log size now.
func (c *Cluster) MarkLogs() LogMarks {
	m := LogMarks{}
	for _, b := range c.Brokers() {
		if fi, err := os.Stat(b.LogPath); err == nil {
			m[b.ID] = fi.Size()
		}
	}
	return m
}

// Grep counts the lines the brokers logged since the marks that contain
// needle (case-insensitive), per broker, and returns the first.
func (m LogMarks) Grep(bs []*Broker, needle string) (map[meta.BrokerID]int, string) {
	counts := map[meta.BrokerID]int{}
	first := ""
	needle = strings.ToLower(needle)
	for _, b := range bs {
		f, err := os.Open(b.LogPath)
		if err != nil {
			continue
		}
		if _, err := f.Seek(m[b.ID], io.SeekStart); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				if strings.Contains(strings.ToLower(sc.Text()), needle) {
					counts[b.ID]++
					if first == "" {
						first = fmt.Sprintf("broker %d: %s", b.ID, FirstLine(sc.Text(), 300))
					}
				}
			}
		}
		f.Close()
	}
	return counts, first
}

// FirstLine is s's first line, cut to n bytes.
func FirstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// DirUsage counts the regular files under dir and their bytes.
func DirUsage(dir string) (files int, bytes int64) {
	_ = filepath.WalkDir(dir, func(_ string, de os.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return nil
		}
		if fi, err := de.Info(); err == nil {
			files++
			bytes += fi.Size()
		}
		return nil
	})
	return files, bytes
}
