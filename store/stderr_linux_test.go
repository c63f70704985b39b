package store_test

import (
	"os"
	"testing"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/testbed/testlog"
)

// TestNothingWritesToStderr runs the store, Pebble included, with file
// descriptor 2 pointed at a file, and checks that the file stays empty:
// every message goes through the injected logger.
func TestNothingWritesToStderr(t *testing.T) {
	capture, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	saved, err := unix.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup2(int(capture.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			unix.Dup2(saved, 2)
			unix.Close(saved)
			restored = true
		}
	}
	defer restore() // t.Fatal runs it too, before the failure is printed

	logs := &testlog.Buffer{}
	opts := store.Options{Logger: zerolog.New(logs).Level(zerolog.DebugLevel), ConfirmMinFree: -1}
	dir := t.TempDir()
	for round := 0; round < 2; round++ {
		db, err := store.Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		id := meta.SegmentID([]string{"sa", "sb"}[round])
		fill(t, db, id, 0, 3)
		if _, err := db.Seal(id); err != nil {
			t.Fatal(err)
		}
		fi, err := db.Identity(id)
		if err == nil {
			err = db.Confirm(id, fi)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	restore()
	out, err := os.ReadFile(capture.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 0 {
		t.Fatalf("the store or Pebble wrote %d bytes to stderr: %q", len(out), out)
	}
	t.Logf("logger received %d bytes", len(logs.String()))
}
