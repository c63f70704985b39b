package pass

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
)

// The attack: an injected snapshot says a sealed segment has byte_size 0,
// so every copy (263168 bytes of frames and the footer) looks overrun and
// is selected for settling. Each broker refuses the settle with
// ErrSealConflict, changing nothing. The segment is then reported
// seal_conflict on that pass and every later one, with nothing planned for
// it (no settle again, no backfill, no deletion), never healed, until the
// metadata is corrected.
func TestCoordinatorSealConflictFromSettle(t *testing.T) {
	real := seg("a", 1, 2, 3)
	real.Length, real.ByteSize = 64, 263168
	bad := real
	bad.Length, bad.ByteSize, bad.Checksum = 0, 0, meta.CRC32C(0)
	w := newWorld(4, 3, bad, seg("b", 1, 2, 3))
	for b := meta.BrokerID(1); b <= 3; b++ {
		w.anomaly(b, "a", heal.Overrun, real.ByteSize+40, false)
	}
	f := newFake(w)
	f.settleErr = fmt.Errorf("plugin: /settle to broker: store: seal conflict: settle a: ...: %w", heal.ErrSealConflict)
	c := coordinator(t, f, w.in.Now)

	rep, err := c.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(calls(f), "\n")
	slices.Sort(got) // settles run concurrently
	if !slices.Equal(got, []string{"settle a@1", "settle a@2", "settle a@3"}) {
		t.Fatalf("first pass calls:\n%s", got)
	}
	checkConflictReport(t, 1, rep, "settle_overrun on ")
	if len(rep.Settled) != 0 || len(rep.Confirmed) != 0 {
		t.Fatalf("first pass settled %v confirmed %v", rep.Settled, rep.Confirmed)
	}

	rep3 := f.reports[3]
	for pass := 2; pass <= 5; pass++ {
		// Pass 3: broker 3 does not answer (suspect); its copy's
		// conflict holds, and so does the segment's report.
		if pass == 3 {
			delete(f.reports, 3)
		} else {
			f.reports[3] = rep3
		}
		f.calls = nil
		rep, err = c.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := calls(f); got != "" {
			t.Fatalf("pass %d acted on a conflicting segment:\n%s", pass, got)
		}
		checkConflictReport(t, pass, rep, "")
		want := 1 // a, its copies neither healthy nor lost
		if pass == 3 {
			want++ // and b, with broker 3 suspect
		}
		if rep.UnderReplicated != want {
			t.Fatalf("pass %d: under_replicated %d, want %d", pass, rep.UnderReplicated, want)
		}
	}

	// The operator restores the true seal (a restore keeps the version):
	// the conflict lifts, the copies settle and are confirmed.
	f.snap.Segments[0] = real
	f.settleErr = nil
	f.calls = nil
	rep, err = c.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.FailedReason("a") != heal.ReasonNone || len(rep.Confirmed) != 3 {
		t.Fatalf("after the metadata was corrected: calls\n%s\nreport %+v", calls(f), rep)
	}
}

func checkConflictReport(t *testing.T, pass int, rep heal.Report, errPrefix string) {
	t.Helper()
	i := slices.IndexFunc(rep.Failed, func(f heal.Failure) bool { return f.Segment == "a" })
	if i < 0 || rep.Failed[i].Reason != heal.SealConflict || !slices.Equal(rep.Failed[i].Copies, []meta.BrokerID{1, 2, 3}) {
		t.Fatalf("pass %d: failed %+v, want a seal_conflict on copies [1 2 3]", pass, rep.Failed)
	}
	if !strings.HasPrefix(rep.Failed[i].Err, errPrefix) {
		t.Fatalf("pass %d: failure text %q, want it to start with %q", pass, rep.Failed[i].Err, errPrefix)
	}
	if n := len(rep.Failed); n != 1 {
		t.Fatalf("pass %d: %d failures %+v, want one", pass, n, rep.Failed)
	}
	if slices.Contains(rep.Healed, "a") || len(rep.Deleted) != 0 || rep.IsLost("a") {
		t.Fatalf("pass %d: healed %v deleted %v lost %v", pass, rep.Healed, rep.Deleted, rep.Lost)
	}
}

// A short copy whose broker refuses the in-place backfill with
// ErrSealConflict: reported seal_conflict (not backfill_failed), no
// command, no refusal held against the source, and no backfill again on
// the following passes.
func TestCoordinatorSealConflictFromBackfill(t *testing.T) {
	w := newWorld(4, 3, seg("a", 1, 2, 3)).anomaly(2, "a", heal.Short, 512, false)
	f := newFake(w)
	f.failFill = func(target meta.BrokerID, s meta.SegmentID) bool { return target == 2 }
	f.fillErr = fmt.Errorf("plugin: /backfill to broker 2: %w", heal.ErrSealConflict)
	c := coordinator(t, f, w.in.Now)
	for pass := 1; pass <= 3; pass++ {
		f.calls = nil
		rep, err := c.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got, want := calls(f), ""
		if pass == 1 {
			want = "backfill a 2<-1 from 0"
		}
		if got != want {
			t.Fatalf("pass %d calls:\n%s\nwant:\n%s", pass, got, want)
		}
		if rep.FailedReason("a") != heal.SealConflict || len(rep.Failed) != 1 || !slices.Equal(rep.Failed[0].Copies, []meta.BrokerID{2}) {
			t.Fatalf("pass %d: failed %+v, want a seal_conflict on copy 2", pass, rep.Failed)
		}
		if len(rep.Healed) != 0 || len(rep.Resumed) != 0 || rep.Refused != 0 || len(folded(c).Refused) != 0 {
			t.Fatalf("pass %d: healed %v resumed %v refused %d %v", pass, rep.Healed, rep.Resumed, rep.Refused, folded(c).Refused)
		}
	}
}

func TestReasonSealConflictText(t *testing.T) {
	b, err := json.Marshal(heal.Failure{Segment: "a", Reason: heal.SealConflict})
	if err != nil || !strings.Contains(string(b), `"reason":"seal_conflict"`) {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var f heal.Failure
	if err := json.Unmarshal(b, &f); err != nil || f.Reason != heal.SealConflict {
		t.Fatalf("Unmarshal(%s) = %+v, %v", b, f, err)
	}
}
