package demo

import (
	"os"
	"syscall"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/testbed/harness"
)

// The on-disk format of a copy (store/doc.go); the demo reads copies
// itself (harness.AuditCopy), as an auditor independent of the broker
// that wrote them.
const (
	frameHeaderSize = 16
	footerSize      = 40
)

// errAudit marks a copy whose bytes do not match its segment's seal.
var errAudit = harness.ErrAudit

// auditCopyFile checks the file at path is a byte-exact sealed copy of
// seg (harness.AuditCopy).
func auditCopyFile(path string, seg meta.Segment) error { return harness.AuditCopy(path, seg) }

// fileKey identifies one version of a file, so that an audit is repeated
// only when the file changed.
type fileKey struct {
	ino, dev uint64
	size     int64
	mtime    time.Time
}

func statKey(path string) (fileKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileKey{}, err
	}
	k := fileKey{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.ino, k.dev = uint64(st.Ino), uint64(st.Dev)
	}
	return k, nil
}

// auditor caches audit results by file version: a poll re-reads only the
// copies whose file changed since it was last read.
type auditor struct {
	cache map[string]auditEntry
	// BytesRead counts the bytes read by audits, for the report.
	BytesRead int64
}

type auditEntry struct {
	key     fileKey
	version uint64 // segment version audited against
	err     error
}

func newAuditor() *auditor { return &auditor{cache: map[string]auditEntry{}} }

// Check audits the copy of seg at path unless the same file version was
// already audited against the same segment version.
func (a *auditor) Check(path string, seg meta.Segment) error {
	k, err := statKey(path)
	if err != nil {
		delete(a.cache, path)
		return err
	}
	if e, ok := a.cache[path]; ok && e.key == k && e.version == seg.Version {
		return e.err
	}
	err = auditCopyFile(path, seg)
	a.BytesRead += k.size
	a.cache[path] = auditEntry{key: k, version: seg.Version, err: err}
	return err
}

// Forget drops the cached result for path, after the demo changed the file
// itself in a way its mtime might not show.
func (a *auditor) Forget(path string) { delete(a.cache, path) }
