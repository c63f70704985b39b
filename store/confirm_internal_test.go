package store

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
)

// A confirmation DB holding two keys for one segment (an older build could
// leave that after a crash between its range delete and its set) is
// repaired at open: the last key in key order stands, the other is
// deleted, and Confirmed answers from the one left.
func TestLoadConfirmedKeepsOneKeyPerSegment(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Create("k", 0); err != nil {
		t.Fatal(err)
	}
	first := FileIdentity{Dev: 1, Ino: 2, Size: 3}
	if err := db.Confirm("k", first); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	second := FileIdentity{Dev: 1, Ino: 2, Size: 99} // sorts after first
	conf, err := pebble.Open(filepath.Join(dir, "confirm"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := conf.Set(confirmKey("k", second), nil, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	conf.Close()

	db, err = Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := db.Confirmed("k", second); err != nil || !ok {
		t.Fatalf("Confirmed(last key) = %v, %v", ok, err)
	}
	if ok, _ := db.Confirmed("k", first); ok {
		t.Fatal("the older duplicate still confirms")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	conf, err = pebble.Open(filepath.Join(dir, "confirm"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conf.Close()
	got, err := loadConfirmed(conf)
	if err != nil || len(got) != 1 || got["k"] != second {
		t.Fatalf("after the repair: %v, %v", got, err)
	}
	if _, closer, err := conf.Get(confirmKey("k", first)); err == nil {
		closer.Close()
		t.Fatal("the duplicate key is still in Pebble")
	}
}

func TestParseConfirmKeyRoundTrip(t *testing.T) {
	fi := FileIdentity{Dev: 7, Ino: 1 << 40, Size: 12345}
	id, got, ok := parseConfirmKey(confirmKey("seg-1", fi))
	if !ok || id != "seg-1" || got != fi {
		t.Fatalf("parse = %q %+v %v", id, got, ok)
	}
	for _, bad := range [][]byte{nil, []byte("c"), append([]byte("xseg"), make([]byte, 25)...), append([]byte("cseg\x01"), make([]byte, 24)...)} {
		if _, _, ok := parseConfirmKey(bad); ok {
			t.Errorf("parsed malformed key %q", bad)
		}
	}
}

// BenchmarkConfirmed: one Confirmed of a confirmed copy (lookup=memory, the
// store's path) against one Pebble Get of the same key in the same DB
// (lookup=pebble-get, what Confirmed did before), over 2,000 confirmed
// copies.
func BenchmarkConfirmed(b *testing.B) {
	const n = 2000
	db, err := Open(b.TempDir(), Options{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ids := make([]meta.SegmentID, n)
	for i := range ids {
		ids[i] = meta.SegmentID(fmt.Sprintf("s-%05d", i))
		if err := db.Create(ids[i], 0); err != nil {
			b.Fatal(err)
		}
		if err := db.Confirm(ids[i], FileIdentity{Dev: 1, Ino: uint64(i), Size: 4096}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("lookup=memory", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if ok, err := db.Confirmed(ids[i%n], FileIdentity{Dev: 1, Ino: uint64(i % n), Size: 4096}); !ok || err != nil {
				b.Fatal(ok, err)
			}
			i++
		}
	})
	b.Run("lookup=pebble-get", func(b *testing.B) {
		b.ReportAllocs()
		conf, err := db.confirmDB("bench", ids[0], false)
		if err != nil {
			b.Fatal(err)
		}
		i := 0
		for b.Loop() {
			_, closer, err := conf.Get(confirmKey(ids[i%n], FileIdentity{Dev: 1, Ino: uint64(i % n), Size: 4096}))
			if err != nil {
				b.Fatal(err)
			}
			closer.Close()
			i++
		}
	})
}
