package main

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

func TestTruncateCopyFile(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		path, orig := writeTemp(t, 5000)
		df, err := truncateCopyFile(path, rand.New(rand.NewPCG(seed, 0)))
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

func TestExtendCopyFile(t *testing.T) {
	path, orig := writeTemp(t, 3000)
	df, err := extendCopyFile(path, 777, rand.New(rand.NewPCG(7, 7)))
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
	if _, err := extendCopyFile(path, 0, rand.New(rand.NewPCG(1, 1))); err == nil {
		t.Fatal("extend by 0 bytes accepted")
	}
}

func TestBitflipCopyFile(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		path, orig := writeTemp(t, 4096)
		df, err := bitflipCopyFile(path, 1000, rand.New(rand.NewPCG(seed, 1)))
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
		if err := flipBitAt(path, df.Offset, df.Bit); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(readFile(t, path), orig) {
			t.Fatalf("seed %d: flipBitAt did not restore the file", seed)
		}
	}
}

func TestDeleteCopyFile(t *testing.T) {
	path, _ := writeTemp(t, 100)
	df, err := deleteCopyFile(path)
	if err != nil || df.SizeBefore != 100 || df.SizeAfter != -1 {
		t.Fatalf("%+v, %v", df, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
	if _, err := deleteCopyFile(path); err == nil {
		t.Fatal("deleting a missing copy succeeded")
	}
}

func TestFaultsOnEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.seg")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	if _, err := truncateCopyFile(path, rng); !errors.Is(err, errEmptyCopy) {
		t.Fatalf("truncate empty: %v", err)
	}
	if _, err := bitflipCopyFile(path, 0, rng); !errors.Is(err, errEmptyCopy) {
		t.Fatalf("bitflip empty: %v", err)
	}
}
