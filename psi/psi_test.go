package psi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	for _, c := range []struct {
		file string
		want Resource
	}{
		{"io", Resource{Known: true, HasFull: true,
			Some: Line{Avg10: 0.66, Avg60: 0.92, Avg300: 6.19, Total: 2214394},
			Full: Line{Avg60: 0.31, Avg300: 4.18, Total: 1593821}}},
		{"cpu-some-only", Resource{Known: true, Some: Line{Avg10: 41.5, Avg60: 12, Avg300: 3.25, Total: 99}}},
		{"cpu-both", Resource{Known: true, HasFull: true, Some: Line{Avg10: 1, Avg60: 2, Avg300: 3, Total: 4}}},
		{"extra-field", Resource{Known: true, Some: Line{Avg10: 0.66, Avg60: 0.92, Avg300: 6.19, Total: 5}}},
		{"absent", Resource{}},
	} {
		got, err := ReadFile(filepath.Join("testdata", c.file))
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.file, got, err, c.want)
		}
	}
}

// A malformed file is an error naming the file, the line and the field.
func TestReadFileMalformed(t *testing.T) {
	for file, want := range map[string]string{
		"bad-avg10":      `testdata/bad-avg10: line 1 (some): avg10 = "zero": want a percentage`,
		"bad-total":      `testdata/bad-total: line 1 (some): total = "-3"`,
		"missing-avg300": `testdata/missing-avg300: line 1 (some): "avg10=0.66 avg60=0.92 total=5": want each of avg10, avg60, avg300 and total once`,
		"no-some":        `testdata/no-some: no "some" line`,
		"bad-kind":       `testdata/bad-kind: line 1: "partial"`,
	} {
		got, err := ReadFile(filepath.Join("testdata", file))
		if err == nil || !strings.Contains(err.Error(), want) || got.Known {
			t.Errorf("%s: %+v, %v; want an error containing %s", file, got, err, want)
		}
	}
}

func TestReader(t *testing.T) {
	p, err := Reader{Dir: filepath.Join(t.TempDir(), "pressure")}.Read()
	if err != nil || p.IO.Known || p.CPU.Known {
		t.Fatalf("no directory: %+v, %v; want both unknown and no error", p, err)
	}
	dir := t.TempDir()
	copyFile(t, "testdata/cpu-some-only", filepath.Join(dir, "cpu"))
	p, err = Reader{Dir: dir}.Read()
	if err != nil || p.IO.Known || !p.CPU.Known || p.CPU.Some.Avg10 != 41.5 {
		t.Fatalf("cpu only: %+v, %v", p, err)
	}
	copyFile(t, "testdata/bad-total", filepath.Join(dir, "io"))
	p, err = Reader{Dir: dir}.Read()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "io")) || p.IO.Known || !p.CPU.Known {
		t.Fatalf("malformed io: %+v, %v; want an error naming io and cpu still read", p, err)
	}
}

// The running kernel's files, where it has them, parse.
func TestReadProc(t *testing.T) {
	if _, err := (Reader{}).Read(); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
