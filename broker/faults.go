package broker

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"syscall"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// Fault injection (fault_injection = true only): POST /v1/faults/latch/{id}
// latches a copy through faultFS, the store's FS with an armed path that
// fails its next open with EIO. Every other fault is done to a copy's file
// by testbed/harness.

// faultKinds are the faults POST /v1/faults/{kind}/{id} injects: only
// the latch, which needs the store to see an I/O error. Every fault done
// to a copy's file (delete, truncate, extend, bit flip) is done by the
// test harness (testbed/harness) on the file itself.
var faultKinds = []string{"latch"}

// parseFault checks the path of POST /v1/faults/{kind}/{id}; the body
// must be empty or {}.
func parseFault(kind, pathID string, body []byte) (string, meta.SegmentID, error) {
	if !slices.Contains(faultKinds, kind) {
		return "", "", fmt.Errorf("%w: fault %q: want latch (file faults are done by the test harness)", errBadRequest, kind)
	}
	id, err := parseSegmentID(pathID)
	if err != nil {
		return "", "", err
	}
	var req struct{}
	if err := decodeJSON(body, &req); err != nil {
		return "", "", err
	}
	return kind, id, nil
}

// fault latches a local copy: its next I/O fails as a failing disk's
// would (fault_injection only).
func (b *Server) fault(r *http.Request, body []byte) (any, error) {
	kind, id, err := parseFault(r.PathValue("kind"), r.PathValue("id"), body)
	if err != nil {
		return nil, err
	}
	path := b.db.Path(id)
	if _, serr := os.Stat(path); serr != nil {
		return nil, fmt.Errorf("%w: copy %s: %v", errNotFound, id, serr)
	}
	b.faults.arm(path)
	_, _ = b.db.DurableEnd(id)
	if b.db.LatchErr(id) == nil {
		return nil, fmt.Errorf("malachid: latch %s: the copy did not latch", id)
	}
	b.log.Warn().Str("fault", kind).Str("segment", string(id)).Msg("fault injected")
	return map[string]string{"fault": kind, "segment": string(id)}, nil
}

// faultFS wraps the store's FS: an armed path fails its next OpenFile with
// EIO, which latches the copy (fault_injection only).
type faultFS struct {
	store.FS
	mu    sync.Mutex
	armed map[string]bool
}

func newFaultFS(fs store.FS) *faultFS { return &faultFS{FS: fs, armed: map[string]bool{}} }

func (f *faultFS) arm(path string) {
	f.mu.Lock()
	f.armed[path] = true
	f.mu.Unlock()
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	f.mu.Lock()
	hit := f.armed[name]
	delete(f.armed, name)
	f.mu.Unlock()
	if hit {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EIO}
	}
	return f.FS.OpenFile(name, flag, perm)
}
