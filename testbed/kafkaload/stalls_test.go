package kafkaload

import (
	"testing"
	"time"
)

func TestStallsMergeOverlappingWaitsAndNameTheirFaults(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 14, 10, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var h History
	ack := func(sent, acked float64) {
		h.AckTimes = append(h.AckTimes, at(acked))
		h.AckLatencies = append(h.AckLatencies, at(acked).Sub(at(sent)))
	}
	// The other partitions' records, fast, every half second, except
	// while the stalls below hold every partition.
	for x := 0.0; x < 45; x += 0.5 {
		if !(x > 10 && x < 16.5) && !(x > 30 && x < 31.5) && !(x > 35 && x < 38) {
			ack(x-0.01, x)
		}
	}
	ack(0, 0.02)  // fast
	ack(10, 14)   // a stall from 10 ...
	ack(11, 16.5) // ... overlapping: merged, to 16.5
	ack(12, 12.3) // fast, inside the stall
	ack(30, 31.5) // a second stall, with no fault active
	ack(40, 40.9) // under the threshold
	// 35..38: nothing acknowledged at all, and no record slow: a stall
	// all the same.

	stalls := Stalls(h, time.Second)
	if len(stalls) != 3 {
		t.Fatalf("stalls %+v: want 3", stalls)
	}
	if s := stalls[2]; !s.From.Equal(at(35)) || !s.To.Equal(at(38)) || s.Records != 0 {
		t.Fatalf("third stall %+v: want 35s..38s without a slow record (a gap in the acknowledgements)", s)
	}
	if s := stalls[0]; !s.From.Equal(at(10)) || !s.To.Equal(at(16.5)) || s.Records != 2 || s.Longest != 5500*time.Millisecond {
		t.Fatalf("first stall %+v: want 10s..16.5s, 2 records, longest 5.5s", s)
	}

	windows := []Window{
		{Kind: "kill", Start: at(10.05), End: at(20)}, // struck just after the record was sent
		{Kind: "diskfull", Start: at(2), End: at(12)},
		{Kind: "pause", Start: at(50)},                 // after every stall
		{Kind: "isolate", Start: at(1), End: at(5)},    // over before
		{Kind: "flapping", Start: at(16), End: at(25)}, // began inside the first stall, not at its start
	}
	longest := Attribute(stalls, windows, 100*time.Millisecond)
	if got := stalls[0].Faults; len(got) != 2 || got[0] != "diskfull" || got[1] != "kill" {
		t.Fatalf("first stall's faults %v: want [diskfull kill]", got)
	}
	if len(stalls[1].Faults) != 0 || len(stalls[2].Faults) != 0 {
		t.Fatalf("second and third stalls' faults %v, %v: want none", stalls[1].Faults, stalls[2].Faults)
	}
	want := map[string]time.Duration{"kill": 6500 * time.Millisecond, "diskfull": 6500 * time.Millisecond, "none": 3 * time.Second}
	if len(longest) != len(want) {
		t.Fatalf("longest by kind %v: want %v", longest, want)
	}
	for k, d := range want {
		if longest[k] != d {
			t.Fatalf("longest by kind %v: want %v", longest, want)
		}
	}
}
