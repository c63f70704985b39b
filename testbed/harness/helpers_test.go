package harness

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/meta"
)

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// malachidBinary builds cmd/malachid once per test run (skipped with
// -short).
func malachidBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the tests with real processes")
	}
	buildOnce.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "malachi-harness-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "malachid")
		buildErr = Build(context.Background(), root, "./cmd/malachid", buildBin)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildBin != "" {
		os.RemoveAll(filepath.Dir(buildBin))
	}
	os.Exit(code)
}

func mustCopyPath(t *testing.T, b *Broker, id meta.SegmentID) string {
	t.Helper()
	p, err := b.CopyPath(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
