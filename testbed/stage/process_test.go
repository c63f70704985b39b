package stage

import (
	"testing"

	"github.com/malachi-log/malachi/heal"
)

func TestLostReported(t *testing.T) {
	for _, tc := range []struct {
		r    heal.Report
		want bool
	}{
		{heal.Report{Lost: []heal.LostSegment{{Segment: "x"}}}, true},
		{heal.Report{Failed: []heal.Failure{{Segment: "x", Reason: heal.NoIntactSource}}}, true},
		{heal.Report{Failed: []heal.Failure{{Segment: "x", Reason: heal.AllReplicasDead}}}, true},
		{heal.Report{Failed: []heal.Failure{{Segment: "x", Reason: heal.BackfillFailed}}}, false},
		{heal.Report{Lost: []heal.LostSegment{{Segment: "y"}}}, false},
	} {
		if got := lostReported(&tc.r, "x"); got != tc.want {
			t.Errorf("lostReported(%+v) = %v, want %v", tc.r, got, tc.want)
		}
	}
}
