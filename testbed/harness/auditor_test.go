package harness

import (
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// sealedCopy writes a sealed copy with the store's own encoders, so the
// audit is checked against the real format, and returns its metadata.
func sealedCopy(t *testing.T, dir string, id meta.SegmentID, start uint64, records int) (string, meta.Segment) {
	t.Helper()
	var frames []byte
	for i := 0; i < records; i++ {
		payload := []byte(strings.Repeat(string(rune('a'+i%26)), 100+i))
		frames = store.AppendFrame(frames, start+uint64(i), payload)
	}
	crc := crc32.Checksum(frames, crc32.MakeTable(crc32.Castagnoli))
	file := store.AppendFooter(append([]byte(nil), frames...), store.Footer{StartOffset: start, Length: uint64(records), ByteSize: int64(len(frames)), FramesCRC: crc})
	path := filepath.Join(dir, string(id)+".seg")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	seg := meta.Segment{ID: id, StartOffset: start, Length: uint64(records), ByteSize: int64(len(frames)), Sealed: true, Checksum: meta.CRC32C(crc), Replicas: []meta.BrokerID{1}, Version: 2}
	return path, seg
}

func TestAuditCopyFile(t *testing.T) {
	dir := t.TempDir()
	path, seg := sealedCopy(t, dir, "s-1", 1000, 20)
	if store.FooterSize != footerSize || store.FrameHeaderSize != frameHeaderSize {
		t.Fatalf("format constants differ from store's")
	}
	if err := AuditCopy(path, seg); err != nil {
		t.Fatalf("intact copy: %v", err)
	}
	wrong := seg
	wrong.Checksum = meta.CRC32C(12345)
	if err := AuditCopy(path, wrong); !errors.Is(err, ErrAudit) || !strings.Contains(err.Error(), "metadata checksum") {
		t.Fatalf("wrong metadata checksum: %v", err)
	}
	wrong = seg
	wrong.StartOffset = 999
	if err := AuditCopy(path, wrong); !errors.Is(err, ErrAudit) {
		t.Fatalf("wrong start offset: %v", err)
	}
	wrong = seg
	wrong.Length = 19
	if err := AuditCopy(path, wrong); !errors.Is(err, ErrAudit) {
		t.Fatalf("wrong length: %v", err)
	}
}

// Every fault the demo injects is caught by the audit.
func TestAuditCatchesInjectedFaults(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		for _, kind := range []string{"truncate", "extend", "bitflip", "bitflip-footer"} {
			dir := t.TempDir()
			path, seg := sealedCopy(t, dir, "s-2", 0, 10)
			var err error
			switch kind {
			case "truncate":
				_, err = TruncateCopy(path, rng)
			case "extend":
				_, err = ExtendCopy(path, 1+rng.Int64N(100), rng)
			case "bitflip":
				_, err = BitflipCopy(path, seg.ByteSize, rng)
			case "bitflip-footer":
				_, err = BitflipCopy(path, 0, rng) // anywhere, footer included
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := AuditCopy(path, seg); !errors.Is(err, ErrAudit) {
				t.Fatalf("seed %d %s: audit = %v, want ErrAudit", seed, kind, err)
			}
		}
	}
}

func TestAuditorCachesByFileVersion(t *testing.T) {
	dir := t.TempDir()
	path, seg := sealedCopy(t, dir, "s-3", 0, 50)
	a := NewAuditor()
	if err := a.Check(path, seg); err != nil {
		t.Fatal(err)
	}
	read := a.BytesRead
	if err := a.Check(path, seg); err != nil || a.BytesRead != read {
		t.Fatalf("second check of an unchanged file read it again (%d -> %d bytes), %v", read, a.BytesRead, err)
	}
	df, err := BitflipCopy(path, seg.ByteSize, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	a.Forget(path)
	if err := a.Check(path, seg); !errors.Is(err, ErrAudit) {
		t.Fatalf("after a bit flip at byte %d: %v", df.Offset, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(path, seg); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v", err)
	}
}
