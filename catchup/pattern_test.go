package catchup

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// WriteLikeTarget writes every byte, and issues the write-behind a target
// issues: each DefaultWriteBehind window started, the one before it waited
// for, the tail started last.
func TestWriteLikeTarget(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "copy"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := int64(2*DefaultWriteBehind + 3<<20 + 17)
	var rec wbRecorder
	src := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	if err := WriteLikeTarget(f, n, src, rec.writeback); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != n || !bytes.Equal(got[:2*len(src)], bytes.Repeat(src, 2)) || got[n-1] != src[(n-1)%int64(len(src))] {
		t.Fatalf("wrote %d bytes (want %d), starting %q", len(got), n, got[:32])
	}
	w := int64(DefaultWriteBehind)
	want := []wbCall{{0, w, false}, {w, w, false}, {0, w, true}, {2 * w, n - 2*w, false}}
	if len(rec.calls) != len(want) {
		t.Fatalf("writeback calls %v, want %v", &rec, want)
	}
	for i, c := range want {
		if rec.calls[i] != c {
			t.Fatalf("writeback calls %v, want %v", &rec, want)
		}
	}
	if err := WriteLikeTarget(f, 1, nil, rec.writeback); err == nil {
		t.Fatal("wrote a byte from no source bytes")
	}
	rec = wbRecorder{fail: func(int, wbCall) error { return syscall.EIO }}
	if err := WriteLikeTarget(f, n, src, rec.writeback); err == nil {
		t.Fatal("a failing writeback was not reported")
	}
}
