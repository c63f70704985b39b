package harness

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/plugin"
)

// fakeHistory answers like a broker's GET /v1/passes: the passes kept
// (seqs contiguous from recs[0]), at most page of them per answer.
type fakeHistory struct {
	began  time.Time
	recs   []plugin.PassRecord
	leader bool
	page   int
	calls  int
}

var t0 = time.Unix(1000, 0)

// add appends passes first..last (by the seq numbers given), pass n
// ending n seconds after t0.
func (h *fakeHistory) add(first, last uint64) {
	for n := first; n <= last; n++ {
		h.recs = append(h.recs, plugin.PassRecord{Seq: n, Started: t0.Add(time.Duration(n)*time.Second - 500*time.Millisecond), Ended: t0.Add(time.Duration(n) * time.Second)})
	}
}

func (h *fakeHistory) pager() passPager {
	return func(_ context.Context, since uint64, limit int) (plugin.PassHistory, error) {
		h.calls++
		if limit <= 0 {
			limit = h.page
		}
		out := plugin.PassHistory{Leader: h.leader, Began: h.began, Passes: []plugin.PassRecord{}}
		if len(h.recs) == 0 {
			return out, nil
		}
		out.First, out.Last = h.recs[0].Seq, h.recs[len(h.recs)-1].Seq
		if since+1 < out.First {
			out.Dropped = out.First - since - 1
		}
		i := 0
		for i < len(h.recs) && h.recs[i].Seq <= since {
			i++
		}
		for ; i < len(h.recs) && len(out.Passes) < limit; i++ {
			out.Passes = append(out.Passes, h.recs[i])
		}
		out.More = i < len(h.recs)
		return out, nil
	}
}

func seqs(recs []plugin.PassRecord) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

func sameSeqs(got []plugin.PassRecord, from, to uint64) bool {
	s := seqs(got)
	if len(s) != int(to-from+1) {
		return false
	}
	for i, n := range s {
		if n != from+uint64(i) {
			return false
		}
	}
	return true
}

// A feed reads a broker's passes from the first that ended at or after
// its start, every one once across calls and pages, and numbers the
// passes read against the ones the history holds.
func TestPassFeedReadsEveryPassOnce(t *testing.T) {
	ctx := context.Background()
	h := &fakeHistory{began: t0, leader: true, page: 7}
	h.add(1, 200)
	f := NewPassFeed(t0.Add(150 * time.Second)) // passes 150 on
	got, leads, err := f.read(ctx, 3, h.pager())
	if err != nil || !leads {
		t.Fatalf("read: leads %v, err %v", leads, err)
	}
	if !sameSeqs(got, 150, 200) {
		t.Fatalf("first read: %v, want 150..200", seqs(got))
	}
	h.add(201, 230)
	got, _, _ = f.read(ctx, 3, h.pager())
	if !sameSeqs(got, 201, 230) {
		t.Fatalf("second read: %v, want 201..230", seqs(got))
	}
	got, _, _ = f.read(ctx, 3, h.pager())
	if len(got) != 0 {
		t.Fatalf("nothing new, read %v", seqs(got))
	}
	if f.Problem() != "" || f.Unread != 0 || len(f.Leaders) != 1 || f.Leaders[0] != 3 {
		t.Errorf("problem %q unread %d leaders %v", f.Problem(), f.Unread, f.Leaders)
	}
	// Read counts what next returns; read alone does not count.
	f.Read = 81
	if s := f.Summary(); s != "heal passes read: 81 of 81 (leader 3's history)" {
		t.Errorf("summary %q", s)
	}
}

// A feed that began before every pass a history keeps reads them all,
// and counts the passes its bound dropped before them as unread.
func TestPassFeedSeekPastTheBound(t *testing.T) {
	ctx := context.Background()
	h := &fakeHistory{began: t0, leader: true, page: 512}
	h.add(41, 60)
	f := NewPassFeed(t0)
	got, _, err := f.read(ctx, 1, h.pager())
	if err != nil || !sameSeqs(got, 41, 60) {
		t.Fatalf("read %v (err %v), want 41..60", seqs(got), err)
	}
	if f.Unread != 40 || !strings.Contains(f.Problem(), "passes 1 to 40 were dropped unread") {
		t.Errorf("unread %d, problem %q", f.Unread, f.Problem())
	}
}

// A pass dropped by the bound after the cursor, a skip in the numbering
// and a history that began anew are gaps; the passes after them are
// still read.
func TestPassFeedGaps(t *testing.T) {
	ctx := context.Background()
	h := &fakeHistory{began: t0, leader: true, page: 512}
	h.add(1, 10)
	f := NewPassFeed(t0)
	if got, _, _ := f.read(ctx, 2, h.pager()); !sameSeqs(got, 1, 10) {
		t.Fatalf("read %v", seqs(got))
	}
	h.recs = h.recs[:0]
	h.add(14, 15) // 11..13 dropped before they were read
	h.add(17, 18) // 16 skipped
	got, _, _ := f.read(ctx, 2, h.pager())
	if want := []uint64{14, 15, 17, 18}; len(got) != 4 || got[0].Seq != 14 || got[3].Seq != 18 {
		t.Fatalf("read %v, want %v", seqs(got), want)
	}
	if f.Unread != 4 || len(f.Gaps) != 2 || !strings.Contains(f.Gaps[0], "dropped passes 11 to 13") || !strings.Contains(f.Gaps[1], "skips passes 16 to 16") {
		t.Errorf("unread %d gaps %q", f.Unread, f.Gaps)
	}
	if s := f.Summary(); !strings.HasPrefix(s, "heal passes read: 0 of 4") {
		t.Errorf("summary %q", s)
	}

	// The data directory replaced while it led: a gap; its new history
	// is read from the start.
	h.began, h.recs = t0.Add(time.Hour), nil
	h.add(1, 3)
	got, _, _ = f.read(ctx, 2, h.pager())
	if !sameSeqs(got, 1, 3) || len(f.Gaps) != 3 || !strings.Contains(f.Gaps[2], "began anew") {
		t.Errorf("after a new history: read %v, gaps %q", seqs(got), f.Gaps)
	}
}

// A broker that does not lead is read, and said not to lead; a leader
// change shows in the summary.
func TestPassFeedLeaders(t *testing.T) {
	ctx := context.Background()
	a := &fakeHistory{began: t0, leader: false, page: 512}
	a.add(1, 5)
	b := &fakeHistory{began: t0, leader: true, page: 512}
	b.add(1, 2)
	f := NewPassFeed(t0)
	f.leading[1] = true
	if got, leads, _ := f.read(ctx, 1, a.pager()); leads || !sameSeqs(got, 1, 5) || f.leading[1] {
		t.Fatalf("deposed leader: read %v, leads %v", seqs(got), leads)
	}
	f.Leaders = append(f.Leaders, 1) // it led when the feed began
	if _, leads, _ := f.read(ctx, 4, b.pager()); !leads || !f.leading[4] {
		t.Fatal("new leader not said to lead")
	}
	if s := f.Summary(); !strings.Contains(s, "the leader changed: histories of brokers 1, then 4") {
		t.Errorf("summary %q", s)
	}
}
