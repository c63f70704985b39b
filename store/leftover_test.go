package store_test

import (
	"errors"
	"testing"

	"github.com/malachi-log/malachi/store"
)

// Tail tells a sealed copy (footer) from an unsealed one without loading
// either, and CopiesVersion moves with every copy created or deleted.
func TestTailAndCopiesVersion(t *testing.T) {
	db := open(t, t.TempDir(), store.Options{})
	v0 := db.CopiesVersion()
	fill(t, db, "sealed", 0, 5)
	if _, err := db.Seal("sealed"); err != nil {
		t.Fatal(err)
	}
	fill(t, db, "open", 0, 5)
	v1 := db.CopiesVersion()
	if v1 == v0 {
		t.Fatalf("CopiesVersion %d unchanged by two creates", v1)
	}
	seg := segment("sealed", 0, 5)
	tl, err := db.Tail("sealed")
	if err != nil || !tl.Footer || tl.Size != seg.ByteSize+store.FooterSize {
		t.Fatalf("Tail(sealed) = %+v, %v; want footer, size %d", tl, err, seg.ByteSize+store.FooterSize)
	}
	if err := db.Sync("open"); err != nil {
		t.Fatal(err)
	}
	if tl, err := db.Tail("open"); err != nil || tl.Footer {
		t.Fatalf("Tail(open) = %+v, %v; want no footer", tl, err)
	}
	if _, err := db.Tail("none"); !errors.Is(err, store.ErrUnknownCopy) {
		t.Fatalf("Tail(none): %v, want ErrUnknownCopy", err)
	}
	if err := db.Delete("sealed"); err != nil {
		t.Fatal(err)
	}
	if v2 := db.CopiesVersion(); v2 == v1 {
		t.Fatalf("CopiesVersion %d unchanged by a delete", v2)
	}
}
