package heal

import (
	"encoding/json"
	"testing"
)

// A report from a newer broker decodes: enum names this build does not
// know read as unknown values instead of failing the whole report, and
// the known fields around them are kept.
func TestReportDecodesUnknownNames(t *testing.T) {
	raw := `{"index":7,"under_replicated":1,
		"failed":[{"segment":"a","reason":"quantum_flux"},{"segment":"b","reason":"no_spare_broker"}],
		"lost":[{"segment":"c","reason":"eaten"}],
		"leftovers":[{"broker":2,"cause":"cosmic_ray","copies":1}],
		"events":[{"kind":"new_event","segment":"d"}]}`
	var r Report
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if r.Index != 7 || len(r.Failed) != 2 || r.Failed[0].Reason != ReasonUnknown || r.Failed[1].Reason != NoSpareBroker ||
		r.Lost[0].Reason != ReasonUnknown || r.Leftovers[0].Cause != CauseUnknown || r.Leftovers[0].Copies != 1 {
		t.Fatalf("decoded %+v", r)
	}
	if r.Failed[0].Reason.String() != "unknown" || r.Leftovers[0].Cause.String() != "unknown" {
		t.Errorf("unknown values print as %q and %q, want unknown", r.Failed[0].Reason, r.Leftovers[0].Cause)
	}
}
