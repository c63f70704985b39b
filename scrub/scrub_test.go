package scrub

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/store"
)

// segTable is the metadata side: the sealed segments by id.
type segTable map[meta.SegmentID]meta.Segment

func (t segTable) View() *meta.View {
	tb := meta.NewTable(1)
	for _, seg := range t {
		tb.Apply(1, meta.CreateSegment{Segment: meta.Segment{ID: seg.ID, StartOffset: seg.StartOffset, Replicas: seg.Replicas}})
		tb.Apply(2, meta.SealSegment{ID: seg.ID, Length: seg.Length, ByteSize: seg.ByteSize, Checksum: seg.Checksum})
	}
	return tb.View()
}

// countingCopies cancels ctx after n verifications, to stop a round midway.
type countingCopies struct {
	*store.DB
	n        int
	cancel   context.CancelFunc
	verified []meta.SegmentID
}

func (c *countingCopies) Verify(id meta.SegmentID, seg meta.Segment) error {
	c.verified = append(c.verified, id)
	if len(c.verified) == c.n && c.cancel != nil {
		c.cancel()
	}
	return c.DB.Verify(id, seg)
}

type fixture struct {
	dir  string
	db   *store.DB
	segs segTable
}

func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "store"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &fixture{dir: dir, db: db, segs: segTable{}}
	for i := 0; i < n; i++ {
		f.write(t, meta.SegmentID(fmt.Sprintf("s%03d", i)))
	}
	return f
}

func (f *fixture) write(t *testing.T, id meta.SegmentID) {
	t.Helper()
	if err := f.db.Create(id, 1000); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 20; r++ {
		if _, err := f.db.Append(id, []byte(fmt.Sprintf("record %d of %s, padded to some length ........", r, id))); err != nil {
			t.Fatal(err)
		}
	}
	seal, err := f.db.Seal(id)
	if err != nil {
		t.Fatal(err)
	}
	f.segs[id] = meta.Segment{ID: id, StartOffset: seal.StartOffset, Length: seal.Length, ByteSize: seal.ByteSize,
		Sealed: true, Checksum: seal.Checksum, Replicas: []meta.BrokerID{1}}
}

// flip flips one bit at byte at of the copy's file, keeping its size.
func (f *fixture) flip(t *testing.T, id meta.SegmentID, at int64) {
	t.Helper()
	path := f.db.Path(id)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) open(t *testing.T, copies Copies) *Scrubber {
	t.Helper()
	s, err := Open(Config{Dir: filepath.Join(f.dir, "scrub"), Self: 1, Logger: zerolog.Nop()}, copies, f.segs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoundFindsInPlaceCorruption(t *testing.T) {
	f := newFixture(t, 5)
	f.flip(t, "s002", f.segs["s002"].ByteSize/2)
	f.flip(t, "s004", 4) // a payload_len field: the frames end early in a full-size file
	s := f.open(t, f.db)
	if err := s.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	fi, err := f.db.Identity("s002")
	if err != nil {
		t.Fatal(err)
	}
	got, ok := s.Corrupt("s002", fi)
	if !ok || got.Offset <= 0 || got.Offset > f.segs["s002"].ByteSize {
		t.Fatalf("Corrupt(s002) = %+v, %v; want a finding inside the frames", got, ok)
	}
	fi4, _ := f.db.Identity("s004")
	if _, ok := s.Corrupt("s004", fi4); !ok {
		t.Fatal("damaged frame header in s004 not found")
	}
	for _, id := range []meta.SegmentID{"s000", "s001", "s003"} {
		fi, _ := f.db.Identity(id)
		if _, bad := s.Corrupt(id, fi); bad {
			t.Errorf("intact copy %s reported corrupt", id)
		}
	}
	if st := s.Stats(); st.CopiesVerified != 5 || st.Corrupt != 2 || st.Rounds != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The scrubber only reads (invariant 1): the copy is still there, same size.
	if fi2, _ := f.db.Identity("s002"); fi2 != fi {
		t.Fatalf("scrub changed the copy: %+v -> %+v", fi, fi2)
	}

	// Findings survive a restart (invariant 4).
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = f.open(t, f.db)
	defer s.Close()
	if _, ok := s.Corrupt("s002", fi); !ok {
		t.Fatal("finding lost across a restart")
	}

	// A copy deleted and replaced by a new file is not corrupt (invariant 3).
	if err := f.db.Delete("s002"); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget("s002"); err != nil {
		t.Fatal(err)
	}
	f.write(t, "s002")
	fi3, _ := f.db.Identity("s002")
	if _, ok := s.Corrupt("s002", fi3); ok {
		t.Fatal("replacement file taken as corrupt")
	}
	if err := s.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fs := s.Findings(); len(fs) != 1 || fs[0].Segment != "s004" {
		t.Fatalf("findings after the copy was replaced and verified: %+v", s.Findings())
	}
	// A copy that verifies intact again (the bit flipped back) is cleared.
	f.flip(t, "s004", 4)
	if err := s.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fs := s.Findings(); len(fs) != 0 {
		t.Fatalf("findings after s004 was repaired in place: %+v", fs)
	}
}

func TestRoundResumesAfterRestart(t *testing.T) {
	f := newFixture(t, 6)
	ctx, cancel := context.WithCancel(context.Background())
	c := &countingCopies{DB: f.db, n: 3, cancel: cancel}
	s := f.open(t, c)
	if err := s.Round(ctx); err == nil {
		t.Fatal("round not interrupted")
	}
	s.Close()

	c2 := &countingCopies{DB: f.db}
	s = f.open(t, c2)
	defer s.Close()
	if err := s.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	// s000..s002 were verified (s002's cursor write may or may not have
	// happened before the cancel was seen); the next round starts after
	// the saved cursor and wraps around.
	if len(c2.verified) != 6 || c2.verified[0] == "s000" {
		t.Fatalf("after restart verified %v; want all 6, starting after the saved cursor", c2.verified)
	}
	if c2.verified[0] != "s002" && c2.verified[0] != "s003" {
		t.Fatalf("resumed at %s, want s002 or s003", c2.verified[0])
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{}, {Dir: "x"}, {Dir: "x", Self: 1, BytesPerSecond: -1}, {Dir: "x", Self: 1, RoundPause: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", c)
		}
	}
}
