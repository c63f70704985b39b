package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/malachi-log/malachi/meta"
)

// segmentName matches the segment ids the demo, the tests and the brokers
// write (s-00011, r-00003, diskfull-00000, nem-00140) and the Kafka
// partitions' segments (k.<topic>.<partition>.<base offset>, meta's
// PartitionSegmentID: k.demo-clients.00000.0000000002).
var segmentName = regexp.MustCompile(`\b(?:[a-z]+-[0-9]{5}|k\.[A-Za-z0-9._-]+\.[0-9]{5}\.[0-9]{10})\b`)

// partitionRecord matches a Kafka record as the clients' checker names it
// (kafkaload.Record: demo-clients/0@4043), capturing topic and partition.
var partitionRecord = regexp.MustCompile(`\b([A-Za-z0-9._-]+)/([0-9]+)@[0-9]+\b`)

// SegmentsNamed returns the distinct segment ids named in texts, in order
// of first appearance. A Kafka record (topic/partition@offset) names
// every segment of its partition, as the prefix of their ids
// (k.demo-clients.00000.), which LogExcerpt matches as it matches an id.
func SegmentsNamed(texts ...string) []string {
	var out []string
	add := func(m string) {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	for _, t := range texts {
		for _, m := range segmentName.FindAllString(t, -1) {
			add(m)
		}
		for _, m := range partitionRecord.FindAllStringSubmatch(t, -1) {
			if p, err := strconv.ParseInt(m[2], 10, 32); err == nil {
				id := string(meta.PartitionSegmentID(m[1], int32(p), 0))
				add(strings.TrimSuffix(id, "0000000000"))
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
