package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/heal"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/plugin"
)

// row returns the line of the broker table for broker id.
func row(out string, id string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == id {
			return l
		}
	}
	return ""
}

// A broker the leader's last pass lists in auth_failed is shown as such,
// with the reason, and not as down; its segments are counted apart from
// those on down brokers. A certificate of any broker within 30 days of
// its end is named with its warning.
func TestStatusShowsAuthFailedAndExpiry(t *testing.T) {
	l := localCerts(t)
	stranger := localCerts(t) // broker 5 answers with another CA's certificate
	strangerAddr := fakeBroker(t, &stranger)
	const reason = `plugin: probe to broker 5: heal: broker not authenticated: pki: untrusted: "broker 5": signed by another CA (unknown authority)`
	failed := []heal.AuthFailure{{Broker: 5, Reason: reason}}
	soon := time.Now().Add(10 * 24 * time.Hour).Truncate(time.Second)
	st := plugin.Status{Broker: 1, Enabled: true, Leader: true, Passes: 3, AuthFailed: failed,
		LastPass: &heal.Report{Index: 7, Sealed: 3, UnderReplicated: 2, AuthFailed: failed},
		Certificates: []plugin.CertStatus{{File: "ca.crt", NotAfter: time.Now().Add(3650 * 24 * time.Hour)},
			{File: "broker.crt", NotAfter: soon, Warning: "expires in 240h0m0s: replace it and send SIGHUP"}}}
	snap := meta.Snapshot{Index: 7, ReplicationFactor: 2,
		Brokers:  []meta.Broker{{ID: 1}, {ID: 2, AdminAddr: freePortsT(t)}, {ID: 5, AdminAddr: strangerAddr}},
		Segments: []meta.Segment{seg("a", 1, 5), seg("b", 1, 2), seg("c", 5, 1)}}
	addr := fakeBrokerWith(t, &l, snap, st)
	args := []string{"status", "--admin", addr, "--certs-dir", l.ClientDir(), "--user", "viewer"}

	var out, errb strings.Builder
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	text := out.String()
	if r := row(text, "5"); !strings.Contains(r, "AUTH_FAILED") || strings.Contains(r, "DOWN") {
		t.Errorf("broker 5's row %q: want AUTH_FAILED, not DOWN\n%s", r, text)
	}
	if r := row(text, "2"); !strings.Contains(r, "DOWN") {
		t.Errorf("broker 2's row %q: want DOWN\n%s", r, text)
	}
	for _, want := range []string{
		"broker 5: auth_failed: " + reason,
		"with a replica on a down broker 1\n",
		"health (last heal pass, at index 7): under-replicated 2, failed 0, lost 0",
		"on a broker that failed authentication: 2",
		"WARNING: broker 1 certificate broker.crt (not after " + soon.UTC().Format(time.RFC3339) + "): expires in 240h0m0s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "certificate ca.crt") || strings.Contains(text, "INSECURE") {
		t.Errorf("status warns of a certificate ten years from its end, or of insecure mode:\n%s", text)
	}

	out.Reset()
	if code := run(append(args, "--json"), &out, &errb); code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, errb.String())
	}
	var cs clusterStatus
	if err := json.Unmarshal([]byte(out.String()), &cs); err != nil {
		t.Fatal(err)
	}
	if len(cs.Brokers) != 3 || cs.Brokers[2].AuthFailed != reason || cs.Brokers[2].Up || cs.Brokers[1].AuthFailed != "" ||
		cs.OnDownBrokers != 1 || cs.OnAuthFailedBrokers != 2 || cs.UnderReplicated != 2 || cs.PassIndex != 7 {
		cs.Heal = nil
		t.Errorf("status --json: %+v", cs)
	}
	if w := cs.Brokers[0].CertWarnings; len(w) != 1 || w[0].File != "broker.crt" || !w[0].NotAfter.Equal(soon) {
		t.Errorf("broker 1's certificate warnings: %+v", w)
	}
}

// The leader's last pass is where auth_failed is read when the status has
// no list of its own (an older plugin).
func TestStatusAuthFailedFromLastPass(t *testing.T) {
	raw, err := json.Marshal(plugin.Status{Enabled: true, Leader: true, LastPass: &heal.Report{AuthFailed: []heal.AuthFailure{{Broker: 2, Reason: "r"}}}})
	if err != nil {
		t.Fatal(err)
	}
	st := &clusterStatus{Brokers: []brokerState{{ID: 1, Up: true}, {ID: 2}}, Heal: raw}
	st.markAuthFailed()
	if st.Brokers[1].AuthFailed != "r" || st.Brokers[0].AuthFailed != "" {
		t.Fatalf("brokers %+v", st.Brokers)
	}
}

// A broker whose status says insecure is named on a line of its own.
func TestStatusSaysBrokersInsecure(t *testing.T) {
	addr := fakeBrokerWith(t, nil, meta.Snapshot{Index: 7, ReplicationFactor: 1}, plugin.Status{Broker: 1, Enabled: true, Leader: true, Insecure: true})
	var out, errb strings.Builder
	if code := run([]string{"status", "--admin", addr, "--insecure"}, &out, &errb); code != 0 {
		t.Fatalf("status --insecure: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "INSECURE MODE: brokers [1] report insecure = true in /v1/status") {
		t.Fatalf("status of an insecure broker:\n%s", out.String())
	}
}
func seg(id meta.SegmentID, replicas ...meta.BrokerID) meta.Segment {
	return meta.Segment{ID: id, Length: 1, ByteSize: 100, Sealed: true, Checksum: meta.CRC32C(1), Replicas: replicas}
}
