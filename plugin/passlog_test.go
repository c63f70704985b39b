package plugin

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// The history numbers passes, serves them after since, survives a
// reopen (a restarted broker), and says what its bound dropped.
func TestPassLogKeepsNumbersAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	l, err := openPassLog(dir, t0, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		r := PassRecord{Broker: 2, Started: t0.Add(time.Duration(i) * time.Second), Ended: t0.Add(time.Duration(i)*time.Second + 100*time.Millisecond),
			ViewIndex: uint64(10 + i), Report: heal.Report{Index: uint64(10 + i), Dead: []meta.BrokerID{4}, Healed: []meta.SegmentID{"s-1"}}}
		if err := l.add(r); err != nil {
			t.Fatal(err)
		}
	}
	h := l.since(2, 0)
	got := h.Passes
	if h.First != 1 || h.Last != 5 || h.Dropped != 0 || h.More || len(got) != 3 || got[0].Seq != 3 || got[2].Seq != 5 {
		t.Fatalf("since 2: first %d last %d dropped %d more %v, %d passes (%+v)", h.First, h.Last, h.Dropped, h.More, len(got), got)
	}
	if got[0].ViewIndex != 12 || got[0].Report.Dead[0] != 4 || got[0].Report.Healed[0] != "s-1" || !got[0].Started.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("pass 3 did not round-trip: %+v", got[0])
	}
	if h := l.since(1, 2); !h.More || len(h.Passes) != 2 {
		t.Fatalf("limit 2 after 1: %d passes, more %v", len(h.Passes), h.More)
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}

	l, err = openPassLog(dir, t0.Add(time.Hour), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if !l.began.Equal(t0) {
		t.Fatalf("reopened history began %v, want %v (its first open)", l.began, t0)
	}
	if err := l.add(PassRecord{Broker: 2}); err != nil {
		t.Fatal(err)
	}
	h = l.since(0, 0)
	if got := h.Passes; len(got) != 6 || got[5].Seq != 6 {
		t.Fatalf("after a reopen: %d passes, last %+v; want 6, numbered on", len(got), got)
	}
}

func TestPassLogBoundDropsOldest(t *testing.T) {
	l, err := openPassLog(t.TempDir(), time.Now(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	for range passHistoryMax + 10 {
		if err := l.add(PassRecord{Broker: 1}); err != nil {
			t.Fatal(err)
		}
	}
	h := l.since(3, 1)
	if h.First != 11 || h.Last != passHistoryMax+10 || h.Dropped != 7 {
		t.Fatalf("first %d last %d dropped %d; want 11, %d, 7", h.First, h.Last, h.Dropped, passHistoryMax+10)
	}
	if got := h.Passes; got[0].Seq != 11 {
		t.Fatalf("oldest kept is %d, want 11", got[0].Seq)
	}
}

func TestParsePassQueryNamesTheBadParameter(t *testing.T) {
	for _, q := range []string{"since=-1", "since=x", "limit=0", "limit=100000", "limit=y"} {
		v, _ := url.ParseQuery(q)
		_, _, err := ParsePassQuery(v)
		if !errors.Is(err, meta.ErrInvalid) {
			t.Errorf("%s: %v, want meta.ErrInvalid", q, err)
		}
	}
	v, _ := url.ParseQuery("since=7&limit=3")
	if s, n, err := ParsePassQuery(v); err != nil || s != 7 || n != 3 {
		t.Errorf("since=7&limit=3: %d %d %v", s, n, err)
	}
}

// Every part of a heal report a pass history keeps reads back: a report
// with one of each list and event.
func TestPassRecordReportRoundTrips(t *testing.T) {
	r := PassRecord{Seq: 1, Report: heal.Report{Events: []heal.Event{{Kind: heal.EventHoldStarted, Segment: "s"}},
		Failed: []heal.Failure{{Segment: "s", Reason: heal.NoSpareBroker}}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back PassRecord
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if back.Report.Events[0].Kind != heal.EventHoldStarted || back.Report.Failed[0].Reason != heal.NoSpareBroker {
		t.Fatalf("read back %+v", back.Report)
	}
}

// A stopped broker's history is read from its data directory; a
// directory without one is an error naming it.
func TestReadPassHistoryFromADataDirectory(t *testing.T) {
	data := t.TempDir()
	l, err := openPassLog(data+"/passes", time.Now(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := l.add(PassRecord{Broker: 4, Report: heal.Report{Dead: []meta.BrokerID{2}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	h, err := ReadPassHistory(data, 4)
	if err != nil {
		t.Fatal(err)
	}
	if h.Broker != 4 || h.First != 1 || h.Last != 3 || len(h.Passes) != 3 || h.Passes[2].Report.Dead[0] != 2 {
		t.Fatalf("read %+v", h)
	}
	if _, err := ReadPassHistory(t.TempDir(), 4); err == nil || !strings.Contains(err.Error(), "passes") {
		t.Fatalf("a directory without a history: %v", err)
	}
}
