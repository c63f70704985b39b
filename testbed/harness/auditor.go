package harness

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/malachi-log/malachi/meta"
)

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

// Auditor caches AuditCopy results by file version: a poll re-reads only the
// copies whose file changed since it was last read.
type Auditor struct {
	cache map[string]auditEntry
	// BytesRead counts the bytes read by audits, for the report.
	BytesRead int64
}

type auditEntry struct {
	key     fileKey
	version uint64 // segment version audited against
	err     error
}

// NewAuditor returns an empty cache.
func NewAuditor() *Auditor { return &Auditor{cache: map[string]auditEntry{}} }

// Check audits the copy of seg at path unless the same file version was
// already audited against the same segment version.
func (a *Auditor) Check(path string, seg meta.Segment) error {
	k, err := statKey(path)
	if err != nil {
		delete(a.cache, path)
		return err
	}
	if e, ok := a.cache[path]; ok && e.key == k && e.version == seg.Version {
		return e.err
	}
	err = AuditCopy(path, seg)
	a.BytesRead += k.size
	a.cache[path] = auditEntry{key: k, version: seg.Version, err: err}
	return err
}

// Forget drops the cached result for path, after the demo changed the file
// itself in a way its mtime might not show.
func (a *Auditor) Forget(path string) { delete(a.cache, path) }

// ForgetUnder drops the cached results of every file under dir.
func (a *Auditor) ForgetUnder(dir string) {
	for p := range a.cache {
		if strings.HasPrefix(p, dir+string(filepath.Separator)) {
			delete(a.cache, p)
		}
	}
}
