package harness

import (
	"bytes"
	"errors"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func writeTemp(t *testing.T, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + 3)
	}
	path := filepath.Join(t.TempDir(), "s-00001.seg")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTruncateCopy(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		path, orig := writeTemp(t, 5000)
		df, err := TruncateCopy(path, rand.New(rand.NewPCG(seed, 0)))
		if err != nil {
			t.Fatal(err)
		}
		got := readFile(t, path)
		if int64(len(got)) != df.SizeAfter || df.SizeAfter != df.Offset || df.SizeAfter >= df.SizeBefore || df.SizeBefore != 5000 {
			t.Fatalf("seed %d: %+v, file now %d bytes", seed, df, len(got))
		}
		if !bytes.Equal(got, orig[:len(got)]) {
			t.Fatalf("seed %d: the bytes before the cut changed", seed)
		}
	}
}

func TestExtendCopy(t *testing.T) {
	path, orig := writeTemp(t, 3000)
	df, err := ExtendCopy(path, 777, rand.New(rand.NewPCG(7, 7)))
	if err != nil {
		t.Fatal(err)
	}
	got := readFile(t, path)
	if len(got) != 3777 || df.SizeAfter != 3777 || df.SizeBefore != 3000 || df.Offset != 3000 {
		t.Fatalf("%+v, file now %d bytes", df, len(got))
	}
	if !bytes.Equal(got[:3000], orig) {
		t.Fatal("extend changed the existing bytes")
	}
	if bytes.Equal(got[3000:], make([]byte, 777)) {
		t.Fatal("extend wrote zeros, want random junk")
	}
	if _, err := ExtendCopy(path, 0, rand.New(rand.NewPCG(1, 1))); err == nil {
		t.Fatal("extend by 0 bytes accepted")
	}
}

func TestBitflipCopy(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		path, orig := writeTemp(t, 4096)
		df, err := BitflipCopy(path, 1000, rand.New(rand.NewPCG(seed, 1)))
		if err != nil {
			t.Fatal(err)
		}
		got := readFile(t, path)
		if len(got) != len(orig) || df.SizeAfter != df.SizeBefore {
			t.Fatalf("seed %d: size changed: %+v", seed, df)
		}
		if df.Offset < 0 || df.Offset >= 1000 {
			t.Fatalf("seed %d: flipped byte %d outside the limit 1000", seed, df.Offset)
		}
		diff := 0
		for i := range got {
			diff += bits.OnesCount8(got[i] ^ orig[i])
			if got[i] != orig[i] && int64(i) != df.Offset {
				t.Fatalf("seed %d: byte %d changed, reported %d", seed, i, df.Offset)
			}
		}
		if diff != 1 || got[df.Offset]^orig[df.Offset] != 1<<df.Bit {
			t.Fatalf("seed %d: %d bits differ, want exactly bit %d of byte %d", seed, diff, df.Bit, df.Offset)
		}
		if _, err := FlipBit(path, df.Offset, df.Bit); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(readFile(t, path), orig) {
			t.Fatalf("seed %d: FlipBit did not restore the file", seed)
		}
	}
}

func TestDeleteCopy(t *testing.T) {
	path, _ := writeTemp(t, 100)
	df, err := DeleteCopy(path)
	if err != nil || df.SizeBefore != 100 || df.SizeAfter != -1 {
		t.Fatalf("%+v, %v", df, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
	if _, err := DeleteCopy(path); err == nil {
		t.Fatal("deleting a missing copy succeeded")
	}
}

func TestFaultsOnEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.seg")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	if _, err := TruncateCopy(path, rng); !errors.Is(err, ErrEmptyCopy) {
		t.Fatalf("truncate empty: %v", err)
	}
	if _, err := BitflipCopy(path, 0, rng); !errors.Is(err, ErrEmptyCopy) {
		t.Fatalf("bitflip empty: %v", err)
	}
}

func TestFaultsAtPosition(t *testing.T) {
	path, orig := writeTemp(t, 1000)
	if _, err := TruncateCopyAt(path, 1000); err == nil {
		t.Fatal("truncate at the end accepted")
	}
	if _, err := FlipBit(path, 1000, 0); err == nil {
		t.Fatal("flip past the end accepted")
	}
	df, err := FlipBit(path, 500, 4)
	if err != nil || df.Offset != 500 || df.Bit != 4 {
		t.Fatalf("%+v, %v", df, err)
	}
	if got := readFile(t, path); got[500] != orig[500]^0x10 {
		t.Fatalf("byte 500 is %#x, want %#x", got[500], orig[500]^0x10)
	}
	if df, err = TruncateCopyAt(path, 300); err != nil || df.SizeAfter != 300 || len(readFile(t, path)) != 300 {
		t.Fatalf("%+v, %v", df, err)
	}
	if df, err = ExtendCopyWith(path, make([]byte, 50)); err != nil || df.SizeAfter != 350 || len(readFile(t, path)) != 350 {
		t.Fatalf("%+v, %v", df, err)
	}
}

// CopyFiles finds copies at any depth (a sharded copies directory) and
// skips what is not a copy.
func TestCopyFilesAnyLayout(t *testing.T) {
	b := &Broker{ID: 1, Dir: t.TempDir()}
	for _, p := range []string{"s-1.seg", "ab/s-2.seg", "lost+found/x", "ab/filler"} {
		full := filepath.Join(b.CopiesDir(), p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := b.CopyFiles()
	if err != nil || len(files) != 2 || files["s-1"] != filepath.Join(b.CopiesDir(), "s-1.seg") || files["s-2"] != filepath.Join(b.CopiesDir(), "ab", "s-2.seg") {
		t.Fatalf("CopyFiles = %v, %v", files, err)
	}
	if _, err := b.CopyPath("s-3"); !errors.Is(err, ErrNoCopy) {
		t.Fatalf("CopyPath of a missing copy: %v, want ErrNoCopy", err)
	}
	empty := &Broker{ID: 2, Dir: filepath.Join(t.TempDir(), "never")}
	if files, err := empty.CopyFiles(); err != nil || len(files) != 0 {
		t.Fatalf("CopyFiles of a missing directory = %v, %v", files, err)
	}
}
