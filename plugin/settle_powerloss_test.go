package plugin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
	"github.com/malachi-log/malachi/store/crashfs"
)

// The settle and confirm RPCs after a restart that found a footer only in
// the page cache (a process that died between writing it and its fsync),
// then a power loss: the copy they answered settled and confirmed is
// whole on the disk, and its confirmation names it. Over the store on
// store/crashfs; fails when the store trusts the page cache (Settle's
// already-settled branch without its fsync).
func TestSettleAndConfirmRPCsSurvivePowerLoss(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	fsys, err := crashfs.ForStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts := store.Options{FS: fsys, ConfirmMinFree: 1}
	db, err := store.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	const id = meta.SegmentID("p")
	seg := sealedCopy(t, db, id, 4, 1)
	path := db.Path(id)
	db.Close()
	// The copy as a process that died before its seal's fsync left it:
	// frames durable, the footer in the page cache only.
	fsys = fsys.Crash(nil)
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	ft := store.Footer{StartOffset: seg.StartOffset, Length: seg.Length, ByteSize: seg.ByteSize}
	ft.FramesCRC, _ = seg.Checksum.Value()
	if err := f.Truncate(seg.ByteSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(store.AppendFooter(nil, ft), seg.ByteSize); err != nil {
		t.Fatal(err)
	}
	f.Close()

	opts.FS = fsys
	if db, err = store.Open(dir, opts); err != nil { // the restart: the page cache is kept
		t.Fatal(err)
	}
	s := &server{db: db, log: zerolog.Nop(), metrics: newMetrics(prometheus.NewRegistry())}
	body, err := json.Marshal(SegmentsRequest{Segments: []meta.Segment{seg}})
	if err != nil {
		t.Fatal(err)
	}
	for _, rpc := range []func(context.Context, []byte) (any, error){s.settle, s.confirm} {
		resp, err := rpc(context.Background(), body)
		if err != nil {
			t.Fatal(err)
		}
		if it := resp.(BatchResponse).Items[0]; it.Code != "" {
			t.Fatalf("%s: %s", it.Code, it.Message)
		}
	}
	db.Close()

	opts.FS = fsys.Crash(nil) // the power is lost
	if db, err = store.Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Verify(id, seg); err != nil {
		t.Fatalf("settled and confirmed by the RPCs, after the power loss: %v", err)
	}
	if err := db.LoadConfirmations(); err != nil {
		t.Fatal(err)
	}
	fi, err := db.Identity(id)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := db.Confirmed(id, fi); err != nil || !ok {
		t.Fatalf("confirmed by the RPC, then not after the power loss: %v, %v", ok, err)
	}
}
