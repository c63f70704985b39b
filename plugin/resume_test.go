package plugin

import (
	"errors"
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/catchup"
	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/store"
)

// A backfill's target that cannot open its copy where the transfer resumes
// fails before the source is read, with an error wrapping
// heal.ErrNoDurableEnd that keeps that meaning across the wire (the
// coordinator then holds it against the target, not the source); a copy
// whose own seal disagrees stays a seal conflict.
func TestBackfillTargetFailureIsNoDurableEnd(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	seg := sealedCopy(t, db, "a", 5, 1)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = resumeSink{catchup.StoreSink{DB: db}}.OpenTarget(seg)
	if !errors.Is(err, heal.ErrNoDurableEnd) || !errors.Is(err, store.ErrClosed) {
		t.Fatalf("open on a closed store: %v, want heal.ErrNoDurableEnd wrapping store.ErrClosed", err)
	}
	code, status := errCodes.Encode(err)
	if code != "no_durable_end" || status != 409 {
		t.Fatalf("wire code %q %d, want no_durable_end 409", code, status)
	}
	if back := errCodes.Decode(code, err.Error()); !errors.Is(back, heal.ErrNoDurableEnd) {
		t.Fatalf("decoded %v, want heal.ErrNoDurableEnd", back)
	}
	conflict := fmt.Errorf("%w: %w", heal.ErrNoDurableEnd, store.ErrSealConflict)
	if code, _ := errCodes.Encode(conflict); code != "seal_conflict" {
		t.Fatalf("a seal conflict on open is coded %q, want seal_conflict", code)
	}
}
