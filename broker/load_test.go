package broker

import (
	"testing"

	"github.com/malachi-log/malachi/meta"
)

// TestLoadIDsHaveOneDash: --prefix t- makes t-00001, not t--00001; the
// default prefix s makes s-00001.
func TestLoadIDsHaveOneDash(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		n      int
		want   meta.SegmentID
	}{
		{"s", 1, "s-00001"},
		{"t-", 1, "t-00001"},
		{"a-b", 123456, "a-b-123456"},
	} {
		if got := loadID(tc.prefix, tc.n); got != tc.want {
			t.Errorf("loadID(%q, %d) = %q, want %q", tc.prefix, tc.n, got, tc.want)
		}
	}
}

// TestNextLoadNumber: a load without First continues after the highest
// number of its prefix and ignores ids of other prefixes that share its
// first letters.
func TestNextLoadNumber(t *testing.T) {
	tab := meta.NewTable(1)
	for i, id := range []meta.SegmentID{"s-00000", "s-00007", "s-00003", "s-x", "s-extra-00099", "t-00050", "sx-00090"} {
		if err := tab.Apply(uint64(i+1), meta.CreateSegment{Segment: meta.Segment{ID: id, Replicas: []meta.BrokerID{1}}}); err != nil {
			t.Fatal(err)
		}
	}
	v := tab.View()
	for _, tc := range []struct {
		prefix string
		want   int
	}{{"s", 8}, {"s-", 8}, {"t", 51}, {"u", 0}, {"s-extra", 100}, {"sx", 91}} {
		if got := nextLoadNumber(v, tc.prefix); got != tc.want {
			t.Errorf("nextLoadNumber(%q) = %d, want %d", tc.prefix, got, tc.want)
		}
	}
}

// TestSecondLoadMakesNewIDs: two loads of the same prefix through the
// admin API both succeed (the second failed with segment_exists), the
// second numbering on from the first.
func TestSecondLoadMakesNewIDs(t *testing.T) {
	f := newAdminFixture(t)
	for i := 0; i < 2; i++ {
		if code, a := f.do(t, "operator", "POST", "/v1/load", `{"segments":2,"records_per_segment":2,"record_size":8,"prefix":"t-"}`); code != 200 {
			t.Fatalf("load %d: HTTP %d %+v", i+1, code, a)
		}
	}
	snap := f.b.node.Snapshot()
	var ids []meta.SegmentID
	for _, s := range snap.Segments {
		ids = append(ids, s.ID)
	}
	want := []meta.SegmentID{"t-00000", "t-00001", "t-00002", "t-00003"}
	if len(ids) != len(want) {
		t.Fatalf("segments %v, want %v", ids, want)
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("segments %v, want %v", ids, want)
		}
	}
}
