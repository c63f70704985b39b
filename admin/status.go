package admin

import (
	"encoding/json"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/plugin"
)

// DecodeStatus reads a broker's /v1/status document: the plugin's
// plugin.Status, decoded into the plugin's own types (their enums read
// names a newer broker adds as unknown values). ok is false for a
// disabled plugin ({"heal":"disabled"}) or a document that is no status.
func DecodeStatus(raw json.RawMessage) (plugin.Status, bool) {
	var st plugin.Status
	if len(raw) == 0 || json.Unmarshal(raw, &st) != nil {
		return plugin.Status{}, false
	}
	return st, st.Enabled
}

// LastPass returns the latest heal report of a status document, the time
// its pass started (its end minus its duration) and the instance's pass
// count; ok is false when the document holds no pass.
func LastPass(raw json.RawMessage) (r heal.Report, started time.Time, passes uint64, ok bool) {
	st, ok := DecodeStatus(raw)
	if !ok || st.LastPass == nil {
		return heal.Report{}, time.Time{}, 0, false
	}
	started = st.LastPassAt.Add(-time.Duration(st.LastPassSeconds * float64(time.Second)))
	return *st.LastPass, started, st.Passes, true
}
