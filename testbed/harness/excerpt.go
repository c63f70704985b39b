package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// segmentName matches the segment ids the demo, the tests and the brokers
// write (s-00011, r-00003, diskfull-00000, nem-00140) and the Kafka
// partitions' segments (k.<topic>.<partition>.<base offset>, meta's
// PartitionSegmentID: k.demo-clients.00000.0000000002).
var segmentName = regexp.MustCompile(`\b(?:[a-z]+-[0-9]{5}|k\.[A-Za-z0-9._-]+\.[0-9]{5}\.[0-9]{10})\b`)

// SegmentsNamed returns the distinct segment ids named in texts, in order
// of first appearance.
func SegmentsNamed(texts ...string) []string {
	var out []string
	for _, t := range texts {
		for _, m := range segmentName.FindAllString(t, -1) {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// LogExcerpt returns the lines of the broker logs under dir (dir/b*/
// malachid.log) that name one of segments, every broker's merged in time
// order (by the line's "time" field), at most max of them (the last; each
// line names its broker). A failed test prints it, so that what the
// cluster did to those segments can be read after its directory is gone.
// No segments or no log gives "".
func LogExcerpt(dir string, segments []string, max int) string {
	if len(segments) == 0 || max <= 0 {
		return ""
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "b*", "malachid.log"))
	type line struct{ at, text string }
	var lines []line
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			text := sc.Text()
			if !slices.ContainsFunc(segments, func(s string) bool { return strings.Contains(text, s) }) {
				continue
			}
			var rec struct {
				Time string `json:"time"`
			}
			_ = json.Unmarshal([]byte(text), &rec)
			lines = append(lines, line{rec.Time, text})
		}
		f.Close()
	}
	slices.SortStableFunc(lines, func(a, b line) int { return strings.Compare(a.at, b.at) })
	var sb strings.Builder
	if len(lines) > max {
		fmt.Fprintf(&sb, "(%d earlier lines left out)\n", len(lines)-max)
		lines = lines[len(lines)-max:]
	}
	for _, l := range lines {
		sb.WriteString(l.text)
		sb.WriteByte('\n')
	}
	return sb.String()
}
