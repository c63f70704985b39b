package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCommandFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status"}, 2, "--admin is required"},
		{[]string{"status", "--admin", "localhost"}, 2, `--admin "localhost": want host:port`},
		{[]string{"plan", "--admin", ":"}, 2, "want host:port with both parts"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "0", "--records", "1", "--size", "1"}, 2, "--segments 0"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "1", "--records", "1"}, 2, "--size is required"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "1", "--records", "1", "--size", "1", "--prefix", "a/b"}, 2, `--prefix "a/b"`},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{nil, 2, "usage:"},
		{[]string{"status", "--admin", "127.0.0.1:1", "--insecure"}, 1, "broker unreachable: broker 127.0.0.1:1: GET /v1/health"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "1", "--records", "1", "--size", "4KiB", "--insecure"}, 1, "broker unreachable: broker 127.0.0.1:1: POST /v1/load"},
		{[]string{"status", "--admin", "127.0.0.1:1", "--certs-dir", "/nonexistent"}, 1, "--certs-dir /nonexistent: pki: certs directory"},
		{[]string{"demo", "--brokers", "-1"}, 2, "--brokers -1"},
		{[]string{"demo", "--poll", "0s"}, 2, "--poll 0s"},
		{[]string{"demo", "--malachid", "/nonexistent/malachid", "--json"}, 1, ""},
		{[]string{"demo", "--dir", "/", "--json"}, 1, "not empty"},
	} {
		var out, errb strings.Builder
		code := run(tc.args, &out, &errb)
		if tc.args != nil && tc.args[0] == "demo" && tc.code == 1 {
			// The demo's own failures are in its report, on stdout.
			want := tc.want
			if want == "" {
				want = `"error": "--malachid /nonexistent/malachid: stat /nonexistent/malachid: no such file or directory"`
			}
			if code != tc.code || !strings.Contains(out.String(), want) {
				t.Errorf("malachi %q: exit %d, stdout %s", tc.args, code, out.String())
			}
			continue
		}
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("malachi %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}

// TestDemoHelpExitsZero: `malachi demo -h` prints its flags and exits 0,
// as every other command's -h does.
func TestDemoHelpExitsZero(t *testing.T) {
	for _, cmd := range [][]string{{"demo", "-h"}, {"status", "-h"}, {"cert", "-h"}} {
		var out, errb bytes.Buffer
		if code := run(cmd, &out, &errb); code != 0 || out.Len()+errb.Len() == 0 {
			t.Errorf("malachi %s: exit %d, printed %d bytes", strings.Join(cmd, " "), code, out.Len()+errb.Len())
		}
	}
}
