package heal

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/meta"
)

// TestClassify: the broker's classification of a copy, check by check and
// in its order, decided from facts.
func TestClassify(t *testing.T) {
	s := seg("a", 1, 2, 3) // ByteSize 1000
	for _, tc := range []struct {
		name   string
		f      Fact
		want   Kind
		size   int64
		intact bool
	}{
		{"latched", Fact{Flags: FactLatched, Why: "io error"}, Latched, 0, false},
		{"timed out", Fact{Flags: FactTimedOut}, TimedOut, 0, false},
		{"missing", Fact{Flags: FactMissing}, Missing, 0, false},
		{"stat failed is timed out", Fact{Flags: FactStatFailed, Why: "EACCES"}, TimedOut, 0, false},
		{"corrupt before size", Fact{Flags: FactCorrupt, Size: 1040, Dev: 1, Ino: 2}, Corrupt, 0, false},
		{"corrupt though confirmed", Fact{Flags: FactCorrupt | FactConfirmed, Size: 1040}, Corrupt, 0, false},
		{"empty is short", Fact{}, Short, 0, false},
		{"short", Fact{Size: 999, Dev: 1, Ino: 2}, Short, 999, false},
		{"exactly byte size is short", Fact{Size: 1000}, Short, 1000, false},
		{"exactly byte size, confirmed, still short", Fact{Flags: FactConfirmed, Size: 1000}, Short, 1000, false},
		{"overrun", Fact{Size: 1040, Dev: 1, Ino: 2}, Overrun, 1040, false},
		{"confirmed", Fact{Flags: FactConfirmed, Size: 1040, Dev: 1, Ino: 2}, KindUnknown, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.Segment = "a"
			if err := tc.f.Validate(); err != nil {
				t.Fatalf("valid fact refused: %v", err)
			}
			got := Classify(&s, &tc.f)
			if got != (Anomaly{Segment: "a", Kind: tc.want, Size: tc.size}) {
				t.Errorf("Classify = %+v, want %s size %d", got, tc.want, tc.size)
			}
			if Intact(&s, &tc.f) != tc.intact {
				t.Errorf("Intact = %v, want %v", !tc.intact, tc.intact)
			}
			var r ProbeReport
			r.Add(&s, tc.f)
			if (len(r.Facts) == 0) != tc.intact {
				t.Errorf("Add listed %d facts; intact %v", len(r.Facts), tc.intact)
			}
		})
	}
}

func TestFactValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Fact
		want string
	}{
		{"unknown bit", Fact{Flags: 1 << 7}, "bits 0x80 are not fact flags"},
		{"negative size", Fact{Size: -3}, "size -3 is negative"},
		{"two no-stat flags", Fact{Flags: FactMissing | FactLatched}, "at most one of missing"},
		{"missing with a size", Fact{Flags: FactMissing, Size: 4}, "carries a stat result"},
		{"latched and confirmed", Fact{Flags: FactLatched | FactConfirmed}, "carries a stat result"},
		{"timed out with identity", Fact{Flags: FactTimedOut, Ino: 9}, "carries a stat result"},
		{"stat failed and corrupt", Fact{Flags: FactStatFailed | FactCorrupt}, "carries a stat result"},
		{"long why", Fact{Flags: FactLatched, Why: strings.Repeat("x", MaxWhy+1)}, "at most 200"},
		{"bad segment", Fact{Segment: "../x"}, "starts with a dot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.f.Segment == "" {
				tc.f.Segment = "a"
			}
			r := ProbeReport{Broker: 2, Facts: []Fact{tc.f}}
			err := r.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
}

// Add allocates nothing for an intact copy, cuts a long Why at a rune
// boundary, and the wire form is compact.
func TestProbeReportAdd(t *testing.T) {
	s := seg("a", 1, 2, 3)
	var r ProbeReport
	ok := Fact{Flags: FactConfirmed, Size: 1040, Dev: 7, Ino: 8}
	if n := testing.AllocsPerRun(100, func() { r.Add(&s, ok) }); n != 0 || len(r.Facts) != 0 {
		t.Errorf("intact copy: %v allocs, %d facts", n, len(r.Facts))
	}
	r.Add(&s, Fact{Flags: FactLatched, Why: strings.Repeat("é", MaxWhy)}) // 2 bytes a rune
	r.Add(&s, Fact{Size: 1040, Dev: 7, Ino: 8})
	if len(r.Facts) != 2 || len(r.Facts[0].Why) > MaxWhy || r.Facts[0].Segment != "a" {
		t.Fatalf("facts %+v", r.Facts)
	}
	r.Broker = 1
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back ProbeReport
	if err := json.Unmarshal(b, &back); err != nil || back.Validate() != nil || len(back.Facts[0].Why) != len(r.Facts[0].Why) {
		t.Fatalf("round trip %+v: %v", back, err)
	}
	one, _ := json.Marshal(ProbeReport{Broker: 1, Facts: []Fact{{Segment: meta.SegmentID("seg-000000001"), Size: 1040, Dev: 7, Ino: 8}}})
	if want := `{"broker":1,"index":0,"copies":0,"facts":[{"s":"seg-000000001","n":1040,"d":7,"i":8}]}`; string(one) != want {
		t.Errorf("wire form %s, want %s", one, want)
	}
}
